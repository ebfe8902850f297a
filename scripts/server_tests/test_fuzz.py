#!/usr/bin/env python3
"""Fuzz test of `ferrolm serve`'s request handling.

Server: SmolLM2, --parallel 2, --ctx-size 256, --max-body-bytes 262144, --timeout 10.

1. Explicit cases (fuzz_cases.explicit_cases): malformed JSON, a wrong type for every field,
   bad max_tokens / n / temperature / sampler values, prompts longer than the context, unknown
   models, bad messages and roles, bodies over --max-body-bytes, a form body, unknown routes and
   methods, bad embeddings / tokenize / detokenize input. Each must get its exact status, errors
   with an OpenAI-shaped body {"error": {"message", "type", "param", "code"}} (405 with Allow).
2. A seeded random phase (--seconds, default $FERROLM_FUZZ_SECONDS or 45; --seed) of random and
   mutated bodies to every POST route from --workers threads: no 5xx (except 503 with
   Retry-After), every response within --request-timeout, a JSON body (or SSE events of JSON),
   errors in OpenAI's shape.
3. Afterwards /health is 200, the slots become idle, and a valid request works.
A failure prints the seed and the body (also saved to a file) with a curl line to replay it.
Exits 1 on failure, 2 when the server cannot start.
"""

import argparse
import http.client
import json
import os
import random
import sys
import tempfile
import threading
import time
import urllib.parse

import common
import fuzz_cases as fc

SERVER_ARGS = ["--parallel", "2", "-c", str(fc.N_CTX), "--max-body-bytes", str(fc.MAX_BODY), "--timeout", "10",
               "--shutdown-timeout", "5"]


def send(url, method, path, body, headers=None, timeout=30.0, chunked=False):
    """One request; returns common.Response. Raises OSError (timeouts included)."""
    if not chunked:
        return common.request(method, url + path, body, headers=headers, timeout=timeout)
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    t0 = time.monotonic()
    try:
        data = body if isinstance(body, bytes) else str(body).encode()
        pieces = (data[i:i + 65536] for i in range(0, len(data), 65536))
        conn.request(method, path, body=pieces, headers={"Content-Type": "application/json", **(headers or {})},
                     encode_chunked=True)
        r = conn.getresponse()
        return common.Response(r.status, r.headers, r.read(), time.monotonic() - t0)
    except (BrokenPipeError, ConnectionResetError):
        # The server may answer 413 and close while the body is still being sent.
        raise OSError("connection closed while sending a chunked body (no response read)")
    finally:
        conn.close()


# llama-server's own endpoint: its stream ends with an object that has "stop": true (or an
# error), not with [DONE].
NATIVE_PATHS = ("/completion", "/completions")


def body_problem(r, path=""):
    """Why a response body to `path` is not acceptable, or None."""
    ctype = r.headers.get("Content-Type", "")
    if r.status == 200 and ctype.startswith("text/event-stream"):
        events = [ln[5:].strip() for ln in r.text().splitlines() if ln.startswith("data:")]
        if path in NATIVE_PATHS:
            try:
                last = json.loads(events[-1]) if events else {}
            except ValueError:
                last = {}
            if not (last.get("stop") is True or "error" in last):
                return f"stream does not end with a stop or error object: {r.body[-200:]!r}"
            events.append("[DONE]")
        if not events or events[-1] != "[DONE]":
            return f"stream does not end with [DONE]: {r.body[-200:]!r}"
        for e in events[:-1]:
            try:
                json.loads(e)
            except ValueError:
                return f"stream event is not JSON: {e[:200]!r}"
        return None
    if not ctype.startswith("application/json"):
        return f"Content-Type {ctype!r}, body {r.body[:200]!r}"
    try:
        body = r.json()
    except ValueError:
        return f"body is not JSON: {r.body[:200]!r}"
    if r.status >= 400 and not (common.is_openai_error(body) and {"param", "code"} <= set(body["error"])):
        return f"error body is not OpenAI-shaped: {r.body[:300]!r}"
    return None


def explicit_phase(url, checks):
    """Runs every explicit case; one PASS/FAIL line per case."""
    cases = fc.explicit_cases()
    t0 = time.monotonic()
    for c in cases:
        def run(c=c):
            r = send(url, c.method, c.path, c.body, c.headers, c.timeout, c.chunked)
            problems = []
            if r.status != c.status:
                problems.append(f"status {r.status}, expected {c.status}")
            why = body_problem(r, c.path)
            if why:
                problems.append(why)
            err = r.json()["error"] if r.status >= 400 and not why else {}
            if c.code and err and err.get("code") != c.code:
                problems.append(f"error code {err.get('code')!r}, expected {c.code!r}")
            if c.param and err and err.get("param") != c.param:
                problems.append(f"error param {err.get('param')!r}, expected {c.param!r}")
            if r.status == 405 and not r.headers.get("Allow"):
                problems.append("405 without an Allow header")
            assert not problems, "; ".join(problems) + f" (took {r.elapsed:.2f} s; body {r.body[:160]!r})"
        checks.run(f"case {c.name}", run)
    print(f"{len(cases)} explicit cases in {time.monotonic() - t0:.1f} s", flush=True)


