#!/usr/bin/env python3
"""Acceptance load test of the OpenAI-compatible server (ferrolm or llama.cpp's llama-server).

    16 concurrent streaming clients with SmolLM2 for 60 s: no error, no lost or duplicated token
    (each response identical to what the same request gives alone with greedy sampling), and the
    aggregate generation tokens/s with 8 slots at least 3x a single slot's.

For each slot count of --slots (default 1,8) a fresh server is started, then:

1. references: every prompt of a fixed set of ~30 chat prompts of different lengths is sent
   ALONE (one request at a time, non-streaming, temperature 0, the same max_tokens) twice: "cold"
   (the first time) and "warm" (again, now that the server's prefix cache holds its prompt). Both
   are kept (text, completion_tokens, finish_reason). A prompt whose warm answer differs from its
   cold one is "cache-dependent": the server's greedy output depends on how much of the prompt it
   found cached (ferrolm: the last prompt token decoded alone instead of inside the prefill
   batch takes other kernels, whose rounding can flip a near-tie);
2. load: --clients threads each loop for --duration seconds: take the next prompt (round robin
   over all clients), send it as a streaming chat completion (temperature 0,
   stream_options.include_usage), join the content deltas and compare text, completion_tokens
   and finish_reason with the references: a response equal to neither the warm nor the cold one is
   a mismatch (a lost, duplicated or changed token). Every response must also be a well-formed
   stream (a finish_reason, a usage chunk, `data: [DONE]`);
3. at the end of the window the requests still running are abandoned (their connections are
   closed: they count neither as errors nor as tokens) and one request alone must still give its
   warm reference (the server survived the load and the cancellations).

Tokens/s counts the completion_tokens of the requests that FINISHED inside the window, divided
by the window length (conservative: the requests cut at the end are not counted; with 8 slots
that costs up to 8 partial responses). "streamed tok/s" also prorates: tokens whose content chunk
arrived inside the window, from all requests (a finished request's completion_tokens are spread
over its content chunks). The ratio is tok/s of each slot count / tok/s with 1 slot.

llama-server is deterministic only within one batch shape: with several slots its greedy
output can differ from the single-request output in the last bits of the logits, so its
mismatches (and cache-dependent prompts) are reported but only ferrolm's fail --check.
--allow-cache-dependent keeps ferrolm's cache-dependent prompts out of --check (they are still
reported); `--server-arg=--cache-ram=0` runs the server without its prefix cache instead.

    python3 scripts/server_tests/load_test.py --server ferrolm --duration 60 --check
    python3 scripts/server_tests/load_test.py --server llama --duration 60 --json llama.json

Standard library only. ferrolm: --binary, $FERROLM_BIN or target/release/ferrolm; llama-server:
--llama-server PATH or built (cached) by scripts/build_llama_server.py.
"""
import argparse
import datetime
import http.client
import itertools
import json
import os
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MODEL_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"

