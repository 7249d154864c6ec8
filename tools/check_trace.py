#!/usr/bin/env python3
"""Check a Chrome trace-event JSON file the way a trace viewer reads it.

Accepted: the JSON Object Format ({"traceEvents": [...], ...}) and the bare
JSON Array Format ([...]). Checked, with the first few problems printed
and exit status 1 when any is found:

  - every event is an object with "name" (a string), "ph" (a phase the
    format defines), "pid" and "tid" (integers or strings), and "ts" (a
    number; metadata events, ph "M", may omit it);
  - complete events (ph "X") have a "dur" that is a number >= 0;
  - begin/end events (ph "B"/"E") balance on each (pid, tid) track: no
    "E" without an open "B", none left open at the end;
  - timestamps are monotonic per track IN FILE ORDER: on each (pid, tid)
    the begin times (ts) of the timed events never go backwards. A viewer
    sorts events itself, so this is stricter than it needs; keel writes
    each track sorted, so a violation means the writer is broken.

Options: --expect-name NAME (an event of that name must exist; repeat),
--expect-cat CAT (an event of that category must exist; repeat).
--self-test runs the checks on made-up traces, a good one that must pass
and broken ones (missing ph, negative dur, timestamps going backwards,
unbalanced B/E, ...) that must each fail; exit status 0 when all do.
"""
import argparse
import json
import numbers
import sys

PHASES = set('BEXiIbneSTpFsftPCMNODRvVc()')
MAX_SHOWN = 20


def is_num(v):
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def is_id(v):
    return (isinstance(v, int) and not isinstance(v, bool)) or \
        isinstance(v, str)


def check(doc, expect_names=(), expect_cats=()):
    """Return a list of problems (empty when the trace is good)."""
    problems = []
    if isinstance(doc, dict):
        if 'traceEvents' not in doc:
            return ['the top-level object has no "traceEvents"']
        events = doc['traceEvents']
        if not isinstance(events, list):
            return ['"traceEvents" is not an array']
        if 'displayTimeUnit' in doc and doc['displayTimeUnit'] not in (
                'ms', 'ns'):
            problems.append('"displayTimeUnit" must be "ms" or "ns"')
    elif isinstance(doc, list):
        events = doc
    else:
        return ['the document is neither an object nor an array']

    last_ts = {}
    open_b = {}
    names, cats = set(), set()
    for i, e in enumerate(events):
        where = f'event {i}'
        if not isinstance(e, dict):
            problems.append(f'{where}: not an object')
            continue
        if isinstance(e.get('name'), str):
            where += f' ("{e["name"]}")'
            names.add(e['name'])
        else:
            problems.append(f'{where}: "name" missing or not a string')
        if isinstance(e.get('cat'), str):
            cats.add(e['cat'])
        ph = e.get('ph')
        if not isinstance(ph, str) or ph not in PHASES:
            problems.append(f'{where}: "ph" missing or not a known phase '
                            f'({ph!r})')
            continue
        for key in ('pid', 'tid'):
            if not is_id(e.get(key)):
                problems.append(f'{where}: "{key}" missing or not an '
                                f'integer or string')
        if ph == 'M':
            if 'ts' in e and not is_num(e['ts']):
                problems.append(f'{where}: "ts" is not a number')
            continue
        if not is_num(e.get('ts')):
            problems.append(f'{where}: "ts" missing or not a number')
            continue
        track = (e.get('pid'), e.get('tid'))
        ts = e['ts']
        if ph == 'X':
            if not is_num(e.get('dur')):
                problems.append(f'{where}: complete event without a '
                                f'numeric "dur"')
            elif e['dur'] < 0:
                problems.append(f'{where}: negative "dur" ({e["dur"]})')
        if track in last_ts and ts < last_ts[track]:
            problems.append(f'{where}: ts {ts} is before the previous '
                            f'event\'s {last_ts[track]} on track '
                            f'pid {track[0]} tid {track[1]}')
        last_ts[track] = max(ts, last_ts.get(track, ts))
        if ph == 'B':
            open_b.setdefault(track, []).append(i)
        elif ph == 'E':
            if not open_b.get(track):
                problems.append(f'{where}: "E" with no open "B" on track '
                                f'pid {track[0]} tid {track[1]}')
            else:
                open_b[track].pop()
    for track, stack in open_b.items():
        for i in stack:
            problems.append(f'event {i}: "B" never ended on track '
                            f'pid {track[0]} tid {track[1]}')
    for n in expect_names:
        if n not in names:
            problems.append(f'no event named "{n}"')
    for c in expect_cats:
        if c not in cats:
            problems.append(f'no event of category "{c}"')
    return problems