class Fuzzer:
    """The random phase: `workers` threads, each with its own seeded generator."""

    def __init__(self, url, args):
        self.url = url
        self.args = args
        self.lock = threading.Lock()
        self.failures = []
        self.counts = {}
        self.sent = 0
        self.outdir = None

    def record_failure(self, worker, i, path, data, how, why):
        with self.lock:
            if self.outdir is None:
                self.outdir = tempfile.mkdtemp(prefix="ferrolm-fuzz-")
            n = len(self.failures)
            fname = os.path.join(self.outdir, f"failure-{n}.body")
            with open(fname, "wb") as f:
                f.write(data)
            self.failures.append(why)
            print(f"FAIL fuzz: seed {self.args.seed} worker {worker} request {i} ({how}) POST {path}: {why}\n"
                  f"  body ({len(data)} bytes): {data[:2000]!r}\n"
                  f"  replay: python3 scripts/server_tests/with_server.py {' '.join(SERVER_ARGS)} -- curl -si "
                  f"-X POST '{{url}}{path}' -H 'Content-Type: application/json' --data-binary @{fname}", flush=True)

    def worker(self, k, deadline):
        rng = random.Random(f"{self.args.seed}/{k}")
        i = 0
        while time.monotonic() < deadline and len(self.failures) < self.args.max_failures:
            path, data, how = fc.random_request(rng)
            i += 1
            try:
                r = send(self.url, "POST", path, data, timeout=self.args.request_timeout)
            except OSError as e:
                self.record_failure(k, i, path, data, how, f"no response within {self.args.request_timeout} s "
                                    f"or connection error: {e}")
                continue
            why = None
            if r.status >= 500 and not (r.status == 503 and r.headers.get("Retry-After")):
                why = f"status {r.status}"
            why = why or body_problem(r, path)
            with self.lock:
                self.sent += 1
                self.counts[r.status] = self.counts.get(r.status, 0) + 1
            if why:
                self.record_failure(k, i, path, data, how, f"{why} (status {r.status}, body {r.body[:300]!r})")

    def run(self, seconds):
        deadline = time.monotonic() + seconds
        threads = [threading.Thread(target=self.worker, args=(k, deadline)) for k in range(self.args.workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


def wait_idle(url, timeout):
    """Seconds until /metrics shows no busy slot and no queue, or None."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        m = common.metrics(url)
        if m["ferrolm_slots_busy"] == 0 and m["ferrolm_queue_depth"] == 0:
            return time.monotonic() - t0
        time.sleep(0.05)
    return None


def valid_request_works(url):
    st, body = common.post_json(url + "/v1/chat/completions",
                                {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8}, timeout=60)
    assert st == 200 and body["choices"][0]["message"]["content"], f"{st}: {body}"
    st, body = common.post_json(url + "/v1/embeddings", {"input": "still alive"}, timeout=60)
    assert st == 200 and body["data"][0]["embedding"], f"{st}: {body}"
    return "chat and embeddings answer 200"


def main():
    p = common.add_common_args(argparse.ArgumentParser(description=__doc__,
                                                       formatter_class=argparse.RawDescriptionHelpFormatter))
    p.add_argument("--seed", type=int, default=None, help="seed of the random phase (default: time-based, printed)")
    p.add_argument("--seconds", type=float, default=float(os.environ.get("FERROLM_FUZZ_SECONDS", "45")),
                   help="length of the random phase (default $FERROLM_FUZZ_SECONDS or 45)")
    p.add_argument("--workers", type=int, default=2, help="concurrent random clients (default 2)")
    p.add_argument("--request-timeout", type=float, default=30.0, help="seconds a response may take (default 30)")
    p.add_argument("--max-failures", type=int, default=10, help="stop the random phase after this many failures")
    p.add_argument("--skip-explicit", action="store_true", help="only the random phase")
    args = p.parse_args()
    if args.seed is None:
        args.seed = int(time.time()) % 100000
    checks = common.Checks()

    def run():
        with common.Server(args.binary, common.find_model(args.model), SERVER_ARGS) as srv:
            if not args.skip_explicit:
                explicit_phase(srv.url, checks)
            # The random phase needs a working engine; a hung engine would only time out there.
            if checks.run("engine_responsive_before_random_phase", valid_request_works, srv.url) is None:
                checks.fail("random_phase", "skipped: the engine does not answer a valid request")
                return checks.summary("test_fuzz")
            print(f"random phase: seed {args.seed}, {args.seconds:.0f} s, {args.workers} workers", flush=True)
            fz = Fuzzer(srv.url, args)
            t0 = time.monotonic()
            fz.run(args.seconds)
            counts = ", ".join(f"{k}: {v}" for k, v in sorted(fz.counts.items()))
            print(f"random phase: {fz.sent} requests in {time.monotonic() - t0:.1f} s ({counts})", flush=True)
            checks.check("random_phase", not fz.failures and fz.sent > 0,
                         f"{len(fz.failures)} failures with seed {args.seed} (rerun: --seed {args.seed})"
                         if fz.failures else "no request was answered")
            checks.check("health_after", common.request("GET", srv.url + "/health").status == 200, "/health is not 200")
            idle = wait_idle(srv.url, 15.0)
            checks.check("idle_after", idle is not None, "slots still busy or queue not empty 15 s after the fuzzing")
            checks.run("valid_request_after", valid_request_works, srv.url)
        return checks.summary(f"test_fuzz (seed {args.seed})")

    return common.setup_or_exit(run)


if __name__ == "__main__":
    sys.exit(main())
