#!/usr/bin/env python3
"""Prefix-cache test of `ferrolm serve`: a long shared prompt prefix is reused across slots.

Server: SmolLM2, --parallel 4, -c 4096. Each round:
  A   a chat request of ~550 prompt tokens (deterministic filler text + a question), streamed,
      8 tokens; /slots is polled meanwhile to see which slot ran it (slot S_A);
  C   a long streamed generation that keeps a slot busy; the scheduler gives the lowest free
      slot to a new request (crates/ferrolm/src/engine/scheduler.rs), so C takes S_A
      and the next request must run in another slot;
  B   streamed, same filler as A (>= 500 shared tokens) but another question;
  B'  streamed, same length as B but different filler (a cold prefix).
B must run in a slot other than S_A (seen in /slots), report
usage.prompt_tokens_details.cached_tokens >= --min-cached (490), and the median time to first
token of B over the rounds must be at least --min-speedup (5x) lower than that of B'.
Prints the numbers; exits 1 when a requirement is not met, 2 when the server cannot start.
"""

import argparse
import random
import statistics
import sys
import threading
import time

import common

WORDS = ("river stone garden window morning silver quiet lantern market harbor violet meadow copper "
         "bridge autumn candle forest orchard pebble thunder valley marble feather canyon").split()
N_CTX = 4096


def filler(url, seed, n_tokens):
    """Deterministic text of about `n_tokens` tokens: sentences of words drawn with `seed`."""
    rng = random.Random(seed)
    sentences = []
    text = ""
    while True:
        words = [rng.choice(WORDS) for _ in range(rng.randint(6, 12))]
        sentences.append(" ".join(words).capitalize() + ".")
        text = " ".join(sentences)
        st, body = common.post_json(url + "/tokenize", {"content": text})
        assert st == 200, body
        if len(body["tokens"]) >= n_tokens:
            return text


class SlotWatcher:
    """Polls /slots in a thread and keeps every busy row seen."""

    def __init__(self, url):
        self.url = url
        self.rows = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            st, rows = common.get_json(self.url + "/slots", timeout=10)
            if st == 200:
                self.rows.extend(r for r in rows if r["state"] != "idle")
            time.sleep(0.01)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def slots_of(self, n_prompt):
        """Slot ids seen busy with a request of `n_prompt` prompt tokens."""
        return sorted({r["id"] for r in self.rows if r["n_prompt"] == n_prompt})


