#!/usr/bin/env python3
"""Client-disconnect test of `ferrolm serve`: abandoned streams must free their slots at once.

Server: SmolLM2, --parallel 8. Opens --clients (50) streamed chat requests at once over raw
sockets, each with a long max_tokens (ignore_eos), so 8 run and the rest wait in the queue.
When every connection has its response headers and first event, and every running request has
streamed at least --chunks (3) content chunks, all connections are closed abruptly (RST, via
SO_LINGER 0) and, in a second round, by a plain close without reading (FIN). Then /metrics and /slots are polled: zero busy slots and an empty queue are
required within --max-settle (1.0) seconds of the last close, and every one of the requests
must be counted in ferrolm_requests_cancelled_total. Finally a normal request must succeed.
Prints the times; exits 1 on failure, 2 when the server cannot start.
"""

import argparse
import json
import re
import selectors
import socket
import struct
import sys
import time
import urllib.parse

import common

PARALLEL = 8
CONTENT = re.compile(rb'"delta":\{"content":"[^"]')


class Conn:
    """One raw HTTP/1.1 streaming request."""

    def __init__(self, host, port, body):
        self.sock = socket.create_connection((host, port), timeout=10)
        self.sock.setblocking(False)
        payload = json.dumps(body).encode()
        head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\n"
                f"Content-Type: application/json\r\nAccept: text/event-stream\r\n"
                f"Content-Length: {len(payload)}\r\n\r\n").encode()
        self.sock.setblocking(True)
        self.sock.sendall(head + payload)
        self.sock.setblocking(False)
        self.data = b""
        self.status = None
        self.eof = False

    def feed(self):
        """Reads what is available."""
        try:
            chunk = self.sock.recv(65536)
        except BlockingIOError:
            return
        if not chunk:
            self.eof = True
            return
        self.data += chunk
        if self.status is None and b"\r\n\r\n" in self.data:
            first = self.data.split(b"\r\n", 1)[0].decode("latin-1")
            self.status = int(first.split()[1])

    def has_first_event(self):
        end = self.data.find(b"\r\n\r\n")
        return end >= 0 and b"data:" in self.data[end:]

    def content_chunks(self):
        return len(CONTENT.findall(self.data))

    def abort(self, mode):
        """Closes abruptly: "rst" resets the connection (SO_LINGER on, timeout 0); "fin" closes it
        without reading the rest, as a client process that exits does."""
        if mode == "rst":
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        else:
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


def busy_state(url):
    """(slots busy by /metrics, queue depth, busy rows of /slots)."""
    m = common.metrics(url, timeout=5)
    st, rows = common.get_json(url + "/slots", timeout=5)
    assert st == 200, st
    return int(m["ferrolm_slots_busy"]), int(m["ferrolm_queue_depth"]), [r for r in rows if r["state"] != "idle"]