LONG_TEXT = (
    "The old lighthouse on the northern cape was built in 1874 from granite quarried on the island "
    "itself. For almost a century a keeper and his family lived in the small house at its foot, "
    "trimming the wick every four hours and winding the clockwork that turned the lens. In 1962 "
    "the light was electrified and the keepers left; the house stood empty until a group of "
    "volunteers restored it in the 1990s and turned it into a museum about the shipwrecks of the "
    "coast. Today the lens still turns, driven by a small electric motor, and visitors can climb "
    "the 117 steps to the gallery on clear afternoons between May and September."
)
CODE_TEXT = (
    "def merge(a, b):\n    out = []\n    i = j = 0\n    while i < len(a) and j < len(b):\n"
    "        if a[i] <= b[j]:\n            out.append(a[i]); i += 1\n        else:\n"
    "            out.append(b[j]); j += 1\n    return out + a[i:] + b[j:]\n"
)
# (system message or None, user message): short questions, instructions, long contexts.
PROMPTS = [
    (None, "Hi!"),
    (None, "What is the capital of France?"),
    (None, "Name three primary colours."),
    (None, "Write a haiku about autumn leaves."),
    (None, "Explain in two sentences why the sky is blue."),
    ("You are a helpful assistant.", "Give me a recipe for a simple tomato soup."),
    (None, "What is 17 multiplied by 23? Show your working."),
    (None, "List five animals that live in the ocean and one fact about each."),
    ("You are a pirate. Always answer like a pirate.", "How do I make a cup of tea?"),
    (None, "Translate 'good morning, how are you?' into French and Spanish."),
    (None, "Write a short story of about one hundred words about a robot who learns to paint."),
    (None, "What are the main differences between a list and a tuple in Python?"),
    ("You are a concise assistant. Answer in one line.", "What does a CPU do?"),
    (None, "Summarise the following text in three bullet points.\n\n" + LONG_TEXT),
    (None, "Here is a text:\n\n" + LONG_TEXT + "\n\nWhen was the light electrified, and what happened then?"),
    (None, "Explain what this Python function does and give its time complexity.\n\n" + CODE_TEXT),
    (None, "Write a polite email asking a colleague to review my report by Friday."),
    (None, "Give me three tips for sleeping better."),
    ("You are a teacher for ten-year-old children.", "What is photosynthesis?"),
    (None, "Why do cats purr?"),
    (None, "Write a limerick about a programmer who loves coffee."),
    (None, "What is the difference between weather and climate?"),
    (None, "Describe a sunset over the sea for someone who has never seen one."),
    (None, "Plan a three-day trip to Rome with one museum and one restaurant per day."),
    ("You answer with JSON only.", "Give the name, age and city of an imaginary person."),
    (None, "Tell me a joke about mathematicians."),
    (None, "Here is a text:\n\n" + LONG_TEXT + "\n\nWrite a title for it and a two-line tagline."
     "\n\nThen list every number that appears in the text."),
    (None, "How does a bicycle stay upright when it moves?"),
    (None, "Write the first paragraph of a fairy tale set in a snowy forest."),
    (None, "What should I pack for a weekend of hiking in the mountains?"),
]


