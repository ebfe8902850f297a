#!/usr/bin/env python3
"""Greedy text from llama.cpp (through llama-cpp-python) and from ferrolm on the same GGUF.

Used to check that `ferrolm convert` writes files llama.cpp reads and runs like ferrolm does:

    python3 scripts/compare_greedy_llamacpp.py model.gguf "The capital of France is" 32

Needs `pip install llama-cpp-python` (built with the flags in DEVELOPERS.md) and a release build
of ferrolm (`cargo build --release -p ferrolm-cli`). Exits 0 when the texts are the same, or
when they part at a step where llama.cpp's two best logits are within TIE_GAP (a near-tie that
8-bit activations or summation order may legitimately flip); 1 otherwise.
"""
import os
import subprocess
import sys

TIE_GAP = 0.05


def main() -> int:
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    path, prompt = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 32
    from llama_cpp import Llama

    import numpy as np

    llm = Llama(model_path=path, n_ctx=512, n_threads=2, verbose=False, logits_all=True)
    llm.eval(llm.tokenize(prompt.encode(), add_bos=True, special=True))
    out, margins, texts = [], [], []
    eog = {llm.token_eos()} | {t for t in range(llm.n_vocab()) if llm.detokenize([t], special=True) in (b"<|im_end|>", b"<end_of_turn>", b"<|eot_id|>")}
    while len(out) < n:
        lg = np.asarray(llm.scores[llm.n_tokens - 1])
        best = np.argsort(-lg)[:2]
        tok = int(best[0])
        if tok in eog:
            break
        out.append(tok)
        margins.append(float(lg[best[0]] - lg[best[1]]))
        texts.append(llm.detokenize(out).decode("utf-8", errors="replace"))
        llm.eval([tok])
    ref = texts[-1] if texts else ""

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(root, "target"))
    ferrolm = os.path.join(target, "release", "ferrolm")
    res = subprocess.run(
        [ferrolm, "generate", "-m", path, "-p", prompt, "-n", str(n), "--temp", "0", "--no-display-prompt", "-t", "2", "-c", "512"],
        capture_output=True, text=True, check=True,
    )
    ours = res.stdout[:-1] if res.stdout.endswith("\n") else res.stdout  # the CLI ends with a newline
    print(f"llama.cpp: {ref!r}")
    print(f"ferrolm:   {ours!r}")
    if ours == ref:
        print(f"same greedy text ({len(out)} tokens)")
        return 0
    # The first llama.cpp step whose text ferrolm's output does not continue.
    step = next((i for i, t in enumerate(texts) if not ours.startswith(t)), len(texts))
    gap = margins[step] if step < len(margins) else float("inf")
    if gap < TIE_GAP:
        print(f"same greedy text up to step {step}, a near-tie in llama.cpp (top-2 gap {gap:.4f})")
        return 0
    print(f"DIFFERENT from step {step} (llama.cpp top-2 gap {gap:.4f})")
    return 1


if __name__ == "__main__":
    sys.exit(main())
