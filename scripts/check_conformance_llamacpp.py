#!/usr/bin/env python3
"""Cross-check the conformance fixtures' GGUF files against llama.cpp (llama-cpp-python).

For each model in crates/ferrolm/tests/fixtures/conformance/manifest.json this loads
`<name>/model.gguf` with llama-cpp-python on the CPU, evaluates every prompt of
`<name>/expected.json`, and compares llama.cpp's last-position logits and greedy tokens with the
reference that applies to the GGUF (`gguf_reference` when present, else `prompts`).

llama.cpp's CPU backend rounds the activations to bf16 before bf16 dot products, so its logits
differ from the float32 reference by roughly 1e-2; the report gives the max abs difference, the
max abs difference relative to the logits' standard deviation, and the greedy agreement.
It also tokenizes a sample text with the GGUF vocab and with the HF tokenizer.json.

Usage: python3 scripts/check_conformance_llamacpp.py [NAME ...]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "crates" / "ferrolm" / "tests" / "fixtures" / "conformance"
SAMPLE = "The river ran past the mill. Über 42 cafés! 東京"


def check(llm, prompts, ref) -> tuple[list[str], bool]:
    lines, ok = [], True
    for p, r in zip(prompts, ref):
        toks = p["tokens"]
        llm.reset()
        llm.eval(toks)
        last = np.array(llm.scores[len(toks) - 1], dtype=np.float64)
        want = np.array(r["last_logits"], dtype=np.float64)
        d = float(np.abs(last - want).max())
        seq, greedy = list(toks), []
        for _ in range(len(r["greedy"])):
            llm.reset()
            llm.eval(seq)
            greedy.append(int(np.argmax(llm.scores[len(seq) - 1])))
            seq.append(greedy[-1])
        if greedy == r["greedy"]:
            g = "greedy ok"
        else:
            k = next(i for i, (a, b) in enumerate(zip(greedy, r["greedy"])) if a != b)
            m = r["greedy_margins"][k]
            noise = m < 3 * d
            ok &= noise
            g = (f"greedy diverges at step {k} (reference margin {m:.4f} "
                 f"{'< 3*max|dlogit|: bf16 noise' if noise else 'LARGE: real difference'})")
        lines.append(f"len {len(toks):2}: max|dlogit| {d:.4f} ({d / want.std():.4f} std), {g}")
        ok &= d < 0.1 * want.std()
    return lines, ok


def main() -> int:
    from llama_cpp import Llama
    from transformers import AutoTokenizer

    manifest = json.loads((FIX / "manifest.json").read_text())
    names = sys.argv[1:] or [m["name"] for m in manifest["models"]]
    all_ok = True
    for name in names:
        exp = json.loads((FIX / name / "expected.json").read_text())
        gguf = FIX / name / "model.gguf"
        cases = [("gguf_reference" if "gguf_reference" in exp else "prompts", 64,
                  exp.get("gguf_reference", {}).get("prompts") or exp["prompts"])]
        for key, x in exp.get("extra_references", {}).items():
            if "llamacpp_n_ctx" in x:
                cases.append((f"extra_references.{key}", x["llamacpp_n_ctx"], x["prompts"]))
        hf_tok = AutoTokenizer.from_pretrained(FIX / name / "hf")
        for label, n_ctx, ref in cases:
            llm = Llama(model_path=str(gguf), n_ctx=n_ctx, n_batch=64, n_threads=2,
                        logits_all=True, verbose=False, seed=0)
            lines, ok = check(llm, exp["prompts"], ref)
            all_ok &= ok
            a = llm.tokenize(SAMPLE.encode(), add_bos=True, special=False)
            b = hf_tok(SAMPLE).input_ids
            print(f"{name} vs {label} (n_ctx {llm.n_ctx()}): {'OK' if ok else 'FAIL'}; "
                  f"tokenizer {'same' if a == b else 'DIFF'}"
                  + ("" if a == b else f"\n    gguf {a}\n    hf   {b}"))
            for line in lines:
                print("   ", line)
            del llm
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
