#!/usr/bin/env python3
"""Memory soak test of `ferrolm serve`: resident memory obeys the prefix cache's budget.

Server: SmolLM2, --parallel 4, -c 4096, --cache-ram 256 (MiB). For --seconds, --clients threads
send mixed traffic on loopback: long prompts that share nothing (900 to 2,800 tokens of random
words, 4 generated tokens: each leaves a new prefix-cache entry and pushes an old one out),
streamed chat requests that share a long system prompt (prefix-cache hits), and short
completions. The server's resident set size (VmRSS of /proc/PID/status) is sampled every second.

Requirements:
  * the peak RSS stays under   idle RSS (model, weights repacked, runtime)
                             + the KV caches of all slots at full context
                             + the prefix cache's budget
                             + a margin (--margin-mib, default 96 MiB: allocator slack and the
                               per-request buffers: logits, batch activations, HTTP bodies);
  * RSS outside the KV caches (RSS less the prefix cache's and the slots' KV bytes from
    /metrics, sampled together) is flat over the last half: its least-squares growth over that
    half is below --max-growth-mib (default 32 MiB). The cache itself may still be filling
    towards its budget in a short run (checked on its own); memory freed and kept by the
    allocator shows here;
  * /metrics reports the prefix cache within its budget, and the process's RSS
    (`ferrolm_process_resident_memory_bytes`) close to what /proc says;
  * no request failed.
Prints the samples (every 10 s) and the numbers; exits 1 when a requirement is not met, 2 when
the server cannot start. CI runs 120 s (scripts/server_tests/run_all.sh, step `soak`); the
10-minute soak is `python3 scripts/server_tests/test_soak.py --seconds 600`.
"""

import argparse
import json
import random
import sys
import threading
import time

import common

N_CTX = 4096
PARALLEL = 4
VOCAB = [w + s for w in ("river stone garden window morning silver quiet lantern market harbor violet "
                         "meadow copper bridge autumn candle forest orchard pebble thunder valley "
                         "marble feather canyon").split()
         for s in ("", "s", "ed", "ing", "ly", "er")]


def words(rng, n):
    """`n` random words (about 1.3 tokens each)."""
    return " ".join(rng.choice(VOCAB) for _ in range(n))


def rss_bytes(pid):
    """VmRSS of process `pid` in bytes, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


class Traffic:
    """Client threads sending the mixed requests; counts answers and failures."""

    def __init__(self, url, seed, deadline):
        self.url = url
        self.seed = seed
        self.deadline = deadline
        self.lock = threading.Lock()
        self.done = {"distinct": 0, "shared": 0, "short": 0}
        self.failures = []
        self.system = words(random.Random(seed), 700)

    def one(self, rng):
        kind = rng.choices(("distinct", "shared", "short"), weights=(6, 3, 1))[0]
        if kind == "distinct":
            body = {"prompt": words(rng, rng.randint(500, 1500)), "max_tokens": 4, "temperature": 0}
            st, resp = common.post_json(self.url + "/v1/completions", body, timeout=300)
            ok = st == 200
        elif kind == "shared":
            body = {"messages": [{"role": "system", "content": self.system},
                                 {"role": "user", "content": words(rng, rng.randint(5, 60))}],
                    "max_tokens": 16, "stream": True}
            chunks = [d for _, d in common.stream_sse(self.url + "/v1/chat/completions", body, timeout=300)]
            ok = bool(chunks) and chunks[-1] == "[DONE]"
            st, resp = (200 if ok else 0), chunks[-3:]
        else:
            body = {"prompt": words(rng, 20), "max_tokens": 24}
            st, resp = common.post_json(self.url + "/v1/completions", body, timeout=300)
            ok = st == 200
        with self.lock:
            if ok:
                self.done[kind] += 1
            else:
                self.failures.append(f"{kind}: {st} {str(resp)[:200]}")

    def client(self, i):
        rng = random.Random(self.seed * 1000 + i)
        while time.monotonic() < self.deadline:
            try:
                self.one(rng)
            except Exception as e:  # noqa: BLE001 - every failure is reported, none is fatal here
                with self.lock:
                    self.failures.append(f"{type(e).__name__}: {e}")


def growth_over(samples):
    """Least-squares slope of (t, rss) times the time span: the trend's growth, in bytes."""
    n = len(samples)
    if n < 3:
        return 0.0
    mt = sum(t for t, _ in samples) / n
    mr = sum(r for _, r in samples) / n
    var = sum((t - mt) ** 2 for t, _ in samples)
    if var == 0:
        return 0.0
    slope = sum((t - mt) * (r - mr) for t, r in samples) / var
    return slope * (samples[-1][0] - samples[0][0])