def check_file(path, expect_names=(), expect_cats=()):
    try:
        with open(path, encoding='utf-8') as f:
            doc = json.load(f)
    except (OSError, UnicodeDecodeError, ValueError) as err:
        return [f'cannot read it as JSON: {err}']
    return check(doc, expect_names, expect_cats)


def self_test():
    def x(name, ts, dur=1.0, tid=1):
        return {'name': name, 'cat': 'op', 'ph': 'X', 'ts': ts, 'dur': dur,
                'pid': 1, 'tid': tid}

    meta = {'name': 'thread_name', 'ph': 'M', 'pid': 1, 'tid': 1,
            'args': {'name': 'host thread 1'}}
    good = {'traceEvents': [meta, x('a', 0, 10), x('b', 1, 2),
                            x('c', 5, 0, tid=2),
                            {'name': 'r', 'ph': 'B', 'ts': 11, 'pid': 1,
                             'tid': 1},
                            {'name': 'r', 'ph': 'E', 'ts': 12, 'pid': 1,
                             'tid': 1}],
            'displayTimeUnit': 'ms'}
    no_ph = {'traceEvents': [{'name': 'a', 'ts': 0, 'pid': 1, 'tid': 1}]}
    bad_ph = {'traceEvents': [dict(x('a', 0), ph='Q')]}
    neg_dur = {'traceEvents': [x('a', 0, -1)]}
    no_dur = {'traceEvents': [{k: v for k, v in x('a', 0).items()
                               if k != 'dur'}]}
    backwards = {'traceEvents': [x('a', 5), x('b', 4)]}
    unended = {'traceEvents': [{'name': 'r', 'ph': 'B', 'ts': 0, 'pid': 1,
                                'tid': 1}]}
    unbegun = {'traceEvents': [{'name': 'r', 'ph': 'E', 'ts': 0, 'pid': 1,
                                'tid': 1}]}
    no_ts = {'traceEvents': [{'name': 'a', 'ph': 'X', 'dur': 1, 'pid': 1,
                              'tid': 1}]}
    str_ts = {'traceEvents': [x('a', '5')]}
    no_name = {'traceEvents': [{'ph': 'X', 'ts': 0, 'dur': 1, 'pid': 1,
                                'tid': 1}]}
    no_tid = {'traceEvents': [{'name': 'a', 'ph': 'X', 'ts': 0, 'dur': 1,
                               'pid': 1}]}
    no_events = {'events': []}
    failed = 0
    if check(good):
        print('self-test: the good trace was rejected:', check(good))
        failed += 1
    if check(good, ['a', 'c'], ['op']):
        print('self-test: expected names were not found')
        failed += 1
    cases = [('missing ph', no_ph, ()), ('unknown ph', bad_ph, ()),
             ('negative dur', neg_dur, ()), ('missing dur', no_dur, ()),
             ('non-monotonic ts', backwards, ()),
             ('B never ended', unended, ()), ('E without B', unbegun, ()),
             ('missing ts', no_ts, ()), ('ts a string', str_ts, ()),
             ('missing name', no_name, ()), ('missing tid', no_tid, ()),
             ('no traceEvents', no_events, ()),
             ('expected name absent', good, ('conv2d',))]
    for what, doc, names in cases:
        problems = check(doc, names)
        if not problems:
            print(f'self-test: a trace with {what} passed')
            failed += 1
        else:
            print(f'self-test: {what}: rejected ({problems[0]})')
    if failed:
        print(f'self-test FAILED ({failed})')
        return 1
    print(f'self-test passed ({len(cases) + 2} cases)')
    return 0


def main():
    ap = argparse.ArgumentParser(
        description='Check a Chrome trace-event JSON file.')
    ap.add_argument('trace', nargs='?', help='the trace file')
    ap.add_argument('--expect-name', action='append', default=[],
                    metavar='NAME', help='an event named NAME must exist')
    ap.add_argument('--expect-cat', action='append', default=[],
                    metavar='CAT', help='an event of category CAT must exist')
    ap.add_argument('--self-test', action='store_true',
                    help='prove that broken traces are rejected')
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    if not args.trace:
        ap.error('a trace file (or --self-test) is needed')
    problems = check_file(args.trace, args.expect_name, args.expect_cat)
    if problems:
        for p in problems[:MAX_SHOWN]:
            print(f'{args.trace}: {p}', file=sys.stderr)
        if len(problems) > MAX_SHOWN:
            print(f'{args.trace}: ... and {len(problems) - MAX_SHOWN} more',
                  file=sys.stderr)
        print(f'{args.trace}: not a valid trace ({len(problems)} problems)',
              file=sys.stderr)
        return 1
    print(f'{args.trace}: valid trace')
    return 0


if __name__ == '__main__':
    sys.exit(main())
