#!/usr/bin/env python3
"""Make an HF-format SmolLM2-135M-Instruct folder from its GGUF, with a transformers reference.

Usage: python3 scripts/make_hf_smollm2.py OUT_DIR GGUF_PATH

1. Loads GGUF_PATH (e.g. SmolLM2-135M-Instruct.Q4_1.gguf) with transformers
   (`AutoModelForCausalLM.from_pretrained(dir, gguf_file=..., quantization_config=
   GgufConfig(dequantize=True))` and `AutoTokenizer.from_pretrained(dir, gguf_file=...)`).
   transformers 5 otherwise keeps the model behind a GGUF quantizer whose `save_pretrained`
   refuses ("quantized with gguf and is not serializable"); loading a GGUF also needs
   `accelerate`.
2. Saves it to OUT_DIR with `save_pretrained`: bfloat16 safetensors (the dequantized Q4_1 values
   rounded to bf16, to halve the size) plus the tokenizer files.
3. Reloads OUT_DIR in float32 with eager attention and records greedy decoding
   (`generate(do_sample=False, max_new_tokens=32)`, which stops early at EOS; and also the
   32 tokens generated with EOS stopping disabled, `generated_ids_no_eos_stop`) of the prompt
   "The capital of France is", tokenized by the saved tokenizer with its default special-token
   handling, into OUT_DIR/ferrolm_expected.json: prompt ids, generated ids, the decoded text, the
   top-1/top-2 logit margin of every step, the last-prompt-position logits' argmax, versions and
   the source GGUF's sha256.

The reference is what transformers computes from the bf16 HF folder; it is not the GGUF's
exact values (Q4_1 dequantized values are not all representable in bf16).

Idempotent: does nothing if OUT_DIR/ferrolm_expected.json exists, is complete and the model
files are there.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path

PROMPT = "The capital of France is"
N_NEW = 32
FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")


def complete(out: Path) -> bool:
    p = out / "ferrolm_expected.json"
    if not p.is_file() or not all((out / f).is_file() for f in FILES):
        return False
    try:
        e = json.loads(p.read_text())
    except json.JSONDecodeError:
        return False
    g = e.get("generated_ids")
    return (isinstance(e.get("prompt_ids"), list) and isinstance(g, list)
            and (len(g) == N_NEW or (e.get("stopped_at_eos") and 0 < len(g) <= N_NEW))
            and len(e.get("generated_ids_no_eos_stop") or []) == N_NEW)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    out = Path(sys.argv[1]).resolve()
    gguf_path = Path(sys.argv[2]).resolve()
    if complete(out):
        print(f"{out / 'ferrolm_expected.json'} is complete; nothing to do")
        return 0

    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig, GgufConfig

    torch.manual_seed(0)
    t0 = time.time()
    tok = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    # transformers 5 keeps GGUF weights packed behind a (non-serializable) GGUF quantizer unless
    # asked to dequantize everything; dequantize=True gives a plain dense model that can be saved.
    model = AutoModelForCausalLM.from_pretrained(
        gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32,
        quantization_config=GgufConfig(dequantize=True))
    assert getattr(model, "hf_quantizer", None) is None, "GGUF weights were not dequantized"
    assert all(type(m) is torch.nn.Linear for m in model.modules() if "Linear" in type(m).__name__)
    t_load = time.time() - t0
    out.mkdir(parents=True, exist_ok=True)
    model.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    del model
    t_save = time.time() - t0 - t_load

    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(
        out, dtype=torch.float32, attn_implementation="eager").eval()
    ids = tok(PROMPT, return_tensors="pt").input_ids
    eos = model.generation_config.eos_token_id
    if eos is None:
        eos = model.config.eos_token_id
    gc = GenerationConfig(do_sample=False, max_new_tokens=N_NEW, eos_token_id=eos,
                          pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else eos)
    with torch.no_grad():
        last = model(ids).logits[0, -1]
        res = model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=gc,
                             output_logits=True, return_dict_in_generate=True)
        # eos_token_id=None alone means "the model's default" to generate(), so clear that too
        model.generation_config.eos_token_id = None
        gc_all = GenerationConfig(do_sample=False, max_new_tokens=N_NEW, min_new_tokens=0,
                                  eos_token_id=None, pad_token_id=gc.pad_token_id)
        res_all = model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=gc_all,
                                 output_logits=True, return_dict_in_generate=True)

    def margins_of(r):
        out = []
        for step in r.logits:
            top = torch.topk(step[0].float(), 2).values
            out.append(round(float(top[0] - top[1]), 5))
        return out

    new = res.sequences[0, ids.shape[1]:].tolist()
    new_all = res_all.sequences[0, ids.shape[1]:].tolist()
    margins, margins_all = margins_of(res), margins_of(res_all)
    assert new_all[:len(new)] == new
    eos_ids = set(eos if isinstance(eos, list) else [eos])
    t_gen = time.time() - t0 - t_load - t_save

    expected = {
        "prompt": PROMPT,
        "prompt_ids": ids[0].tolist(),
        "generated_ids": new,
        "generated_text": tok.decode(new),
        "stopped_at_eos": len(new) < N_NEW and new[-1] in eos_ids,
        "max_new_tokens": N_NEW,
        "greedy_margins": margins,
        "generated_ids_no_eos_stop": new_all,
        "greedy_margins_no_eos_stop": margins_all,
        "last_prompt_logits_argmax": int(last.argmax()),
        "method": "transformers generate(do_sample=False) in float32, eager attention, from the "
                  "bf16 safetensors in this folder; tokens from the saved tokenizer with default "
                  "special-token handling",
        "source_gguf": gguf_path.name,
        "source_gguf_sha256": sha256(gguf_path),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
    }
    (out / "ferrolm_expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    size = sum(f.stat().st_size for f in out.iterdir() if f.is_file())
    print(json.dumps({k: expected[k] for k in ("prompt_ids", "generated_ids", "generated_text",
                                               "stopped_at_eos")}, ensure_ascii=False))
    print(f"min greedy margin {min(margins):.4f} (no EOS stop: {min(margins_all):.4f}); "
          f"no-EOS-stop ids {new_all}")
    print(f"load+dequantize {t_load:.1f}s, save {t_save:.1f}s, reload+generate {t_gen:.1f}s; "
          f"{out}: {size / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
