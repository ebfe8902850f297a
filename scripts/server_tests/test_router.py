#!/usr/bin/env python3
"""`ferrolm serve` replicas behind vLLM's cache-aware router (`vllm-router` from PyPI), on loopback.

Setup: two replicas of SmolLM2 (`--threads 1 --parallel 2` each) and `vllm-router --policy
cache_aware` in front of them, health-checked every second.

  affinity    --groups conversations, each a long system prompt of its own (~300 tokens) and
              --turns questions; each turn sends one question of every group at once through the
              router. Each replica serves under its own --alias, so the answer's `model` names
              the replica that ran it. Required: every request of a group lands on the replica of
              its first request, every later request reuses the prefix there
              (usage.prompt_tokens_details.cached_tokens, and prefix_cache_hits_total of that
              replica grows by the number of later requests), and both replicas get groups (the
              router spreads new prefixes by load).
  throughput  --clients concurrent clients for --seconds each, distinct prompts, 32 tokens each:
              generated tokens per second through the router with 2 replicas x 1 thread, then
              with 1 replica x 2 threads (`--parallel 4`, the same slots in all). Reported, not
              gated (speed is measured by benchmarks).
  failover    clients keep sending requests while one replica is killed (SIGKILL); once the router
              reports it unhealthy (GET /workers), every request sent from then on must succeed.
              Requests that were running on the killed replica may fail; their count is printed.

Usage: test_router.py --router PATH/vllm-router [--binary B] [--model M] [--seconds 10]
Exits 1 when a check fails, 2 when a server or the router cannot start.
"""

import argparse
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time

import common

WORDS = ("river stone garden window morning silver quiet lantern market harbor violet meadow copper "
         "bridge autumn candle forest orchard pebble thunder valley marble feather canyon").split()
REPLICA_ARGS = ["--threads", "1", "--parallel", "2", "-c", "2048", "--shutdown-timeout", "5"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Router:
    """`sglang-router launch` over `workers` on a free loopback port, as a context manager."""

    def __init__(self, exe, workers):
        self.exe = exe
        self.workers = workers
        self.url = None
        self.proc = None
        self.log = tempfile.TemporaryFile(mode="w+b")

    def __enter__(self):
        port = free_port()
        cmd = [self.exe, "launch", "--host", "127.0.0.1", "--port", str(port), "--policy", "cache_aware",
               "--worker-urls", *self.workers, "--health-check-interval-secs", "1",
               "--health-failure-threshold", "1", "--worker-startup-check-interval", "1",
               "--log-level", "warn", "--prometheus-host", "127.0.0.1",
               "--prometheus-port", str(free_port())]
        print("starting: " + " ".join(cmd), flush=True)
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)
        self.url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise common.SetupError(f"sglang-router exited ({self.proc.returncode}):\n{self.log_tail()}")
            try:
                if len(self.healthy()) == len(self.workers):
                    return self
            except OSError:
                pass
            time.sleep(0.2)
        raise common.SetupError(f"sglang-router did not see {len(self.workers)} healthy workers:\n{self.log_tail()}")

    def healthy(self):
        """URLs of the workers the router holds healthy (GET /workers)."""
        st, body = common.get_json(self.url + "/workers", timeout=5)
        if st != 200:
            return []
        return [w["url"] for w in body.get("workers", []) if w.get("is_healthy")]

    def log_tail(self, n=3000):
        self.log.seek(0)
        return self.log.read().decode("utf-8", "replace")[-n:]

    def __exit__(self, *exc):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return False


def system_prompt(seed, n_words=220):
    rng = random.Random(seed)
    return "You are assistant number %d. Background: " % seed + " ".join(rng.choice(WORDS) for _ in range(n_words))


def chat(url, system, question, max_tokens=4, timeout=60.0):
    body = {"model": "any", "max_tokens": max_tokens, "temperature": 0,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}]}
    return common.post_json(url + "/v1/chat/completions", body, timeout=timeout)


