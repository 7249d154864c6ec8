#!/usr/bin/env python3
"""Fault cases of the dist layer under mpirun (core-dist-faults).

late  rank 1 never arrives at an all_reduce: rank 0 must report TIMEOUT
      naming the collective and itself after the plugin's timeout (1.5 s
      here), its CUnit run must pass, and the job must end by itself.
kill  rank 1 is killed before the all_reduce: the job must end (rank 0
      by its timeout or by the launcher) well within the limit, with a
      non-zero status that names rank 1's death.

Usage: dist_fault.py MPIRUN TEST_DIST   |   dist_fault.py --selftest
"""
import re
import subprocess
import sys
import time

LIMIT_S = 45


def check_late(out, seconds):
    """Problems with a 'late' run's output (empty list: it passed)."""
    bad = []
    m = re.search(r'rank 0: KEEL_STATUS_TIMEOUT after ([0-9.]+) s: (.*)', out)
    if not m:
        bad.append('rank 0 did not report KEEL_STATUS_TIMEOUT')
    else:
        took = float(m.group(1))
        if not 1.4 <= took < 5.0:
            bad.append(f'rank 0 gave up after {took} s, not about 1.5 s')
        if 'all_reduce' not in m.group(2) or 'rank 0' not in m.group(2):
            bad.append('the error does not name the collective and rank')
    # Rank 0's CUnit run must pass. Rank 1 is usually ended by mpirun
    # once rank 0 exits (MPI is left unfinalized on purpose): no summary
    # from it is expected, but any that appears must pass too.
    runs = re.findall(r'tests\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)', out)
    if not runs or any(r[3] != '0' or r[2] != r[0] for r in runs):
        bad.append(f'the CUnit run(s) must pass: {runs}')
    if seconds >= LIMIT_S:
        bad.append(f'the job took {seconds:.1f} s')
    return bad


def check_kill(out, rc, seconds):
    bad = []
    if rc == 0:
        bad.append('mpirun reported success although rank 1 died')
    if not re.search(r'rank 1\b.*(signal 9|Killed)', out, re.S):
        bad.append('nothing says rank 1 was killed')
    if seconds >= LIMIT_S:
        bad.append(f'the job took {seconds:.1f} s')
    return bad


def run(cmd):
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True,
                           timeout=LIMIT_S + 15)
        out, rc = p.stdout, p.returncode
    except subprocess.TimeoutExpired as e:
        out, rc = (e.stdout or b'').decode(errors='replace'), -1
    return out, rc, time.monotonic() - t0


def selftest():
    good_late = ('rank 0: KEEL_STATUS_TIMEOUT after 1.50 s: '
                 'keel_dist_all_reduce on rank 0 ...\n'
                 '  tests 1 1 1 0 0\n  tests 1 1 1 0 0\n')
    assert check_late(good_late, 3.0) == []
    # Each of these must be caught.
    assert check_late(good_late.replace('TIMEOUT', 'OK'), 3.0)
    assert check_late(good_late.replace('1.50', '0.10'), 3.0)
    assert check_late(good_late.replace('all_reduce', 'x'), 3.0)
    assert check_late(good_late.replace('1 1 1 0 0\n', '1 1 0 1 0\n', 1),
                      3.0)
    assert check_late(good_late.replace('tests', 'x'), 3.0)
    assert check_late(good_late, LIMIT_S + 1)
    good_kill = 'mpirun noticed that process rank 1 ... signal 9 (Killed).'
    assert check_kill(good_kill, 137, 2.0) == []
    assert check_kill(good_kill, 0, 2.0)
    assert check_kill('rank 0 exited', 1, 2.0)
    assert check_kill(good_kill, 1, LIMIT_S)
    print('dist_fault.py self-test: 11 checks, every broken case caught')
    return 0


def main(argv):
    if len(argv) == 2 and argv[1] == '--selftest':
        return selftest()
    if len(argv) != 3:
        print(__doc__)
        return 2
    mpirun, prog = argv[1], argv[2]
    base = [mpirun, '--bind-to', 'none', '-np', '2', prog]
    failed = False
    out, rc, s = run(base + ['--timeout-case'])
    bad = check_late(out, s)
    print(f'late rank: mpirun status {rc}, {s:.1f} s')
    print(out)
    for b in bad:
        print('FAIL late:', b)
    failed |= bool(bad)
    out, rc, s = run(base + ['--kill-case'])
    bad = check_kill(out, rc, s)
    print(f'killed rank: mpirun status {rc}, {s:.1f} s')
    print(out)
    for b in bad:
        print('FAIL kill:', b)
    failed |= bool(bad)
    print('dist faults:', 'FAIL' if failed else 'OK (late rank, killed rank)')
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