def metric(text, name):
    """The value of an unlabelled sample `name` in a Prometheus exposition."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def main():
    p = common.add_common_args(argparse.ArgumentParser(description=__doc__.split("\n")[0]))
    p.add_argument("--seconds", type=float, default=120.0)
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--cache-ram", type=int, default=256, help="--cache-ram of the server, MiB")
    p.add_argument("--margin-mib", type=float, default=96.0)
    p.add_argument("--max-growth-mib", type=float, default=32.0)
    p.add_argument("--seed", type=int, default=int(time.time()))
    p.add_argument("--dump", help="write every sample (t, RSS, prefix cache, slots' KV; MiB) to this file")
    args = p.parse_args()
    mib = 1 << 20
    checks = common.Checks()
    try:
        model = common.find_model(args.model)
        server = common.Server(args.binary, model, ["--parallel", PARALLEL, "-c", N_CTX, "--cache-ram",
                                                    args.cache_ram, "--shutdown-timeout", 5, "--timeout", 0])
        server.start()
    except common.SetupError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        pid = server.proc.pid
        url = server.url
        # The KV bytes per token, from a finished request's entry in the prefix cache.
        st, _ = common.post_json(url + "/v1/completions", {"prompt": words(random.Random(1), 300),
                                                            "max_tokens": 1})
        time.sleep(0.5)
        m = common.metrics(url)
        idle = rss_bytes(pid)
        kv_per_token = m["ferrolm_prefix_cache_bytes"] / max(1.0, m["ferrolm_prefix_cache_tokens"])
        kv_all = kv_per_token * m["ferrolm_kv_capacity_tokens"]
        if kv_per_token == 0:
            print("error: the first request left nothing in the prefix cache", file=sys.stderr)
            return 1
        budget = idle + kv_all + args.cache_ram * mib + args.margin_mib * mib
        print(f"seed {args.seed}; idle RSS {idle / mib:.0f} MiB, KV {kv_per_token / 1024:.1f} KiB/token, "
              f"all slots full {kv_all / mib:.0f} MiB, cache budget {args.cache_ram} MiB, margin "
              f"{args.margin_mib:.0f} MiB -> bound {budget / mib:.0f} MiB", flush=True)

        t0 = time.monotonic()
        traffic = Traffic(url, args.seed, t0 + args.seconds)
        threads = [threading.Thread(target=traffic.client, args=(i,), daemon=True) for i in range(args.clients)]
        for t in threads:
            t.start()
        samples = []
        while any(t.is_alive() for t in threads):
            r = rss_bytes(pid)
            if r is None:
                break
            now = time.monotonic() - t0
            try:
                m = common.metrics(url)
                cache = m.get("ferrolm_prefix_cache_bytes", 0)
                kv = m.get("ferrolm_kv_bytes", 0)
            except (OSError, RuntimeError):
                cache = None
            if cache is not None:
                samples.append((now, r, cache, kv))
            if len(samples) % 10 == 1:
                print(f"  t={now:5.0f} s  RSS {r / mib:6.0f} MiB  prefix cache {(cache or 0) / mib:4.0f} MiB  "
                      f"slots' KV {(kv or 0) / mib:4.0f} MiB  "
                      f"done {traffic.done}", flush=True)
            time.sleep(1.0)
        for t in threads:
            t.join(timeout=330)

        m = common.metrics(url)
        text = common.get_text(url + "/metrics")[1]
        rss_now = rss_bytes(pid)
        peak = max(s[1] for s in samples) if samples else 0
        late = [s for s in samples if s[0] >= args.seconds / 2]
        growth = growth_over([(t, r - c - kv) for t, r, c, kv in late])
        raw = growth_over([(t, r) for t, r, _, _ in late])
        if args.dump:
            with open(args.dump, "w") as f:
                for t, r, c, kv in samples:
                    f.write(f"{t:.1f} {r / mib:.1f} {c / mib:.1f} {kv / mib:.1f}\n")
        print(f"peak RSS {peak / mib:.0f} MiB (bound {budget / mib:.0f}); growth over the last half "
              f"{growth / mib:+.1f} MiB outside the KV caches, {raw / mib:+.1f} MiB in all "
              f"(limit {args.max_growth_mib:.0f}); prefix cache "
              f"{m.get('ferrolm_prefix_cache_bytes', 0) / mib:.0f} MiB; requests {traffic.done}", flush=True)
        checks.check("no request failed", not traffic.failures, "; ".join(traffic.failures[:5]))
        checks.check("requests of every kind ran", all(v > 0 for v in traffic.done.values()), str(traffic.done))
        checks.check("peak RSS under the bound", peak <= budget,
                     f"peak {peak / mib:.0f} MiB > bound {budget / mib:.0f} MiB")
        checks.check("RSS outside the KV caches flat over the last half", growth <= args.max_growth_mib * mib,
                     f"grew {growth / mib:.1f} MiB")
        checks.check("prefix cache within its budget",
                     m.get("ferrolm_prefix_cache_bytes", 0) <= args.cache_ram * mib, json.dumps(m)[:300])
        reported = metric(text, "ferrolm_process_resident_memory_bytes")
        checks.check("/metrics reports the RSS", reported is not None and rss_now is not None
                     and abs(reported - rss_now) <= 0.25 * rss_now,
                     f"reported {reported}, /proc says {rss_now}")
        checks.check("/metrics reports the prefix cache budget",
                     metric(text, "ferrolm_prefix_cache_budget_bytes") == args.cache_ram * mib,
                     str(metric(text, "ferrolm_prefix_cache_budget_bytes")))
    finally:
        code, secs = server.stop()
        checks.check("server exits 0 on SIGTERM", code == 0, f"status {code} after {secs:.1f} s")
    return checks.summary("soak")


if __name__ == "__main__":
    sys.exit(main())