def parallel(calls):
    """Runs the thunks in `calls` at once; returns their results in order (an exception is
    returned as its value)."""
    out = [None] * len(calls)

    def run(i):
        try:
            out[i] = calls[i]()
        except Exception as e:  # reported by the caller
            out[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def affinity(router, replicas, groups, turns):
    """Checks that each conversation stays on one replica and reuses its prefix there. Each
    turn sends one request per group at once; the replica that ran it is the `model` of the
    answer (each replica serves under its own --alias)."""
    systems = [system_prompt(g) for g in range(groups)]
    hits0 = {r: common.metrics(u)["ferrolm_prefix_cache_hits_total"] for r, u in replicas.items()}
    home = {}
    later = {r: 0 for r in replicas}
    for t in range(turns):
        answers = parallel([lambda g=g: chat(router.url, systems[g], f"Question {t}: what is item {g * 7 + t}?")
                            for g in range(groups)])
        for g, answer in enumerate(answers):
            assert not isinstance(answer, Exception), f"group {g} turn {t}: {answer!r}"
            st, body = answer
            assert st == 200, f"group {g} turn {t}: {st} {body}"
            ran = body["model"]
            if t == 0:
                home[g] = ran
                continue
            cached = body["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)
            assert ran == home[g], f"group {g} turn {t} ran on {ran}, its first turn on {home[g]}"
            assert cached >= 200, f"group {g} turn {t}: only {cached} cached prompt tokens"
            later[ran] += 1
    hits = {r: common.metrics(u)["ferrolm_prefix_cache_hits_total"] - hits0[r] for r, u in replicas.items()}
    assert all(hits[r] >= later[r] for r in replicas), f"prefix hits per replica {hits}, expected >= {later}"
    assert set(home.values()) == set(replicas), f"conversations per replica: {home}"
    return f"{groups} groups x {turns} turns; replica of each group {home}; prefix hits per replica {hits}"


def load(url, clients, seconds, seed):
    """`clients` threads sending distinct 32-token requests for `seconds`; returns (requests,
    failures, generated tokens, seconds)."""
    stop = time.monotonic() + seconds
    stats = {"n": 0, "fail": 0, "tokens": 0}
    lock = threading.Lock()

    def client(c):
        rng = random.Random(seed * 100 + c)
        while time.monotonic() < stop:
            q = " ".join(rng.choice(WORDS) for _ in range(12))
            st, body = chat(url, f"Client {c}.", f"Write a story about {q}.", max_tokens=32)
            with lock:
                stats["n"] += 1
                if st == 200:
                    stats["tokens"] += body["usage"]["completion_tokens"]
                else:
                    stats["fail"] += 1

    t0 = time.monotonic()
    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return stats["n"], stats["fail"], stats["tokens"], time.monotonic() - t0


def throughput(url, clients, seconds, what):
    n, fail, tokens, secs = load(url, clients, seconds, seed=len(what))
    assert fail == 0, f"{fail} of {n} requests failed"
    rate = tokens / secs
    print(f"throughput {what}: {rate:.1f} generated tokens/s ({n} requests, {clients} clients, {secs:.1f} s)",
          flush=True)
    return rate


def failover(router, victim, seconds):
    """Kills `victim` under load; every request sent after the router marks it unhealthy must
    succeed."""
    results = []  # (sent at, ok)
    lock = threading.Lock()
    stop = threading.Event()

    def client(c):
        i = 0
        while not stop.is_set():
            i += 1
            sent = time.monotonic()
            try:
                st, _ = chat(router.url, f"Failover client {c}.", f"Say hello {i}.", max_tokens=8, timeout=30)
            except OSError:
                st = None
            with lock:
                results.append((sent, st == 200))

    threads = [threading.Thread(target=client, args=(c,)) for c in range(3)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    killed_at = time.monotonic()
    victim.kill()
    noticed_at = None
    while time.monotonic() < killed_at + 30:
        if victim.url not in router.healthy():
            noticed_at = time.monotonic()
            break
        time.sleep(0.1)
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    assert noticed_at is not None, "the router did not mark the killed replica unhealthy within 30 s"
    after = [ok for sent, ok in results if sent >= noticed_at]
    before = [ok for sent, ok in results if sent < noticed_at]
    assert len(after) >= 5, f"only {len(after)} requests after the router noticed"
    assert all(after), f"{after.count(False)} of {len(after)} requests failed after the router noticed"
    return (f"noticed {noticed_at - killed_at:.1f} s after the kill; {len(after)} requests after it, all ok; "
            f"{before.count(False)} of {len(before)} before it failed")


def run(args):
    model = common.find_model(args.model)
    checks = common.Checks()
    a = common.Server(args.binary, model, [*REPLICA_ARGS, "--alias", "replica-a"])
    b = common.Server(args.binary, model, [*REPLICA_ARGS, "--alias", "replica-b"])
    try:
        a.start()
        b.start()
        with Router(args.router, [a.url, b.url]) as router:
            checks.run("affinity", affinity, router, {"replica-a": a.url, "replica-b": b.url}, args.groups,
                       args.turns)
            two = checks.run("throughput 2x1", throughput, router.url, args.clients, args.seconds,
                             "2 replicas x 1 thread")
            checks.run("failover", failover, router, b, args.seconds / 2)
    finally:
        b.kill()
        a.stop()
    one_args = ["--threads", "2", "--parallel", "4", "-c", "2048"]
    with common.Server(args.binary, model, one_args) as c, Router(args.router, [c.url]) as router:
        one = checks.run("throughput 1x2", throughput, router.url, args.clients, args.seconds,
                         "1 replica x 2 threads")
    if two and one:
        print(f"2 replicas x 1 thread over 1 replica x 2 threads: {two / one:.2f}x", flush=True)
    return checks.summary("router")


def main():
    p = common.add_common_args(argparse.ArgumentParser(description=__doc__.split("\n")[0]))
    p.add_argument("--router", required=True, help="the sglang-router executable")
    p.add_argument("--seconds", type=float, default=10.0, help="each throughput window (default 10)")
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--groups", type=int, default=4)
    p.add_argument("--turns", type=int, default=3)
    args = p.parse_args()
    return common.setup_or_exit(lambda: run(args))


if __name__ == "__main__":
    sys.exit(main())
