#!/usr/bin/env python3
"""Speculative decoding against plain decoding with `ferrolm generate`, side by side.

For every prompt file, runs plain greedy decoding, prompt lookup (`--lookup`) and, with
--draft, a draft model (`--model-draft`), ALTERNATELY, --reps times each, and prints a Markdown
table of median decode tokens/s (generated tokens over decode time, prompt excluded), the speedup
over plain decoding and the share of drafted tokens kept. It also checks that every mode
generated the same text as plain decoding (speculative decoding is exact).

    python3 scripts/bench_speculative.py -m target.gguf [--draft draft.gguf] [-f PROMPT ...]
        [-n 256] [-t 2] [-r 3] [--draft-p-min P] [--server]

With --server the same modes run through `ferrolm serve` (the engine's path: one server, with
--model-draft when --draft is given), as OpenAI completions with llama-server's fields (`/v1/completions`): plain is
`"speculative.n_max": 0`, lookup `"prompt_lookup": true`, draft the server's default; decode
t/s is the response's `timings.predicted_per_second`.

Default prompts: data/speculative/*.txt (a code edit and an extraction, ChatML). Standard
library only; builds ferrolm (release) unless --ferrolm BIN is given.
"""
import argparse
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(ferrolm, model, prompt, args, extra):
    """One greedy generation; returns (decode t/s, text, drafted, kept)."""
    cmd = [ferrolm, "generate", "-m", model, "-f", prompt, "-n", str(args.n_predict), "--temp", "0",
           "-t", str(args.threads), "-c", str(args.ctx_size), "--no-display-prompt"] + extra
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(f"failed ({res.returncode}): {' '.join(cmd)}\n{res.stderr}")
    m = re.search(r"\n\s+eval time =\s*([\d.]+) ms /\s*(\d+) runs", res.stderr)
    if not m:
        sys.exit(f"no eval time in the output of {' '.join(cmd)}:\n{res.stderr}")
    ms, n = float(m.group(1)), int(m.group(2))
    spec = re.search(r"speculative\s+= (\d+) tokens drafted, (\d+) kept", res.stderr)
    drafted, kept = (int(spec.group(1)), int(spec.group(2))) if spec else (0, 0)
    return (n / (ms / 1e3) if ms > 0 else 0.0), res.stdout, drafted, kept


class Server:
    """`ferrolm serve` on a free port, one slot, with the draft model if given."""

    def __init__(self, ferrolm, args):
        cmd = [ferrolm, "serve", "-m", args.model, "--port", "0", "--parallel", "1", "-t", str(args.threads),
               "-c", str(args.ctx_size), "--draft-max", str(args.draft_max), "--draft-p-min", str(args.draft_p_min)]
        if args.draft:
            cmd += ["--model-draft", args.draft]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in self.proc.stdout:
            m = re.search(r"listening on (http://\S+)", line)
            if m:
                self.url = m.group(1)
                return
        sys.exit(f"ferrolm serve exited ({self.proc.wait()}) before listening: {' '.join(cmd)}")

    def run(self, prompt, args, fields):
        """One greedy completion; returns (decode t/s, text, drafted, kept)."""
        with open(prompt, encoding="utf-8") as f:
            body = {"prompt": f.read(), "max_tokens": args.n_predict, "temperature": 0, **fields}
        req = urllib.request.Request(self.url + "/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as r:
            res = json.load(r)
        t = res["timings"]
        text = res["choices"][0]["text"]
        return t["predicted_per_second"], text, t.get("draft_n", 0), t.get("draft_n_accepted", 0)

    def close(self):
        self.proc.terminate()
        self.proc.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True, help="target model")
    ap.add_argument("--draft", help="draft model (same vocabulary) for the --model-draft mode")
    ap.add_argument("-f", "--prompt", action="append", help="prompt file (repeatable)")
    ap.add_argument("-n", "--n-predict", type=int, default=256)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-c", "--ctx-size", type=int, default=2048)
    ap.add_argument("-r", "--reps", type=int, default=3)
    ap.add_argument("--draft-max", type=int, default=8)
    ap.add_argument("--draft-p-min", type=float, default=0.75,
                    help="the draft model stops drafting below this probability (0: always --draft-max)")
    ap.add_argument("--server", action="store_true", help="measure through ferrolm serve (the engine)")
    ap.add_argument("--ferrolm", help="ferrolm binary (default: build this checkout)")
    args = ap.parse_args()
    ferrolm = args.ferrolm
    if not ferrolm:
        subprocess.run(["cargo", "build", "--release", "-p", "ferrolm-cli"], cwd=ROOT, check=True)
        ferrolm = os.path.join(os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target"),
                               "release", "ferrolm")
    prompts = args.prompt or sorted(glob.glob(os.path.join(ROOT, "data", "speculative", "*.txt")))
    dm = ["--draft-max", str(args.draft_max)]
    draft_name = "draft " + os.path.basename(args.draft or "")
    if args.server:
        server = Server(ferrolm, args)
        modes = [("plain", {"speculative.n_max": 0}), ("lookup", {"prompt_lookup": {"max_draft": args.draft_max}})]
        if args.draft:
            modes.append((draft_name, {}))
        run_one = lambda prompt, fields: server.run(prompt, args, fields)  # noqa: E731
    else:
        modes = [("plain", []), ("lookup", ["--lookup"] + dm)]
        if args.draft:
            modes.append((draft_name, ["--model-draft", args.draft, "--draft-p-min", str(args.draft_p_min)] + dm))
        run_one = lambda prompt, extra: run(ferrolm, args.model, prompt, args, extra)  # noqa: E731
    print(f"model {os.path.basename(args.model)}, -n {args.n_predict}, -t {args.threads}, "
          f"--draft-max {args.draft_max}, --draft-p-min {args.draft_p_min}, "
          f"{'ferrolm serve' if args.server else 'ferrolm generate'}, {args.reps} alternating runs, "
          "median decode t/s\n")
    print("| prompt | mode | decode t/s | speedup | drafts kept | same text |")
    print("| --- | --- | ---: | ---: | ---: | --- |")
    for prompt in prompts:
        samples = {name: [] for name, _ in modes}
        texts, counts = {}, {}
        for _ in range(args.reps):
            for name, extra in modes:
                tps, text, drafted, kept = run_one(prompt, extra)
                samples[name].append(tps)
                texts[name], counts[name] = text, (drafted, kept)
        base = statistics.median(samples["plain"])
        for name, _ in modes:
            med = statistics.median(samples[name])
            drafted, kept = counts[name]
            share = f"{kept}/{drafted} ({100 * kept / drafted:.0f}%)" if drafted else "-"
            same = "yes" if texts[name] == texts["plain"] else "**NO**"
            print(f"| {os.path.basename(prompt)} | {name} | {med:.2f} | {med / base:.2f}x | {share} | {same} |")
            sys.stdout.flush()
    if args.server:
        server.close()


if __name__ == "__main__":
    main()
