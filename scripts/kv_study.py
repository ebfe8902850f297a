#!/usr/bin/env python3
"""Perplexity vs KV budget for each eviction policy, on a long text, for the test models.

Runs `ferrolm perplexity --output json` for every (model, policy, budget), writes the results to
a JSON file and draws an SVG plot (no plotting library needed). See docs/kv-eviction.md.

    cargo build --release -p ferrolm-cli
    python3 scripts/kv_study.py --out docs/kv-eviction    # writes .json and .svg
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = ["SmolLM2-135M-Instruct.Q4_1.gguf", "gemma-3-270m-q4_k_m.gguf"]

# (label, policy arguments given the budget); SINKS attention sinks where a policy keeps them.
SINKS = 4
OBS = 32


def configs(budget):
    return [
        ("sliding + 4 sinks", ["--eviction-policy", "sliding", "--protected-prefix", str(SINKS),
                               "--eviction-window", str(budget - SINKS)]),
        ("sliding, no sinks", ["--eviction-policy", "sliding", "--protected-prefix", "0",
                               "--eviction-window", str(budget)]),
        ("h2o", ["--eviction-policy", "h2o", "--protected-prefix", str(SINKS),
                 "--eviction-window", str(budget // 2)]),
        ("snapkv", ["--eviction-policy", "snapkv", "--protected-prefix", str(SINKS),
                    "--eviction-window", str(OBS)]),
    ]


def log(msg):
    print(f"[kv_study {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def model_dir():
    d = os.environ.get("FERROLM_MODEL_DIR")
    if d:
        return Path(d)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ferrolm" / "models"


def run(ferrolm, model, text, args, extra):
    cmd = [ferrolm, "perplexity", "-m", str(model), "-f", str(text), "-c", str(args.ctx),
           "--stride", str(args.ctx // 2), "-b", str(args.batch), "-t", str(args.threads),
           "--max-windows", str(args.windows), "--evict-ratio", str(args.ratio),
           "--output", "json"] + extra
    log("$ " + " ".join(cmd))
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def svg(results, budgets, ctx, path):
    """Perplexity vs budget, one panel per model, one line per policy."""
    colors = {"sliding + 4 sinks": "#1f77b4", "sliding, no sinks": "#ff7f0e", "h2o": "#2ca02c",
              "snapkv": "#d62728", "full cache": "#555555"}
    models = sorted({r["model"] for r in results}, key=lambda m: MODELS.index(m) if m in MODELS else 9)
    pw, ph, ml, mt, mb = 420, 300, 60, 40, 50
    width = ml + len(models) * (pw + 30) + 150
    height = mt + ph + mb
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'font-family="sans-serif" font-size="12">',
             f'<rect width="{width}" height="{height}" fill="white"/>']
    for mi, model in enumerate(models):
        x0 = ml + mi * (pw + 30)
        rows = [r for r in results if r["model"] == model]
        ys = [r["perplexity"] for r in rows]
        lo, hi = min(ys) * 0.95, max(ys) * 1.05
        fx = lambda b: x0 + (budgets.index(b) + 0.5) * pw / len(budgets)
        fy = lambda v: mt + ph - (v - lo) / (hi - lo) * ph
        parts.append(f'<rect x="{x0}" y="{mt}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>')
        parts.append(f'<text x="{x0 + pw / 2}" y="{mt - 12}" text-anchor="middle" font-weight="bold">'
                     f'{model}</text>')
        for i in range(5):
            v = lo + (hi - lo) * i / 4
            parts.append(f'<line x1="{x0}" x2="{x0 + pw}" y1="{fy(v):.1f}" y2="{fy(v):.1f}" stroke="#eee"/>')
            parts.append(f'<text x="{x0 - 5}" y="{fy(v) + 4:.1f}" text-anchor="end">{v:.1f}</text>')
        for b in budgets:
            parts.append(f'<text x="{fx(b):.1f}" y="{mt + ph + 18}" text-anchor="middle">'
                         f'{b} ({100 * b // ctx}%)</text>')
        parts.append(f'<text x="{x0 + pw / 2}" y="{mt + ph + 38}" text-anchor="middle">'
                     f'KV budget, tokens (% of the {ctx}-token context)</text>')
        full = [r for r in rows if r["label"] == "full cache"]
        if full:
            y = fy(full[0]["perplexity"])
            parts.append(f'<line x1="{x0}" x2="{x0 + pw}" y1="{y:.1f}" y2="{y:.1f}" '
                         f'stroke="{colors["full cache"]}" stroke-dasharray="5,4"/>')
        for label, color in colors.items():
            pts = [(fx(r["budget"]), fy(r["perplexity"])) for r in rows
                   if r["label"] == label and r["budget"] in budgets]
            if len(pts) > 1:
                d = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
                parts.append(f'<polyline points="{d}" fill="none" stroke="{color}" stroke-width="2"/>')
            for x, y in pts:
                parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{color}"/>')
    parts.append(f'<text x="{ml - 45}" y="{mt + ph / 2}" transform="rotate(-90 {ml - 45} {mt + ph / 2})" '
                 f'text-anchor="middle">perplexity</text>')
    lx = ml + len(models) * (pw + 30)
    for i, (label, color) in enumerate(colors.items()):
        y = mt + 20 + i * 20
        dash = ' stroke-dasharray="5,4"' if label == "full cache" else ""
        parts.append(f'<line x1="{lx}" x2="{lx + 25}" y1="{y}" y2="{y}" stroke="{color}" stroke-width="2"{dash}/>')
        parts.append(f'<text x="{lx + 30}" y="{y + 4}">{label}</text>')
    parts.append("</svg>")
    Path(path).write_text("\n".join(parts) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ferrolm", default=str(ROOT / "target" / "release" / "ferrolm"))
    ap.add_argument("-m", "--model", action="append", help="GGUF file (default: the two test models)")
    ap.add_argument("--text", default=str(ROOT / "data" / "alice29.txt"))
    ap.add_argument("--ctx", type=int, default=1024, help="window length (context)")
    ap.add_argument("--budgets", default="12.5,25,50", help="budgets in %% of the context")
    ap.add_argument("--windows", type=int, default=12, help="windows per run (each scores ctx/2 tokens)")
    ap.add_argument("-b", "--batch", type=int, default=32, help="tokens per forward pass")
    ap.add_argument("--ratio", type=float, default=0.9, help="eviction target ratio")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--out", default="kv-study", help="output path without extension")
    args = ap.parse_args()
    models = [Path(m) for m in args.model] if args.model else [model_dir() / m for m in MODELS]
    budgets = [int(args.ctx * float(p) / 100) for p in args.budgets.split(",")]
    results = []
    for model in models:
        if not model.exists():
            sys.exit(f"missing model {model} (scripts/fetch-test-models.sh downloads the test models)")
        full = run(args.ferrolm, model, args.text, args, [])
        results.append({"model": model.name, "label": "full cache", "budget": args.ctx, **full})
        log(f"{model.name} full cache: {full['perplexity']:.4f}")
        for b in budgets:
            for label, extra in configs(b):
                r = run(args.ferrolm, model, args.text, args, extra + ["--kv-budget", str(b)])
                results.append({"model": model.name, "label": label, "budget": b, **r})
                log(f"{model.name} {label} budget {b}: {r['perplexity']:.4f}")
    meta = {"ctx": args.ctx, "stride": args.ctx // 2, "windows": args.windows, "batch": args.batch,
            "ratio": args.ratio, "threads": args.threads, "text": Path(args.text).name,
            "commit": subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                     capture_output=True, text=True).stdout.strip()}
    Path(args.out + ".json").write_text(json.dumps({"meta": meta, "results": results}, indent=1) + "\n")
    svg(results, budgets, args.ctx, args.out + ".svg")
    # Markdown table: perplexity per policy and budget.
    print(f"| model | policy | " + " | ".join(f"{b} ({100 * b / args.ctx:g}%)" for b in budgets) + " |")
    print("| --- | --- | " + " | ".join("---:" for _ in budgets) + " |")
    for model in models:
        rows = [r for r in results if r["model"] == model.name]
        full = next(r for r in rows if r["label"] == "full cache")
        print(f"| {model.name} | full cache ({args.ctx}) | " +
              " | ".join(f"{full['perplexity']:.3f}" for _ in budgets) + " |")
        for label, _ in configs(budgets[0]):
            cells = []
            for b in budgets:
                r = next(r for r in rows if r["label"] == label and r["budget"] == b)
                cells.append(f"{r['perplexity']:.3f}")
            print(f"| {model.name} | {label} | " + " | ".join(cells) + " |")
    log(f"wrote {args.out}.json and {args.out}.svg")


if __name__ == "__main__":
    main()