def stream_chat(url, content, max_tokens):
    """Streams one greedy chat request; returns (ttft seconds, usage dict, timings dict)."""
    body = {"messages": [{"role": "user", "content": content}], "temperature": 0, "max_tokens": max_tokens,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    ttft, usage, timings = None, None, None
    for t, ev in common.stream_sse(url + "/v1/chat/completions", body):
        if ev == "[DONE]":
            break
        for ch in ev.get("choices", []):
            if ttft is None and ch.get("delta", {}).get("content"):
                ttft = t
        if ev.get("timings"):
            timings = ev["timings"]
        if ev.get("usage"):
            usage = ev["usage"]
    assert ttft is not None and usage is not None, "the stream had no content or no usage chunk"
    return ttft, usage, timings or {}


class Background:
    """A long streamed generation in a thread (request C); `close()` drops its connection."""

    def __init__(self, url):
        self.url = url
        self.first = threading.Event()
        self.stop = threading.Event()
        self.error = None
        self.n_chunks = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        body = {"messages": [{"role": "user", "content": "Count from one to one thousand in words."}],
                "max_tokens": 3000, "ignore_eos": True, "temperature": 0, "stream": True}
        try:
            for _, ev in common.stream_sse(self.url + "/v1/chat/completions", body, timeout=300):
                if ev != "[DONE]" and any(c.get("delta", {}).get("content") for c in ev.get("choices", [])):
                    self.n_chunks += 1
                    self.first.set()
                if self.stop.is_set() or ev == "[DONE]":
                    break
        except Exception as e:  # reported by the main thread
            self.error = e
        finally:
            self.first.set()

    def start(self):
        self.thread.start()
        if not self.first.wait(120) or self.error:
            raise AssertionError(f"background request C did not start streaming: {self.error}")

    def close(self):
        self.stop.set()
        self.thread.join(30)


def run_round(url, r, args, results):
    """One round; appends a dict of numbers to `results`."""
    shared = filler(url, seed=100 + r, n_tokens=args.prefix_tokens)
    cold = filler(url, seed=900 + r, n_tokens=args.prefix_tokens)
    q_a = "\n\nQuestion: which word comes first in the text above?"
    q_b = "\n\nQuestion: name two words that appear in the text above."
    with SlotWatcher(url) as w:
        _, ua, _ = stream_chat(url, shared + q_a, max_tokens=8)
    slot_a = w.slots_of(ua["prompt_tokens"])
    assert len(slot_a) == 1, f"request A seen in slots {slot_a} (rows: {w.rows[-3:]})"
    slot_a = slot_a[0]

    c = Background(url)
    c.start()
    try:
        with SlotWatcher(url) as w:
            ttft_b, ub, tb = stream_chat(url, shared + q_b, max_tokens=4)
            ttft_cold, uc, tc = stream_chat(url, cold + q_b, max_tokens=4)
        assert c.error is None, f"request C failed: {c.error}"
        c_rows = [x for x in w.rows if x["n_prompt"] not in (ub["prompt_tokens"], uc["prompt_tokens"])]
    finally:
        c.close()
    slot_b = w.slots_of(ub["prompt_tokens"])
    slot_c = sorted({x["id"] for x in c_rows})
    res = {
        "round": r, "A_prompt": ua["prompt_tokens"], "slot_A": slot_a, "slot_C": slot_c, "slot_B": slot_b,
        "B_prompt": ub["prompt_tokens"], "B_cached": ub["prompt_tokens_details"]["cached_tokens"],
        "Bcold_prompt": uc["prompt_tokens"], "Bcold_cached": uc["prompt_tokens_details"]["cached_tokens"],
        "ttft_B": ttft_b, "ttft_Bcold": ttft_cold,
        "prompt_ms_B": tb.get("prompt_ms"), "prompt_ms_Bcold": tc.get("prompt_ms"),
    }
    results.append(res)
    print(f"round {r}: A {res['A_prompt']} tokens in slot {slot_a}; C in slots {slot_c}; "
          f"B {res['B_prompt']} tokens in slots {slot_b}, {res['B_cached']} cached, TTFT {ttft_b * 1e3:.0f} ms "
          f"(server prefill {res['prompt_ms_B']:.0f} ms); B' {res['Bcold_prompt']} tokens, "
          f"{res['Bcold_cached']} cached, TTFT {ttft_cold * 1e3:.0f} ms "
          f"(server prefill {res['prompt_ms_Bcold']:.0f} ms)", flush=True)
    assert slot_c == [slot_a], f"request C was seen in slots {slot_c}, expected only A's slot {slot_a}"
    assert len(slot_b) == 1 and slot_b[0] != slot_a, f"B ran in slots {slot_b}, A in {slot_a}: not another slot"
    return res


def main():
    p = common.add_common_args(argparse.ArgumentParser(description=__doc__,
                                                       formatter_class=argparse.RawDescriptionHelpFormatter))
    p.add_argument("--rounds", type=int, default=2, help="measurement rounds (default 2)")
    p.add_argument("--prefix-tokens", type=int, default=520, help="filler tokens (default 520)")
    p.add_argument("--min-cached", type=int, default=490, help="least cached tokens of B (default 490)")
    p.add_argument("--min-speedup", type=float, default=5.0, help="least TTFT(B')/TTFT(B) (default 5)")
    p.add_argument("--server-arg", action="append", default=[], metavar="ARG",
                   help="extra `ferrolm serve` argument (repeatable), e.g. --server-arg=--cache-ram=0 as a "
                        "negative control")
    args = p.parse_args()
    checks = common.Checks()

    def run():
        with common.Server(args.binary, common.find_model(args.model), ["--parallel", "4", "-c", str(N_CTX),
                                                                        *args.server_arg]) as srv:
            # Warm-up: the first forward passes pay one-time costs.
            common.post_json(srv.url + "/v1/completions", {"prompt": "Hello", "max_tokens": 2})
            results = []
            for r in range(args.rounds):
                checks.run(f"round{r}_slots", run_round, srv.url, r, args, results)
            if len(results) != args.rounds:
                return checks.summary("test_prefix_cache")
            for res in results:
                checks.check(f"round{res['round']}_cached_tokens", res["B_cached"] >= args.min_cached,
                             f"B reused {res['B_cached']} tokens, need >= {args.min_cached}")
                # B' is the control: as long as B, and nothing but the chat template's head cached.
                checks.check(f"round{res['round']}_cold_control", res["A_prompt"] >= args.prefix_tokens and
                             abs(res["Bcold_prompt"] - res["B_prompt"]) <= 10 and res["Bcold_cached"] < 100,
                             f"A {res['A_prompt']} tokens; B {res['B_prompt']}, B' {res['Bcold_prompt']} tokens "
                             f"with {res['Bcold_cached']} cached (B' must be as long as B and cold)")
            hot = statistics.median(x["ttft_B"] for x in results)
            cold = statistics.median(x["ttft_Bcold"] for x in results)
            speedup = cold / hot if hot > 0 else float("inf")
            print(f"median TTFT: B {hot * 1e3:.0f} ms (cached prefix), B' {cold * 1e3:.0f} ms (cold): "
                  f"{speedup:.1f}x faster", flush=True)
            checks.check("ttft_speedup", speedup >= args.min_speedup,
                         f"B is only {speedup:.2f}x faster than B' (need {args.min_speedup}x)")
        return checks.summary("test_prefix_cache")

    return common.setup_or_exit(run)


if __name__ == "__main__":
    sys.exit(main())
