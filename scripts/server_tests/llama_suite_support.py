"""Helpers of llama_suite.sh (llama.cpp's server test suite against `ferrolm serve`).

Two roles:

* A pytest plugin (`pytest -p llama_suite_support`, with this folder on PYTHONPATH):
  - replaces `utils.ServerPreset.load_all` with a no-op: the suite's session fixture calls it to
    download every preset's model from Hugging Face, which the shim maps to local files anyway;
  - records each test's HTTP answers with a status >= 400 (method, path, status, error message)
    as the junit property `http_errors`, so the report can say which endpoint failed.
* A report (`python3 llama_suite_support.py report JUNIT.xml [--floor N] [--causes N]`): a
  table of passed / failed+errors / skipped / total per test file from pytest's junit XML,
  the total passed, and the failures grouped by cause (with examples). Exit status 1 when the
  total passed is under --floor.
"""

import json
import os
import re
import sys
from collections import Counter, OrderedDict, defaultdict

# -- pytest plugin ---------------------------------------------------------------------------------

_http_errors = []


def _record(method, path, status, body):
    if status < 400:
        return
    msg = ""
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict):
            msg = str(err.get("message", ""))[:160]
        elif err is not None:
            msg = str(err)[:160]
    elif isinstance(body, str):
        msg = body[:160]
    _http_errors.append({"method": method, "path": path, "status": status, "message": msg})


def pytest_configure(config):
    sys.path.insert(0, os.getcwd())  # the suite's folder (llama_suite.sh runs pytest there)
    import utils  # the suite's utils.py

    utils.ServerPreset.load_all = staticmethod(lambda: None)

    orig_request = utils.ServerProcess.make_request
    orig_stream = utils.ServerProcess.make_stream_request

    def make_request(self, method, path, *args, **kwargs):
        res = orig_request(self, method, path, *args, **kwargs)
        _record(method, path, res.status_code, res.body)
        return res

    def make_stream_request(self, method, path, *args, **kwargs):
        try:
            yield from orig_stream(self, method, path, *args, **kwargs)
        except utils.ServerError as e:
            _record(method, path, e.code, e.body)
            raise

    utils.ServerProcess.make_request = make_request
    utils.ServerProcess.make_stream_request = make_stream_request


def pytest_runtest_setup(item):
    _http_errors.clear()


def pytest_runtest_teardown(item, nextitem):
    if _http_errors:
        item.user_properties.append(("http_errors", json.dumps(_http_errors[:20])))
    _http_errors.clear()


# -- report ----------------------------------------------------------------------------------------

def read_junit(path):
    """[(file, test name, outcome, message, details, output, http errors)] from a junit XML."""
    import xml.etree.ElementTree as ET

    rows = []
    root = ET.parse(path).getroot()
    for tc in root.iter("testcase"):
        classname = tc.get("classname", "")
        # classname "unit.test_basic" (or "unit.test_x.Class"): the file is the test_* part.
        parts = classname.split(".")
        file = next((p for p in parts if p.startswith("test_")), classname) + ".py"
        outcome, message, details = "passed", "", ""
        for kind in ("failure", "error", "skipped"):
            el = tc.find(kind)
            if el is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[kind]
                message = el.get("message", "") or ""
                details = el.text or ""
                break
        out = "".join((e.text or "") for e in tc.findall("system-out") + tc.findall("system-err"))
        http = []
        for prop in tc.iter("property"):
            if prop.get("name") == "http_errors":
                try:
                    http = json.loads(prop.get("value", "[]"))
                except ValueError:
                    pass
        rows.append((file, tc.get("name", ""), outcome, message, details, out, http))
    return rows


def _norm(text):
    text = re.sub(r"0x[0-9a-f]+", "0x?", text)
    text = re.sub(r"'[^']{40,}'", "'...'", text)
    return re.sub(r"\s+", " ", text).strip()[:150]


