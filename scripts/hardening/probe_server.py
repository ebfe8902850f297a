#!/usr/bin/env python3
"""Hardening probes of `ferrolm serve`: the client mistakes and protocol abuses of the hardening
issue, each classified as clean (the answer the issue asks for) or bad, with what was seen.

    python3 scripts/hardening/probe_server.py [--binary target/release/ferrolm] [--json out.json]

Groups: `constraint` (recursive schemas, left recursion, huge repetitions, a 1 MB literal, each
sent plain and streamed: clean is a 400 with a JSON error before any stream starts; an
end-of-generation token in a grammar: clean is a 200), `request` (a json_schema format without a
schema, a tool message without tool_call_id, tool-call arguments that are not JSON: clean is a
400 naming the field; `Authorization: BEARER`: clean is a 200), `http` (an over-long URI, an
over-large header, a malformed request line: clean is a 4xx with a JSON body), `shutdown`
(requests still queued at SIGTERM: clean is a 503 within 2 s). Runs SmolLM2 from the test
models folder. Exits 0 whatever the results (it reports; the tests gate); 2 when the server
cannot start.
"""

import argparse
import json
import os
import signal
import socket
import sys
import threading
import time
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server_tests"))
import common  # noqa: E402

CHAT = "/v1/chat/completions"
USER = [{"role": "user", "content": "Say yes."}]


def chat(**extra):
    return {"messages": USER, "max_tokens": 8, "temperature": 0, **extra}


def schema_format(schema):
    return {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}


# (name, request fields, expected): "4xx" a 400-class error before any generation; "no5xx" a
# 4xx, or a 200 whose constraint is honoured as far as max_tokens goes (a huge minimum length is
# not a mistake the server can see before generating).
CONSTRAINT_CASES = [
    ("json_schema $ref to the root", schema_format({"$ref": "#"}), "4xx"),
    ("json_schema $defs loop", schema_format({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
                                              "$ref": "#/$defs/a"}), "4xx"),
    ("json_schema allOf back to the root", schema_format({"type": "object", "allOf": [{"$ref": "#"}]}), "4xx"),
    ("json_schema minLength 1e9", schema_format({"type": "string", "minLength": 1000000000}), "no5xx"),
    ("json_schema minItems 1e9", schema_format({"type": "array", "items": {"type": "integer"},
                                                "minItems": 1000000000}), "no5xx"),
    ("grammar left recursion", {"grammar": "start: start"}, "4xx"),
    ("grammar repetition 1e9", {"grammar": 'start: "a"{1000000000}'}, "no5xx"),
    ("grammar 1 MB literal", {"grammar": 'start: "' + "a" * (1 << 20) + '"'}, "4xx"),
]


def classify_http(r, want):
    """clean/bad for a Response `r` expected to have status class `want` ('4xx' or 200)."""
    body_ok = True
    try:
        body = r.json()
    except ValueError:
        body, body_ok = None, False
    if want == 200:
        return ("clean" if r.status == 200 else "bad"), f"{r.status} {r.text()[:120]}"
    err = body.get("error", {}) if isinstance(body, dict) else {}
    ok = 400 <= r.status < 500 and body_ok and isinstance(err, dict) and err.get("message")
    return ("clean" if ok else "bad"), f"{r.status} {json.dumps(err)[:140] if body_ok else repr(r.body[:80])}"


def post(url, body, headers=None, timeout=60):
    return common.request("POST", url + CHAT, body, headers=headers, timeout=timeout)