def log(msg):
    print(f"[load_test {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Failure(Exception):
    """The test could not run (a server did not start, a reference request failed, ...)."""


def default_model():
    cache = os.environ.get("FERROLM_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "ferrolm")
    return os.path.join(os.environ.get("FERROLM_MODEL_DIR") or os.path.join(cache, "models"), MODEL_NAME)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A server process (ferrolm serve or llama-server) on 127.0.0.1, its output in a log file."""

    def __init__(self, kind, binary, model, slots, ctx, threads, startup_timeout):
        self.kind, self.slots, self.startup_timeout = kind, slots, startup_timeout
        self.log = tempfile.NamedTemporaryFile(prefix=f"load_test-{kind}-np{slots}-", suffix=".log", delete=False)
        if kind == "ferrolm":
            self.port = None
            self.cmd = [binary, "serve", "-m", model, "--host", "127.0.0.1", "--port", "0", "--parallel",
                        str(slots), "-c", str(ctx), "-t", str(threads), "--shutdown-timeout", "2"]
        else:
            # llama-server splits -c over the slots (its KV cache is not unified with -np given).
            self.port = free_port()
            self.cmd = [binary, "-m", model, "--host", "127.0.0.1", "--port", str(self.port), "-np", str(slots),
                        "-c", str(ctx * slots), "--no-kv-unified", "-t", str(threads), "--no-webui"]
        self.proc = None

    def log_tail(self, n=3000):
        with open(self.log.name, errors="replace") as f:
            return f.read()[-n:]

    def start(self):
        log(f"starting {shlex.join(self.cmd)} (log {self.log.name})")
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise Failure(f"{self.kind} exited with {self.proc.returncode} at startup:\n{self.log_tail()}")
            if self.port is None:
                for line in self.log_tail(100000).splitlines():
                    if line.startswith("listening on http://"):
                        self.port = int(line.rsplit(":", 1)[1].strip().rstrip("/"))
            if self.port is not None:
                try:
                    status, _ = request_json(self.port, "GET", "/health", timeout=5)
                    if status == 200:
                        return
                except (OSError, http.client.HTTPException, ValueError):
                    pass
            time.sleep(0.2)
        raise Failure(f"{self.kind} did not become healthy in {self.startup_timeout} s:\n{self.log_tail()}")

    def cpu_seconds(self):
        """User + system CPU seconds the server process has used so far (Linux /proc), or None."""
        try:
            with open(f"/proc/{self.proc.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return None

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            log(f"{self.kind} ignored SIGTERM for 15 s: killing it")
            self.proc.kill()
            self.proc.wait()


def request_json(port, method, path, body=None, timeout=120):
    """One HTTP request on a fresh connection; returns (status, parsed JSON body or None)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = json.dumps(body).encode() if body is not None else None
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
        resp = conn.getresponse()
        raw = resp.read()
        try:
            return resp.status, json.loads(raw) if raw else None
        except ValueError:
            return resp.status, {"raw": raw[:500].decode(errors="replace")}
    finally:
        conn.close()


def chat_body(kind, prompt, max_tokens, stream):
    system, user = prompt
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
    body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0}
    if kind == "llama":
        body["top_k"] = 1
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


def reference(kind, port, prompt, max_tokens, timeout):
    """The answer to `prompt` asked alone, non-streaming: {text, completion_tokens, finish_reason}."""
    status, obj = request_json(port, "POST", "/v1/chat/completions", chat_body(kind, prompt, max_tokens, False),
                               timeout=timeout)
    try:
        if status != 200:
            raise KeyError(f"HTTP {status}")
        choice = obj["choices"][0]
        return {"text": choice["message"].get("content") or "", "finish_reason": choice["finish_reason"],
                "completion_tokens": int(obj["usage"]["completion_tokens"])}
    except (KeyError, IndexError, TypeError, ValueError) as e:
        raise Failure(f"reference request failed ({e}): {json.dumps(obj)[:1000]}") from None


class Connections:
    """The connections of the requests in flight, so that the end of the window can cut them."""

    def __init__(self):
        self.lock, self.live = threading.Lock(), set()

    def add(self, conn):
        with self.lock:
            self.live.add(conn)

    def remove(self, conn):
        with self.lock:
            self.live.discard(conn)

    def cut_all(self):
        with self.lock:
            for conn in self.live:
                try:
                    conn.sock.shutdown(socket.SHUT_RDWR)
                except (OSError, AttributeError):
                    pass


def stream_request(kind, port, prompt_index, prompt, max_tokens, timeout, conns, stop):
    """One streaming chat completion; returns a record with status ok, error or abandoned."""
    rec = {"prompt": prompt_index, "status": "error", "error": None, "deltas": [], "chunk_times": [],
           "ttft": None, "finish_reason": None, "completion_tokens": None}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conns.add(conn)
    rec["t_start"] = time.monotonic()
    done = False
    try:
        conn.request("POST", "/v1/chat/completions", body=json.dumps(chat_body(kind, prompt, max_tokens, True)),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            rec["error"] = f"HTTP {resp.status}: {resp.read()[:300].decode(errors='replace')}"
            return rec
        for raw in resp:
            line = raw.decode().rstrip("\r\n")
            if not line.startswith("data:"):
                continue  # blank separators, comments, event: lines
            data = line[5:].strip()
            if data == "[DONE]":
                done = True
                break
            obj = json.loads(data)
            if "error" in obj:
                rec["error"] = f"error event: {json.dumps(obj['error'])[:300]}"
                return rec
            if obj.get("usage") and not obj.get("choices"):
                rec["completion_tokens"] = int(obj["usage"]["completion_tokens"])
            for choice in obj.get("choices") or []:
                content = (choice.get("delta") or {}).get("content")
                if content:
                    now = time.monotonic()
                    if rec["ttft"] is None:
                        rec["ttft"] = now - rec["t_start"]
                    rec["deltas"].append(content)
                    rec["chunk_times"].append(now)
                if choice.get("finish_reason"):
                    if rec["finish_reason"] is not None:
                        rec["error"] = "two finish_reason chunks"
                        return rec
                    rec["finish_reason"] = choice["finish_reason"]
    except (OSError, http.client.HTTPException, ValueError, KeyError, TypeError) as e:
        if stop.is_set():
            rec["status"] = "abandoned"
        else:
            rec["error"] = f"{type(e).__name__}: {e}"
        return rec
    finally:
        rec["t_end"] = time.monotonic()
        conns.remove(conn)
        conn.close()
    if not done:
        if stop.is_set():
            rec["status"] = "abandoned"
        else:
            rec["error"] = "stream ended without data: [DONE]"
    elif rec["finish_reason"] is None:
        rec["error"] = "no finish_reason"
    elif rec["completion_tokens"] is None:
        rec["error"] = "no usage chunk although stream_options.include_usage was set"
    else:
        rec["status"] = "ok"
    return rec


def classify(text, deltas, ref):
    """How a streamed text that differs from its reference differs."""
    if ref.startswith(text):
        return "lost (the stream is a truncated reference)"
    if text.startswith(ref):
        return "extra (the reference is a prefix of the stream)"
    for i in range(1, len(deltas)):
        if deltas[i] == deltas[i - 1] and "".join(deltas[:i] + deltas[i + 1:]) == ref:
            return "duplicated chunk"
    return "diverged"


def compare(rec, refs):
    """None when the streamed response equals one of `refs` (warm first), else a description of
    how it differs from the first."""
    text = "".join(rec["deltas"])
    for ref in refs:
        if text == ref["text"] and rec["completion_tokens"] == ref["completion_tokens"] \
                and rec["finish_reason"] == ref["finish_reason"]:
            return None
    ref = refs[0]
    at = next((i for i, (a, b) in enumerate(zip(text, ref["text"])) if a != b), min(len(text), len(ref["text"])))
    return {"prompt": rec["prompt"], "kind": classify(text, rec["deltas"], ref["text"]) if text != ref["text"]
            else "same text, different count or finish_reason",
            "completion_tokens": [rec["completion_tokens"], ref["completion_tokens"]],
            "finish_reason": [rec["finish_reason"], ref["finish_reason"]], "first_diff_char": at,
            "stream_excerpt": text[max(0, at - 40):at + 80], "reference_excerpt": ref["text"][max(0, at - 40):at + 80]}


def as_record(prompt_index, ref):
    """A reference answer in the form of a streamed record (one delta), for compare()."""
    return {"prompt": prompt_index, "deltas": [ref["text"]], "completion_tokens": ref["completion_tokens"],
            "finish_reason": ref["finish_reason"]}


def percentile(values, q):
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, max(0, round(q * (len(v) - 1))))]


