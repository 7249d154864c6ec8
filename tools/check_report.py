#!/usr/bin/env python3
"""Check a page written by `keel report` / `keel conform --html` /
`keel bench compare --html`.

    check_report.py PAGE.html [--cert CERT.json] [--expect ID=TEXT ...]
                    [--screenshot OUT.png] [--width PX] [--max-height PX]
    check_report.py --self-test PAGE.html [--cert CERT.json]

Four checks, each failing the run with a message naming what is wrong:

1. Validity: the page parses as HTML5 with no parse error (html5lib in
   strict mode, the WHATWG parsing algorithm).
2. Self-containment: no element or style refers to anything outside the
   page: no script, link, img, iframe, object, embed, @import, no src,
   href or url() other than a fragment (#id), and no http:// or https://
   in any attribute.
3. In a real browser (Chromium, headless, driven over the DevTools
   protocol on a pipe): the page loads, raises no JavaScript exception,
   logs no console or browser error, and requests nothing but itself.
4. The figures: with --cert, the summary numbers, verdict and plugin
   identity shown on the page (read from the rendered DOM by id) equal
   those of the certification JSON, and the coverage and NMSE counts
   equal what this script computes from the JSON's results by itself;
   each --expect ID=TEXT must equal the text of element #ID.

--self-test damages copies of the page in ways each check must catch (a
wrong number, an external image, a parse error, a script that throws, a
console error) and fails unless every damaged copy fails and the page
itself passes.

Exit status: 0 all checks pass, 1 a check failed, 77 Chromium or html5lib
is missing (the message says what to install).
"""
import argparse
import html.parser
import json
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
import time

SKIP = 77


class CheckFailed(Exception):
    pass


# ---- 1. validity ------------------------------------------------------------

def check_valid(text):
    try:
        import html5lib
    except ImportError:
        print("SKIP: html5lib is not installed in the project's Python "
              "environment (bash tools/deps.sh installs it)")
        sys.exit(SKIP)
    parser = html5lib.HTMLParser(strict=False, namespaceHTMLElements=False)
    parser.parse(text)
    if parser.errors:
        lines = text.split("\n")
        msgs = []
        for (line, col), code, _ in parser.errors[:5]:
            ctx = lines[line - 1][max(0, col - 40):col + 20] \
                if 0 < line <= len(lines) else ""
            msgs.append(f"line {line} col {col}: {code} near {ctx!r}")
        raise CheckFailed(f"{len(parser.errors)} HTML parse error(s): " +
                          "; ".join(msgs))


# ---- 2. self-containment ----------------------------------------------------

FORBIDDEN_TAGS = {"script", "link", "img", "iframe", "object", "embed",
                  "audio", "video", "source", "frame", "image", "use"}
URL_ATTRS = {"src", "href", "xlink:href", "action", "data", "poster",
             "srcset", "formaction", "background"}