def cause_of(message, details, out, http):
    """A short key naming why a test failed."""
    m = re.search(r"error: unexpected argument '([^']+)'", out)
    if m:
        return f"ferrolm serve rejects flag {m.group(1)} (server does not start)"
    m = re.search(r"error: invalid value '([^']*)' for '([^' ]+)", out)
    if m:
        return f"ferrolm serve rejects value {m.group(1)!r} of {m.group(2)} (server does not start)"
    if "not available offline" in out or "HF_HUB_OFFLINE" in out:
        return "model not local (an unmapped Hugging Face model; no network)"
    if "Server process died" in message or "Server process died" in details:
        m = re.search(r"^(?:Error|error): (.*)$", out, re.M)
        return "server exits at start: " + _norm(m.group(1) if m else "(no error line)")
    if re.search(r"urlopen error|URLError|NameResolutionError|Max retries exceeded|wget", details + message):
        return "needs a download (no network)"
    if "Timeout" in message and "pytest-timeout" in details or message.startswith("Failed: Timeout"):
        return "per-test timeout"
    first = message.splitlines()[0] if message else "(no message)"
    if "model_not_found" in message + details or any(
            e["status"] == 404 and "does not exist" in e["message"] for e in http):
        return "request names a model other than the served id/alias -> 404 model_not_found"
    # A failed status check: name the first route that answered 4xx/5xx.
    if http and re.search(r"assert (4\d\d|5\d\d) == |status_code|ServerError|Server returned error", message + details):
        h = http[0]
        path = re.sub(r"\?.*", "", h["path"])
        return f"{h['method']} {path} -> {h['status']}: {_norm(h['message'])[:90]}"
    if http and any(e["status"] == 404 for e in http):
        h = next(e for e in http if e["status"] == 404)
        return f"{h['method']} {h['path']} -> 404: {_norm(h['message'])[:90]}"
    return _norm(first)


def report(path, floor=None, n_causes=30, examples=3):
    rows = read_junit(path)
    per_file = OrderedDict()
    for file, _, outcome, *_ in sorted(rows, key=lambda r: r[0]):
        c = per_file.setdefault(file, Counter())
        c[outcome] += 1
    w = max([len("file")] + [len(f) for f in per_file])
    print(f"{'file':<{w}}  {'passed':>6}  {'failed':>6}  {'errors':>6}  {'skipped':>7}  {'total':>5}")
    tot = Counter()
    for f, c in per_file.items():
        n = sum(c.values())
        tot.update(c)
        print(f"{f:<{w}}  {c['passed']:>6}  {c['failed']:>6}  {c['error']:>6}  {c['skipped']:>7}  {n:>5}")
    n = sum(tot.values())
    print(f"{'TOTAL':<{w}}  {tot['passed']:>6}  {tot['failed']:>6}  {tot['error']:>6}  {tot['skipped']:>7}  {n:>5}")
    print(f"total passed: {tot['passed']} of {n}")

    if n_causes:
        causes = defaultdict(list)
        for file, name, outcome, message, details, out, http in rows:
            if outcome in ("failed", "error"):
                causes[cause_of(message, details, out, http)].append((file, name, message))
        if causes:
            print(f"\nfailure causes (failed + errors, {sum(len(v) for v in causes.values())} tests):")
            ranked = sorted(causes.items(), key=lambda kv: -len(kv[1]))
            for cause, tests in ranked[:n_causes]:
                print(f"{len(tests):4d}  {cause}")
                for file, name, message in tests[:examples]:
                    print(f"        e.g. {file[:-3]}::{name}: {_norm(message.splitlines()[0] if message else '')[:110]}")
            if len(ranked) > n_causes:
                rest = sum(len(v) for _, v in ranked[n_causes:])
                print(f"      ... {len(ranked) - n_causes} more causes ({rest} tests)")
    if floor is not None and tot["passed"] < floor:
        print(f"FAIL: {tot['passed']} tests passed, under the floor of {floor}")
        return 1
    return 0


def main(argv):
    import argparse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("report", help="summarize a junit XML")
    r.add_argument("junit")
    r.add_argument("--floor", type=int, default=None, help="exit 1 when fewer tests passed")
    r.add_argument("--causes", type=int, default=30, help="how many failure causes to list (0: none)")
    args = ap.parse_args(argv)
    return report(args.junit, args.floor, args.causes)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