def run_phase(args, kind, binary, slots):
    """One fresh server with `slots` slots: references, load window, post-load check."""
    server = Server(kind, binary, args.model, slots, args.ctx_size, args.threads, args.startup_timeout)
    server.cmd += args.server_arg
    prompts = PROMPTS[:args.prompts]
    try:
        t0 = time.monotonic()
        server.start()
        startup_s = time.monotonic() - t0
        log(f"{kind} np={slots}: up on port {server.port} after {startup_s:.1f} s; "
            f"{len(prompts)} references alone, cold and warm")
        t0 = time.monotonic()
        cold, refs = [], []
        for p in prompts:
            cold.append(reference(kind, server.port, p, args.max_tokens, args.request_timeout))
            refs.append(reference(kind, server.port, p, args.max_tokens, args.request_timeout))
        refs_s = time.monotonic() - t0
        ref_tokens = sum(r["completion_tokens"] for r in cold + refs)
        cache_dependent = [i for i in range(len(prompts)) if cold[i] != refs[i]]
        log(f"  references: {ref_tokens} tokens in {refs_s:.1f} s ({ref_tokens / refs_s:.1f} tok/s alone); "
            f"warm != cold for prompts {cache_dependent}")

        counter, counter_lock = itertools.count(), threading.Lock()
        stop, conns, records, rec_lock = threading.Event(), Connections(), [], threading.Lock()

        def client():
            while not stop.is_set():
                with counter_lock:
                    i = next(counter) % len(prompts)
                rec = stream_request(kind, server.port, i, prompts[i], args.max_tokens, args.request_timeout,
                                     conns, stop)
                with rec_lock:
                    records.append(rec)
                if rec["status"] == "error" and not stop.is_set():
                    time.sleep(0.2)  # an error loop must not spin

        log(f"  load: {args.clients} streaming clients for {args.duration:.0f} s")
        load_before = os.getloadavg()[0]
        cpu0, server_cpu0 = os.times(), server.cpu_seconds()
        threads = [threading.Thread(target=client, daemon=True) for _ in range(args.clients)]
        w0 = time.monotonic()
        for t in threads:
            t.start()
        time.sleep(args.duration)
        w1 = time.monotonic()
        cpu1, server_cpu1 = os.times(), server.cpu_seconds()
        stop.set()
        conns.cut_all()
        for t in threads:
            t.join(timeout=args.request_timeout)
        hung = sum(t.is_alive() for t in threads)
        load_after = os.getloadavg()[0]

        post = reference(kind, server.port, prompts[0], args.max_tokens, args.request_timeout)
    finally:
        server.stop()

    errors = [r for r in records if r["status"] == "error"]
    ok = [r for r in records if r["status"] == "ok"]
    mismatches = [m for m in (compare(r, [refs[r["prompt"]], cold[r["prompt"]]]) for r in ok) if m]
    post_diff = compare(as_record(0, post), [refs[0], cold[0]])
    if post_diff:
        mismatches.append(dict(post_diff, kind="post-load request alone: " + post_diff["kind"]))
    window = w1 - w0
    finished = [r for r in ok if r["t_end"] <= w1]
    tokens = sum(r["completion_tokens"] for r in finished)
    streamed = 0.0
    for r in records:
        inside = sum(1 for t in r["chunk_times"] if w0 <= t <= w1)
        if r["status"] == "ok" and r["chunk_times"]:
            streamed += r["completion_tokens"] * inside / len(r["chunk_times"])
        else:
            streamed += inside
    ttfts = [r["ttft"] for r in ok if r["ttft"] is not None]
    result = {
        "server": kind, "slots": slots, "clients": args.clients, "window_s": window, "startup_s": startup_s,
        "references_s": refs_s, "reference_tok_s_alone": ref_tokens / refs_s,
        "requests_started": len(records), "requests_finished_in_window": len(finished),
        "requests_abandoned_at_end": sum(r["status"] == "abandoned" for r in records),
        "tokens": tokens, "tok_s": tokens / window, "streamed_tok_s": streamed / window,
        "ttft_median_s": statistics.median(ttfts) if ttfts else None, "ttft_p90_s": percentile(ttfts, 0.9),
        "errors": len(errors) + hung, "mismatches": len(mismatches), "cache_dependent_prompts": cache_dependent,
        "cache_dependent_samples": [compare(as_record(i, refs[i]), [cold[i]]) for i in cache_dependent[:5]],
        "error_samples": [r["error"] for r in errors[:10]] + ([f"{hung} client thread(s) hung"] if hung else []),
        "mismatch_samples": mismatches[:10],
        "prompts_used": sorted({r["prompt"] for r in ok}), "loadavg_1m": [load_before, load_after],
        # CPU seconds used in the window by this script's clients and by the server.
        "client_cpu_s": (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system),
        "server_cpu_s": None if server_cpu0 is None or server_cpu1 is None else server_cpu1 - server_cpu0,
        "command": server.cmd, "server_log": server.log.name,
    }
    if not result["errors"] and not mismatches:
        os.unlink(server.log.name)  # kept (path in the JSON) only when something went wrong
        result["server_log"] = None
    log(f"  {len(finished)} requests, {tokens} tokens in {window:.1f} s: {result['tok_s']:.1f} tok/s "
        f"(streamed {result['streamed_tok_s']:.1f}); errors {result['errors']}, mismatches {len(mismatches)}, "
        f"cache-dependent prompts {len(cache_dependent)}; CPU s in the window: clients "
        f"{result['client_cpu_s']:.1f}, server {fmt(result['server_cpu_s'], '.1f')}")
    for e in result["error_samples"][:3]:
        log(f"    error: {e}")
    for m in mismatches[:3]:
        log(f"    mismatch: {json.dumps(m)[:400]}")
    return result