def run(url, args, checks, mode):
    parts = urllib.parse.urlsplit(url)
    before = common.metrics(url)
    body = {"messages": [{"role": "user", "content": "Tell me a very long story about the sea."}],
            "max_tokens": args.max_tokens, "ignore_eos": True, "stream": True}
    t0 = time.monotonic()
    conns = [Conn(parts.hostname, parts.port, body) for _ in range(args.clients)]
    sel = selectors.DefaultSelector()
    for i, c in enumerate(conns):
        sel.register(c.sock, selectors.EVENT_READ, i)
    deadline = time.monotonic() + args.ready_timeout
    ready = False
    while time.monotonic() < deadline:
        for key, _ in sel.select(timeout=0.05):
            conns[key.data].feed()
        bad = [c.status for c in conns if c.status not in (None, 200)]
        assert not bad, f"some requests were refused: statuses {bad}"
        assert not any(c.eof for c in conns), "a stream ended before the connections were closed"
        counts = sorted((c.content_chunks() for c in conns), reverse=True)
        if all(c.has_first_event() for c in conns) and counts[PARALLEL - 1] >= args.chunks:
            ready = True
            break
    streaming = sum(1 for c in conns if c.content_chunks() > 0)
    assert ready, (f"not ready after {args.ready_timeout} s: {sum(c.has_first_event() for c in conns)} of "
                   f"{len(conns)} got a first event; content chunks {sorted(c.content_chunks() for c in conns)}")
    busy, queued, _ = busy_state(url)
    print(f"{len(conns)} streams open after {time.monotonic() - t0:.2f} s: {streaming} generating, "
          f"/metrics: {busy} slots busy, {queued} queued", flush=True)
    assert streaming == PARALLEL and busy == PARALLEL, (streaming, busy)
    assert queued == args.clients - PARALLEL, f"queue depth {queued}, expected {args.clients - PARALLEL}"

    sel.close()
    for c in conns:
        c.abort(mode)
    t_closed = time.monotonic()
    history = []
    settled = None
    while time.monotonic() - t_closed < max(5.0, 3 * args.max_settle):
        busy, queued, rows = busy_state(url)
        history.append((round(time.monotonic() - t_closed, 3), busy, queued))
        if busy == 0 and queued == 0 and not rows:
            settled = time.monotonic() - t_closed
            break
        time.sleep(0.01)
    print(f"closed all connections ({mode}); busy/queued after close: {history[:3]} ... {history[-1:]}", flush=True)
    checks.check(f"{mode}_slots_freed", settled is not None and settled <= args.max_settle,
                 f"not idle within {args.max_settle} s of the last close "
                 + (f"(idle after {settled:.3f} s)" if settled else f"(still {history[-1]})"))
    if settled is not None:
        print(f"idle {settled * 1e3:.0f} ms after the last close", flush=True)

    # The counters settle with the slots; allow a moment for the queued ones.
    cancelled = 0.0
    for _ in range(50):
        after = common.metrics(url)
        cancelled = after["ferrolm_requests_cancelled_total"] - before["ferrolm_requests_cancelled_total"]
        if cancelled >= args.clients:
            break
        time.sleep(0.05)
    finished = after["ferrolm_requests_finished_total"] - before["ferrolm_requests_finished_total"]
    checks.check(f"{mode}_all_cancelled", cancelled == args.clients and finished == 0,
                 f"requests_cancelled_total grew by {cancelled:.0f} and finished by {finished:.0f}, "
                 f"expected {args.clients} and 0")
    st, r = common.post_json(url + "/v1/chat/completions",
                             {"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 8})
    checks.check(f"{mode}_request_after", st == 200 and r["choices"][0]["message"]["content"] is not None,
                 f"status {st}: {r}")
    # /metrics is published after the engine tick that ended the request, a moment after the reply.
    t_end = time.monotonic()
    while True:
        busy, queued, _ = busy_state(url)
        if (busy, queued) == (0, 0) or time.monotonic() - t_end > 1.0:
            break
        time.sleep(0.01)
    checks.check(f"{mode}_idle_after", busy == 0 and queued == 0,
                 f"{busy} busy, {queued} queued 1 s after the last request")


def main():
    p = common.add_common_args(argparse.ArgumentParser(description=__doc__,
                                                       formatter_class=argparse.RawDescriptionHelpFormatter))
    p.add_argument("--clients", type=int, default=50, help="concurrent streams (default 50)")
    p.add_argument("--chunks", type=int, default=3, help="content chunks each running stream gets first")
    p.add_argument("--max-tokens", type=int, default=900, help="max_tokens of each stream (default 900)")
    p.add_argument("--max-settle", type=float, default=1.0, help="seconds allowed to free the slots")
    p.add_argument("--ready-timeout", type=float, default=90.0, help="seconds to wait for the streams")
    p.add_argument("--modes", default="rst,fin",
                   help="how to close, comma-separated: rst (reset) and/or fin (plain close); default both")
    args = p.parse_args()
    if set(args.modes.split(",")) - {"rst", "fin"}:
        p.error("--modes takes rst and/or fin")
    if args.clients <= PARALLEL:
        p.error(f"--clients must be more than the {PARALLEL} slots")
    checks = common.Checks()

    def go():
        server_args = ["--parallel", str(PARALLEL), "-c", "1024", "--max-queue", str(args.clients)]
        with common.Server(args.binary, common.find_model(args.model), server_args) as srv:
            for mode in args.modes.split(","):
                checks.run(f"{mode}_streams", run, srv.url, args, checks, mode)
        return checks.summary("test_disconnect")

    return common.setup_or_exit(go)


if __name__ == "__main__":
    sys.exit(main())
