#!/usr/bin/env python3
"""Certify a plugin, draw its page, and check the page in a real browser
against the certification JSON (tools/check_report.py).

    report_check.py KEEL CHECKER OUT_PREFIX MODE [ID=TEXT ...] -- CONFORM_ARGS...

MODE: html      the page comes from `keel conform --html`
      report    the page comes from `keel report` over the JSON
      selftest  as html, then the checker's self-test on the page
ID=TEXT pairs are checked on top of what the JSON gives. The conform
run's own exit status is judged by the conform-* tests, not here; the
report and the page must exist.
"""
import os
import subprocess
import sys


def main():
    keel, checker, out, mode = sys.argv[1:5]
    rest = sys.argv[5:]
    cut = rest.index("--")
    expects, conform = rest[:cut], rest[cut + 1:]
    js, page, log = out + ".json", out + ".html", out + ".log"
    for p in (js, page):
        if os.path.exists(p):
            os.unlink(p)
    args = [keel, "conform"] + conform + ["--report", js]
    if mode != "report":
        args += ["--html", page]
    with open(log, "w") as f:
        subprocess.run(args, stdout=f, stderr=subprocess.STDOUT)
    if mode == "report":
        r = subprocess.run([keel, "report", js, "-o", page])
        if r.returncode:
            print(f"keel report exited with {r.returncode}")
            return 1
    if not os.path.exists(js) or not os.path.getsize(js):
        print("no certification report; conform said:")
        print(open(log).read()[-3000:])
        return 1
    if not os.path.exists(page) or not os.path.getsize(page):
        print("no page; conform said:")
        print(open(log).read()[-3000:])
        return 1
    cmd = [sys.executable, checker, page, "--cert", js]
    if mode == "selftest":
        cmd.insert(2, "--self-test")
    for e in expects:
        cmd += ["--expect", e]
    return subprocess.run(cmd).returncode


if __name__ == "__main__":
    sys.exit(main())