def streamed(url, body, timeout=60):
    """(status, first bytes) of a streamed request."""
    parts = urllib.parse.urlsplit(url)
    import http.client
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    try:
        conn.request("POST", CHAT, body=json.dumps({**body, "stream": True}).encode(),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.read(4000)
    finally:
        conn.close()


def constraint_group(url, out):
    for name, extra, want in CONSTRAINT_CASES:
        t0 = time.monotonic()
        try:
            r = post(url, chat(**extra))
            verdict, seen = classify_http(r, "4xx")
            if want == "no5xx" and r.status == 200:
                verdict = "clean"
        except OSError as e:
            verdict, seen = "bad", f"{type(e).__name__}: {e}"
        out.append(("constraint", name, verdict, f"{seen} ({time.monotonic() - t0:.2f} s)"))
        try:
            st, data = streamed(url, chat(**extra))
            verdict = "clean" if 400 <= st < 500 else "bad"
            if want == "no5xx" and st == 200 and b'"error"' not in data:
                verdict = "clean"
            seen = f"{st} {data[:100]!r}"
        except OSError as e:
            verdict, seen = "bad", f"{type(e).__name__}: {e}"
        out.append(("constraint", name + " (streamed)", verdict, seen))
    r = post(url, chat(grammar="start: <|im_end|>"))
    verdict, seen = classify_http(r, 200)
    if r.status == 200:
        fin = r.json()["choices"][0].get("finish_reason")
        verdict = "clean" if fin == "stop" else "bad"
        seen += f" finish_reason={fin}"
    out.append(("constraint", "grammar that is exactly <|im_end|>", verdict, seen))


def request_group(url, key_url, out):
    cases = [
        ("json_schema format without a schema",
         chat(response_format={"type": "json_schema", "json_schema": {"name": "x"}})),
        ("tool message without tool_call_id",
         {"messages": USER + [{"role": "assistant", "content": "", "tool_calls": [
             {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
             {"role": "tool", "content": "42"}], "max_tokens": 4}),
        ("tool-call arguments that are not JSON",
         {"messages": USER + [{"role": "assistant", "content": "", "tool_calls": [
             {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{not json"}}]},
             {"role": "tool", "tool_call_id": "c1", "content": "42"}], "max_tokens": 4}),
    ]
    for name, body in cases:
        verdict, seen = classify_http(post(url, body), "4xx")
        out.append(("request", name, verdict, seen))
    for scheme in ("BEARER", "bearer", "Bearer"):
        r = post(key_url, chat(), headers={"Authorization": f"{scheme} probe-key"})
        verdict, seen = classify_http(r, 200)
        out.append(("request", f"Authorization: {scheme} <key>", verdict, seen))


def raw(url, data, timeout=10):
    """Sends raw bytes; returns (status line, body) of the answer."""
    parts = urllib.parse.urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=timeout) as s:
        s.sendall(data)
        buf = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                buf += chunk
        except socket.timeout:
            pass
    head, _, body = buf.partition(b"\r\n\r\n")
    return head.split(b"\r\n")[0].decode("latin-1"), body


def http_group(url, out):
    host = urllib.parse.urlsplit(url).netloc.encode()
    cases = [
        ("URI of 100 KB", b"GET /" + b"a" * 100_000 + b" HTTP/1.1\r\nHost: " + host + b"\r\nConnection: close\r\n\r\n"),
        ("header of 1 MB", b"GET /health HTTP/1.1\r\nHost: " + host + b"\r\nX-Big: " + b"b" * 1_000_000
         + b"\r\nConnection: close\r\n\r\n"),
        ("malformed request line", b"GARBAGE\r\n\r\n"),
    ]
    for name, data in cases:
        try:
            line, body = raw(url, data)
            parts = line.split(" ")
            status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
            try:
                is_json = bool(json.loads(body.decode("utf-8")).get("error"))
            except (ValueError, UnicodeDecodeError, AttributeError):
                is_json = False
            verdict = "clean" if 400 <= status < 500 and is_json else "bad"
            seen = f"{line!r} body {body[:80]!r}"
        except OSError as e:
            verdict, seen = "bad", f"{type(e).__name__}: {e}"
        out.append(("http", name, verdict, seen))


def shutdown_group(binary, model, out):
    server = common.Server(binary, model, ["--parallel", 1, "-c", 4096, "--shutdown-timeout", 20], quiet=True)
    server.start()
    results = []

    def send(i):
        t0 = time.monotonic()
        try:
            body = {"prompt": "Count:", "max_tokens": 3000 if i == 0 else 8, "ignore_eos": True}
            r = common.request("POST", server.url + "/v1/completions", body, timeout=60)
            results.append((i, r.status, time.monotonic() - t0))
        except OSError as e:
            results.append((i, f"{type(e).__name__}", time.monotonic() - t0))

    threads = [threading.Thread(target=send, args=(i,)) for i in range(4)]
    threads[0].start()
    time.sleep(0.5)
    for t in threads[1:]:
        t.start()
    time.sleep(0.5)
    server.proc.send_signal(signal.SIGTERM)
    for t in threads:
        t.join(70)
    server.stop()
    queued = [(i, st, round(t, 2)) for i, st, t in results if i != 0]
    ok = len(queued) == 3 and all(st == 503 for _, st, _ in queued) and all(t < 3.0 for _, _, t in queued)
    out.append(("shutdown", "3 queued requests at SIGTERM", "clean" if ok else "bad",
                f"queued: {queued} (seconds since sent; SIGTERM ~1 s after)"))


def main():
    p = common.add_common_args(argparse.ArgumentParser(description=__doc__.split("\n")[0]))
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args()
    out = []
    try:
        model = common.find_model(args.model)
        with common.Server(args.binary, model, ["--parallel", 2, "-c", 2048], quiet=True) as s:
            constraint_group(s.url, out)
            with common.Server(args.binary, model, ["--parallel", 1, "-c", 512, "--api-key", "probe-key"],
                               quiet=True) as k:
                request_group(s.url, k.url, out)
            http_group(s.url, out)
        shutdown_group(args.binary, model, out)
    except common.SetupError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    groups = {}
    for g, name, verdict, seen in out:
        print(f"{verdict.upper():5} {g:10} {name}: {seen}")
        groups.setdefault(g, [0, 0, 0])
        groups[g][0] += 1
        groups[g][1 if verdict == "clean" else 2] += 1
    print("\n| group | tried | clean | bad |\n|---|---|---|---|")
    for g, (n, c, b) in groups.items():
        print(f"| {g} | {n} | {c} | {b} |")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