class _Refs(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.problems = []
        self.in_style = False

    def handle_starttag(self, tag, attrs):
        if tag in FORBIDDEN_TAGS:
            self.problems.append(f"<{tag}> element")
        if tag == "style":
            self.in_style = True
        for name, value in attrs:
            value = value or ""
            if name in URL_ATTRS and not value.startswith("#"):
                self.problems.append(f"<{tag} {name}={value!r}>")
            if re.search(r"https?://", value, re.I):
                self.problems.append(f"<{tag} {name}={value!r}>")
            if name == "style" and re.search(r"url\(\s*['\"]?(?!#)", value):
                self.problems.append(f"<{tag} style={value!r}>")

    def handle_endtag(self, tag):
        if tag == "style":
            self.in_style = False

    def handle_data(self, data):
        if self.in_style:
            if re.search(r"@import|url\(\s*['\"]?(?!#)", data):
                self.problems.append("external reference in <style>")


def check_self_contained(text):
    p = _Refs()
    p.feed(text)
    p.close()
    if p.problems:
        raise CheckFailed("not self-contained: " + "; ".join(p.problems[:5]))


# ---- 3. the browser ---------------------------------------------------------

def chromium_binary():
    for c in ("/usr/lib/chromium/chromium", shutil.which("chromium"),
              shutil.which("chromium-browser"), shutil.which("google-chrome")):
        if c and os.access(c, os.X_OK):
            return c
    return None


class Browser:
    """Chromium over --remote-debugging-pipe: commands on its fd 3,
    replies and events on its fd 4, each a JSON text ended by NUL."""

    def __init__(self, binary, timeout):
        self.timeout = timeout
        self.next_id = 0
        self.buf = b""
        self.events = []
        self.profile = tempfile.mkdtemp(prefix="keel-report-chromium-")
        to_chrome_r, self.to_chrome = os.pipe()
        self.from_chrome, from_chrome_w = os.pipe()

        def child_fds():
            a, b = os.dup(to_chrome_r), os.dup(from_chrome_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [binary, "--headless", "--no-sandbox", "--disable-gpu",
             "--no-first-run", "--no-default-browser-check",
             "--disable-extensions", "--disable-background-networking",
             "--hide-scrollbars", "--remote-debugging-pipe",
             "--user-data-dir=" + self.profile, "about:blank"],
            preexec_fn=child_fds, close_fds=False,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        os.close(to_chrome_r)
        os.close(from_chrome_w)

    def close(self):
        try:
            self.call("Browser.close")
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self.to_chrome, self.from_chrome):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)

    def _read(self, deadline):
        while b"\0" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CheckFailed("the browser did not answer within "
                                  f"{self.timeout} s")
            ready, _, _ = select.select([self.from_chrome], [], [], left)
            if not ready:
                continue
            data = os.read(self.from_chrome, 1 << 16)
            if not data:
                raise CheckFailed("the browser exited unexpectedly")
            self.buf += data
        msg, self.buf = self.buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method, params=None, session=None):
        self.next_id += 1
        mid = self.next_id
        m = {"id": mid, "method": method, "params": params or {}}
        if session:
            m["sessionId"] = session
        os.write(self.to_chrome, json.dumps(m).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            r = self._read(deadline)
            if r.get("id") == mid:
                if "error" in r:
                    raise CheckFailed(f"{method}: {r['error']}")
                return r.get("result", {})
            self.events.append(r)

    def wait_event(self, method, deadline):
        while True:
            for i, e in enumerate(self.events):
                if e.get("method") == method:
                    return self.events.pop(i)
            self.events.append(self._read(deadline))


def browser_check(path, ids, screenshot=None, width=1280, timeout=60,
                  max_height=16000):
    """Load the page; return {id: text} for the ids asked. Raises
    CheckFailed on any exception, error message or outside request."""
    binary = chromium_binary()
    if not binary:
        print("SKIP: Chromium is not installed (Debian: apt-get install "
              "chromium; bash tools/deps.sh installs it)")
        sys.exit(SKIP)
    url = "file://" + os.path.abspath(path)
    b = Browser(binary, timeout)
    try:
        target = b.call("Target.createTarget", {"url": "about:blank"})
        s = b.call("Target.attachToTarget",
                   {"targetId": target["targetId"], "flatten": True})
        sid = s["sessionId"]
        for m in ("Page.enable", "Runtime.enable", "Log.enable",
                  "Network.enable"):
            b.call(m, session=sid)
        b.call("Emulation.setDeviceMetricsOverride",
               {"width": width, "height": 900, "deviceScaleFactor": 1,
                "mobile": False}, session=sid)
        b.events.clear()
        b.call("Page.navigate", {"url": url}, session=sid)
        b.wait_event("Page.loadEventFired", time.monotonic() + timeout)
        expr = ("JSON.stringify({ready: document.readyState, ids: "
                "Object.fromEntries(%s.map(i => [i, (document."
                "getElementById(i) || {}).textContent ?? null])), end: "
                "!!document.getElementById('end')})" % json.dumps(list(ids)))
        r = b.call("Runtime.evaluate",
                   {"expression": expr, "returnByValue": True}, session=sid)
        dom = json.loads(r["result"]["value"])
        if screenshot:
            m = b.call("Page.getLayoutMetrics", session=sid)
            h = int(m["cssContentSize"]["height"]) + 1
            b.call("Emulation.setDeviceMetricsOverride",
                   {"width": width, "height": min(h, max_height),
                    "deviceScaleFactor": 1, "mobile": False}, session=sid)
            shot = b.call("Page.captureScreenshot", {"format": "png"},
                          session=sid)
            import base64
            tmp = screenshot + ".tmp"
            with open(tmp, "wb") as f:
                f.write(base64.b64decode(shot["data"]))
            os.replace(tmp, screenshot)
        # Drain what arrived meanwhile, then judge every event.
        b.call("Runtime.evaluate", {"expression": "0"}, session=sid)
        problems = []
        for e in b.events:
            m, p = e.get("method"), e.get("params", {})
            if m == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                problems.append("exception: " + str(
                    d.get("exception", {}).get("description") or d.get("text")))
            elif m == "Runtime.consoleAPICalled" and p.get("type") in (
                    "error", "assert", "warning"):
                problems.append("console %s: %s" % (p.get("type"), " ".join(
                    str(a.get("value", a.get("description")))
                    for a in p.get("args", []))))
            elif m == "Log.entryAdded" and p.get("entry", {}).get(
                    "level") in ("error", "warning"):
                problems.append("browser log: " + p["entry"].get("text", ""))
            elif m == "Network.requestWillBeSent":
                u = p.get("request", {}).get("url", "")
                if u != url and not u.startswith("data:") and u != "about:blank":
                    problems.append("request for " + u)
            elif m == "Network.loadingFailed":
                problems.append("load failed: " + p.get("errorText", ""))
        if dom.get("ready") != "complete" or not dom.get("end"):
            problems.append("the page did not load completely (no #end)")
        if problems:
            raise CheckFailed("in the browser: " + "; ".join(problems[:6]))
        return dom["ids"]
    finally:
        b.close()


# ---- 4. the figures ---------------------------------------------------------

def kernel_state(r):
    """The coverage grid's state of a result (docs/certify.md)."""
    res, msg = r.get("result", ""), r.get("message", "") or ""
    if res == "pass":
        return "pass"
    if res == "skip":
        return "fallback" if msg.startswith("not provided") else "skip"
    if res.startswith("known_failure"):
        return "known"
    return "fail"


def expected_from_cert(cert):
    s = cert["summary"]
    exp = {
        "sum-total": str(s["total"]), "sum-passed": str(s["passed"]),
        "sum-failed": str(s["failed"]), "sum-skipped": str(s["skipped"]),
        "sum-known": str(s["known"]),
        "sum-suite-failures": str(s.get("suite_failures", 0)),
        "plugin-name": cert["plugin"]["name"],
        "plugin-version": cert["plugin"]["version"],
        "plugin-sha256": cert["plugin"]["sha256"],
    }
    c = cert.get("certification", {})
    exp["verdict"] = ("Certified at level " + c["level"]
                      if c.get("certified") else "Not certified")
    kern = [r for r in cert["results"] if "op" in r and "dtype" in r]
    if kern:
        states = [kernel_state(r) for r in kern]
        exp["cov-pass"] = str(states.count("pass"))
        exp["cov-fail"] = str(states.count("fail"))
        exp["cov-fallback"] = str(states.count("fallback"))
    n = sum(1 for r in cert["results"] if "nmse" in r)
    if n:
        exp["nmse-count"] = str(n)
    return exp


def check_figures(got, expected):
    bad = [f"#{k}: page shows {got.get(k)!r}, expected {v!r}"
           for k, v in expected.items() if got.get(k) != v]
    if bad:
        raise CheckFailed("figures differ: " + "; ".join(bad))


def run_checks(page, expected, screenshot=None, width=1280, which=None,
               max_height=16000):
    which = which or {"valid", "contained", "browser", "figures"}
    with open(page, encoding="utf-8") as f:
        text = f.read()
    if "valid" in which:
        check_valid(text)
    if "contained" in which:
        check_self_contained(text)
    if "browser" in which or "figures" in which:
        got = browser_check(page, expected.keys(), screenshot, width,
                            max_height=max_height)
        if "figures" in which:
            check_figures(got, expected)


# ---- self-test --------------------------------------------------------------

def self_test(page, expected):
    with open(page, encoding="utf-8") as f:
        text = f.read()
    run_checks(page, expected)
    print("self-test: the page itself passes")
    key = next(iter(expected))
    damages = [
        ("a wrong summary number", "figures",
         lambda t: re.sub(r'(id="%s">)([^<]*)' % re.escape(key),
                          lambda m: m.group(1) + m.group(2) + "0", t, 1)),
        ("an external image", "contained",
         lambda t: t.replace("</main>", '<img src="https://example.invalid/'
                             'x.png" alt=""></main>', 1)),
        ("an external image, in the browser", "browser",
         lambda t: t.replace("</main>", '<img src="file:///nonexistent/'
                             'keel-x.png" alt=""></main>', 1)),
        ("a parse error", "valid",
         lambda t: t.replace("</main>", "<p>x</span></main>", 1)),
        ("a script that throws", "browser",
         lambda t: t.replace("</main>", "<script>throw new Error("
                             "'keel self-test')</script></main>", 1)),
        ("a console error", "browser",
         lambda t: t.replace("</main>", "<script>console.error("
                             "'keel self-test')</script></main>", 1)),
    ]
    failures = 0
    with tempfile.TemporaryDirectory(prefix="keel-report-selftest-") as d:
        for name, check, damage in damages:
            bad = damage(text)
            if bad == text:
                print(f"self-test: FAIL: could not apply '{name}'")
                failures += 1
                continue
            p = os.path.join(d, "damaged.html")
            with open(p, "w", encoding="utf-8") as f:
                f.write(bad)
            try:
                run_checks(p, expected, which={check})
            except CheckFailed as e:
                print(f"self-test: {name}: caught by the {check} check "
                      f"({str(e)[:100]})")
                continue
            print(f"self-test: FAIL: {name} was not caught by the "
                  f"{check} check")
            failures += 1
    if failures:
        raise CheckFailed(f"self-test: {failures} damage(s) not caught")
    print(f"self-test: all {len(damages)} damages caught")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("page")
    ap.add_argument("--cert", help="the certification JSON the page shows")
    ap.add_argument("--expect", action="append", default=[],
                    metavar="ID=TEXT")
    ap.add_argument("--screenshot", metavar="PNG")
    ap.add_argument("--width", type=int, default=1280)
    ap.add_argument("--max-height", type=int, default=16000,
                    help="cut the screenshot to the page's first PX pixels")
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    expected = {}
    if a.cert:
        with open(a.cert, encoding="utf-8") as f:
            expected.update(expected_from_cert(json.load(f)))
    for e in a.expect:
        k, sep, v = e.partition("=")
        if not sep:
            ap.error(f"--expect {e!r}: use ID=TEXT")
        expected[k] = v
    if not expected:
        ap.error("nothing to compare: give --cert or --expect")
    try:
        if a.self_test:
            self_test(a.page, expected)
        else:
            run_checks(a.page, expected, a.screenshot, a.width,
                       max_height=a.max_height)
            print(f"{a.page}: valid, self-contained, loads without errors; "
                  f"{len(expected)} figures match")
    except CheckFailed as e:
        print(f"{a.page}: FAIL: {e}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
