#!/usr/bin/env python3
"""Slowloris test of `ferrolm serve`: idle and half-sent connections must not lock anyone out.

Loopback only, bounded (about 10 s in all). Two servers on SmolLM2:

1. Under `prlimit --nofile=256` (soft and hard limit 256 descriptors) with the default
   connection flags: one client address opens --idle (300) idle sockets, --half (20) requests cut
   inside their headers and --half-body (10) requests cut inside their body, and keeps them all
   open. Then GET /health must answer 200 within --bound (3) seconds, and one real completion
   (8 tokens) within --bound + 5 seconds; the server must still be running.
2. With `--idle-timeout 1 --header-timeout 1`: an idle socket, a socket kept alive after one
   request, and a request cut inside its headers must each be closed by the server between 0.5
   and 3 seconds after they went quiet.

Exits 1 when a check fails, 2 when a server cannot start (a missing model or binary is an error,
never a skip).
"""

import argparse
import socket
import sys
import time
import urllib.parse

import common

NOFILE = 256


class LimitedServer(common.Server):
    """A server started under `prlimit --nofile=N`."""

    def __init__(self, *args, nofile=NOFILE, **kwargs):
        super().__init__(*args, **kwargs)
        self.nofile = nofile

    def command(self):
        return ["prlimit", f"--nofile={self.nofile}", "--", *super().command()]


def host_port(url):
    u = urllib.parse.urlsplit(url)
    return u.hostname, u.port


def open_sockets(host, port, n, payload=b""):
    """`n` connections, each having sent `payload` (possibly nothing)."""
    out = []
    for _ in range(n):
        s = socket.create_connection((host, port), timeout=5)
        if payload:
            s.sendall(payload)
        out.append(s)
    return out


def close_all(socks):
    for s in socks:
        try:
            s.close()
        except OSError:
            pass


def slowloris(url, args):
    host, port = host_port(url)
    body = b'{"prompt": "Once upon a time", "max_tokens": 8}'
    socks = []
    try:
        socks += open_sockets(host, port, args.idle)
        socks += open_sockets(host, port, args.half,
                              b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: appl")
        socks += open_sockets(host, port, args.half_body,
                              b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                              b"Content-Length: %d\r\n\r\n{\"pro" % len(body))
        time.sleep(0.3)
        t0 = time.monotonic()
        try:
            r = common.request("GET", url + "/health", timeout=args.bound)
        except OSError as e:
            raise AssertionError(f"/health did not answer within {args.bound} s ({e})") from None
        health_s = time.monotonic() - t0
        assert r.status == 200, f"/health: {r.status} {r.text()[:200]}"
        t0 = time.monotonic()
        try:
            r = common.request("POST", url + "/v1/completions", body, timeout=args.bound + 5)
        except OSError as e:
            raise AssertionError(f"the completion did not answer within {args.bound + 5} s ({e})") from None
        completion_s = time.monotonic() - t0
        assert r.status == 200, f"completion: {r.status} {r.text()[:200]}"
        assert r.json()["choices"][0]["text"] is not None
        return (f"{len(socks)} sockets held; /health in {health_s:.2f} s, completion in "
                f"{completion_s:.2f} s (bounds {args.bound} s and {args.bound + 5} s)")
    finally:
        close_all(socks)


def closed_after(sock, limit):
    """Seconds until the server closes `sock` (EOF or reset), or None after `limit`."""
    t0 = time.monotonic()
    sock.settimeout(0.05)
    while time.monotonic() - t0 < limit:
        try:
            data = sock.recv(4096)
        except socket.timeout:
            continue
        except OSError:
            return time.monotonic() - t0
        if not data:
            return time.monotonic() - t0
    return None


def idle_closed(url):
    host, port = host_port(url)
    idle = socket.create_connection((host, port), timeout=5)
    half = socket.create_connection((host, port), timeout=5)
    half.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
    kept = socket.create_connection((host, port), timeout=5)
    kept.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    head = kept.recv(4096)
    assert head.startswith(b"HTTP/1.1 200"), head[:100]
    times = {}
    try:
        for name, s in [("idle", idle), ("half-sent", half), ("kept-alive", kept)]:
            t = closed_after(s, 3.0)
            assert t is not None, f"the {name} connection was still open after 3 s"
            times[name] = t
    finally:
        close_all([idle, half, kept])
    # All three went quiet at about the same time; the first must not close early.
    assert times["idle"] >= 0.5, f"closed too early: {times}"
    return ", ".join(f"{k} closed after {v:.2f} s" for k, v in times.items())


def main():
    p = common.add_common_args(argparse.ArgumentParser(description=__doc__.split("\n")[0]))
    p.add_argument("--idle", type=int, default=300, help="idle sockets (default 300)")
    p.add_argument("--half", type=int, default=20, help="requests cut inside their headers (20)")
    p.add_argument("--half-body", type=int, default=10, help="requests cut inside their body (10)")
    p.add_argument("--bound", type=float, default=3.0, help="seconds /health may take (3)")
    args = p.parse_args()
    checks = common.Checks()
    t_all = time.monotonic()

    def run():
        model = common.find_model(args.model)
        with LimitedServer(args.binary, model, ["--parallel", 2, "-c", 512, "--shutdown-timeout", 2]) as s:
            checks.run(f"slowloris under --nofile={NOFILE}", slowloris, s.url, args)
            checks.check("server still running", s.alive(), s.stderr_tail())
        with common.Server(args.binary, model, ["--parallel", 1, "-c", 256, "--shutdown-timeout", 2,
                                                "--idle-timeout", 1, "--header-timeout", 1]) as s:
            checks.run("idle connections closed after --idle-timeout", idle_closed, s.url)
        print(f"total {time.monotonic() - t_all:.1f} s")
        return checks.summary("slowloris")

    code = common.setup_or_exit(run)
    return 2 if code is None else code


if __name__ == "__main__":
    sys.exit(main())