def fmt(v, spec):
    return "–" if v is None else format(v, spec)


def print_table(results):
    print("| server | slots | requests | tokens | tok/s | streamed tok/s | ratio vs 1 slot | TTFT median s "
          "| TTFT p90 s | errors | mismatches | cache-dependent prompts |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in results:
        print(f"| {r['server']} | {r['slots']} | {r['requests_finished_in_window']} | {r['tokens']} | "
              f"{r['tok_s']:.1f} | {r['streamed_tok_s']:.1f} | {fmt(r.get('ratio'), '.2f')} | "
              f"{fmt(r['ttft_median_s'], '.2f')} | {fmt(r['ttft_p90_s'], '.2f')} | {r['errors']} | "
              f"{r['mismatches']} | {len(r['cache_dependent_prompts'])} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--server", choices=["ferrolm", "llama"], default="ferrolm", help="server under test")
    ap.add_argument("--binary", help="ferrolm binary (default: $FERROLM_BIN or target/release/ferrolm)")
    ap.add_argument("--llama-server", help="llama-server binary (default: built by scripts/build_llama_server.py)")
    ap.add_argument("--model", default=None, help=f"GGUF model (default: {MODEL_NAME} in the ferrolm model cache)")
    ap.add_argument("--duration", type=float, default=60, help="load window in seconds (default 60)")
    ap.add_argument("--clients", type=int, default=16, help="concurrent streaming clients (default 16)")
    ap.add_argument("--slots", default="1,8", help="slot counts, comma list; one fresh server each (default 1,8)")
    ap.add_argument("--max-tokens", type=int, default=160, help="max_tokens of every request (default 160)")
    ap.add_argument("--ctx-size", type=int, default=1024, help="context per slot (default 1024)")
    ap.add_argument("--threads", type=int, default=2, help="server threads (default 2)")
    ap.add_argument("--server-arg", action="append", default=[], metavar="ARG",
                    help="extra server flag, repeatable, e.g. --server-arg=--cache-ram=0")
    ap.add_argument("--allow-cache-dependent", action="store_true",
                    help="with --check: do not fail on prompts whose warm reference differs from the cold one")
    ap.add_argument("--prompts", type=int, default=len(PROMPTS),
                    help=f"use the first N of the {len(PROMPTS)} prompts (default all)")
    ap.add_argument("--request-timeout", type=float, default=300, help="seconds one request may take (default 300)")
    ap.add_argument("--startup-timeout", type=float, default=120, help="seconds a server may take to start")
    ap.add_argument("--json", metavar="OUT", help="write the results to OUT")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 on any error, any ferrolm mismatch, or a ratio below --min-ratio")
    ap.add_argument("--min-ratio", type=float, default=3.0,
                    help="with --check: least tok/s of the largest slot count / tok/s with 1 slot (default 3.0)")
    args = ap.parse_args()
    try:
        slot_counts = [int(x) for x in args.slots.split(",")]
    except ValueError:
        ap.error(f"--slots: not a comma list of integers: {args.slots!r}")
    if any(n < 1 for n in slot_counts) or args.clients < 1 or args.max_tokens < 1 or args.duration <= 0:
        ap.error("--slots, --clients and --max-tokens must be at least 1, --duration positive")
    if not 1 <= args.prompts <= len(PROMPTS):
        ap.error(f"--prompts must be between 1 and {len(PROMPTS)}")
    args.model = os.path.abspath(args.model or default_model())
    if not os.path.isfile(args.model):
        print(f"error: model {args.model} not found (set FERROLM_MODEL_DIR, or run scripts/fetch-test-models.sh)",
              file=sys.stderr)
        return 2

    try:
        if args.server == "ferrolm":
            binary = args.binary or os.environ.get("FERROLM_BIN") or os.path.join(ROOT, "target", "release", "ferrolm")
            if not os.access(binary, os.X_OK):
                raise Failure(f"ferrolm binary {binary} not found (cargo build --release, or --binary PATH)")
        else:
            binary = args.llama_server
            if binary is None:
                sys.path.insert(0, os.path.dirname(HERE))
                import build_llama_server  # noqa: E402  (shares bench_compare's llama.cpp build)
                try:
                    binary = build_llama_server.llama_server_binary()
                except build_llama_server.bench_compare.Failure as e:
                    raise Failure(f"building llama-server failed: {e}") from None
            if not os.access(binary, os.X_OK):
                raise Failure(f"llama-server binary {binary} not found")
        binary = os.path.abspath(binary)
        results = [run_phase(args, args.server, binary, n) for n in slot_counts]
    except Failure as e:
        print(f"error: {e}", file=sys.stderr)
        return 1

    base = next((r for r in results if r["slots"] == 1), None)
    for r in results:
        r["ratio"] = r["tok_s"] / base["tok_s"] if base and base["tok_s"] > 0 else None
    print(f"- {args.server} ({binary}), model {os.path.basename(args.model)}, {args.clients} streaming clients, "
          f"{args.duration:g} s window, max_tokens {args.max_tokens}, ctx {args.ctx_size} per slot, "
          f"{args.threads} threads, {args.prompts} prompts")
    print("- tok/s: completion tokens of the requests finished inside the window / window; streamed tok/s "
          "also counts the tokens streamed inside the window by requests cut at its end")
    print()
    print_table(results)

    problems = []
    for r in results:
        if r["errors"]:
            problems.append(f"{r['slots']} slot(s): {r['errors']} error(s)")
        if r["mismatches"] and args.server == "ferrolm":
            problems.append(f"{r['slots']} slot(s): {r['mismatches']} response(s) differ from the reference")
        if r["cache_dependent_prompts"] and args.server == "ferrolm" and not args.allow_cache_dependent:
            problems.append(f"{r['slots']} slot(s): prompts {r['cache_dependent_prompts']} answer differently alone "
                            "with their prompt cached (warm) than not (cold)")
    top = max(results, key=lambda r: r["slots"])
    if base and top is not base and (top["ratio"] is None or top["ratio"] < args.min_ratio):
        problems.append(f"tok/s with {top['slots']} slots is {fmt(top['ratio'], '.2f')}x that with 1 slot "
                        f"(need {args.min_ratio:g}x)")
    if args.server == "llama" and any(r["mismatches"] for r in results):
        print("\nllama-server mismatches are reported only (its greedy output depends on the batch shape).")
    if args.json:
        report = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                  "command": shlex.join([sys.executable] + sys.argv), "binary": binary, "model": args.model,
                  "duration": args.duration, "clients": args.clients, "max_tokens": args.max_tokens,
                  "ctx_size": args.ctx_size, "threads": args.threads, "min_ratio": args.min_ratio,
                  "server_args": args.server_arg,
                  "problems": problems, "results": results}
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
        log(f"wrote {args.json}")
    if problems:
        print("\nPROBLEMS:\n" + "\n".join(f"- {p}" for p in problems))
    if args.check and problems:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
