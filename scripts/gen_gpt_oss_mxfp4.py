#!/usr/bin/env python3
"""Make the MXFP4 variant of the tiny gpt-oss conformance model and record llama.cpp's outputs.

gpt-oss ships its experts as MXFP4 (llama.cpp's `MXFP4_MOE` files: experts MXFP4, every other
matrix Q8_0). This script quantizes crates/ferrolm/tests/fixtures/conformance/gpt-oss/model.gguf
that way with llama.cpp's own quantizer (`llama_model_quantize` through llama-cpp-python, built
from the llama-cpp-python sources the project uses) into `model-mxfp4.gguf`, then runs llama.cpp
on every prompt of the model's `expected.json` and writes what it computed -- the prompt's
last-position logits and 8 greedy tokens -- to `mxfp4-llamacpp.json`. The conformance test
`gpt_oss_mxfp4_experts_match_llama_cpp` runs ferrolm on the same file against these.

There is no float reference for this file: llama.cpp's numbers are the reference (both engines
quantize activations to 8 bits for MXFP4 and Q8_0 products, so they agree closely but not
bit for bit).

Usage: python scripts/gen_gpt_oss_mxfp4.py   (with a python that has llama_cpp and numpy)
"""

from __future__ import annotations

import ctypes
import json
from pathlib import Path

import llama_cpp
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DIR = ROOT / "crates" / "ferrolm" / "tests" / "fixtures" / "conformance" / "gpt-oss"
N_NEW = 8
MXFP4_MOE = 38  # LLAMA_FTYPE_MOSTLY_MXFP4_MOE: experts MXFP4, other matrices Q8_0


def quantize(src: Path, dst: Path) -> None:
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = MXFP4_MOE
    params.nthread = 2
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize failed ({rc})")


def run(llm: llama_cpp.Llama, tokens: list[int]) -> dict:
    llm.reset()
    llm.eval(tokens)
    last = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
    logits, greedy = last, []
    for _ in range(N_NEW):
        t = int(np.argmax(logits))
        greedy.append(t)
        llm.eval([t])
        logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
    top = np.sort(last)[::-1]
    return {
        "tokens": tokens,
        "last_logits": [float(f"{x:.6g}") for x in last],
        "greedy": greedy,
        "top1_margin": float(top[0] - top[1]),
    }


def main() -> None:
    out = DIR / "model-mxfp4.gguf"
    quantize(DIR / "model.gguf", out)
    expected = json.loads((DIR / "expected.json").read_text())
    llm = llama_cpp.Llama(model_path=str(out), n_ctx=128, n_batch=128, n_threads=2,
                          logits_all=True, verbose=False)
    prompts = [run(llm, p["tokens"]) for p in expected["prompts"]]
    for p, e in zip(prompts, expected["prompts"]):
        same = p["greedy"] == e["greedy"]
        print(f"{len(p['tokens'])} tokens: llama.cpp greedy {p['greedy']} "
              f"({'equal to' if same else 'differs from'} the bf16 model's), margin {p['top1_margin']:.3f}")
    record = {
        "description": "llama.cpp's outputs on model-mxfp4.gguf (made from model.gguf by "
                       "llama.cpp's quantizer, ftype MXFP4_MOE); see scripts/gen_gpt_oss_mxfp4.py",
        "llama_cpp_python": llama_cpp.__version__,
        "prompts": prompts,
    }
    (DIR / "mxfp4-llamacpp.json").write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {out.name} ({out.stat().st_size} bytes) and mxfp4-llamacpp.json")


if __name__ == "__main__":
    main()
