#!/usr/bin/env python3
"""Random-weight models of realistic shape, for speed comparisons only.

No small mixture-of-experts or Qwen 3.5 GGUF can be fetched here (PyPI has none), yet the speed
of their paths (routing, one matmul per chosen expert, prefill grouped by expert; the gated
delta net's recurrence; LFM2's short convolutions) should be measured next to llama.cpp on files of the size people run. This script makes such files:
transformers builds the model with its own random initialisation, saves it as bf16
safetensors with a tiny tokenizer (`scripts/gen_conformance.py`'s byte-level BPE or
SentencePiece, padded to the real vocabulary size by llama.cpp's converter), and llama.cpp's
own `convert_hf_to_gguf.py` writes a Q8_0 GGUF. The weights mean nothing: the text they produce
is noise, and only throughput (tokens/s of `ferrolm bench` and `llama-bench` on the same file)
is meaningful. Routing of random weights spreads tokens over the experts about evenly, as a
trained router does over a long prompt; a delta net's cost does not depend on its weights.

Shapes (a scaled-down real model: the same kind of layers, half the width):
- `qwen3moe-1b`: Qwen3-30B-A3B's layout (GQA 16/4, q/k norms, 64 experts of width 256, top 8
  renormalised, untied 151936-token output): 1.2 B parameters, ~0.3 B active per token.
- `qwen35-0.8b`: Qwen3.5-0.8B's shape (24 layers, three gated delta nets of 16 heads of 128 to
  one gated attention layer, tied 248320-token embeddings).
- `lfm2-350m`: LFM2-350M's shape, full size (16 layers: 10 short convolutions, 6 attention
  layers with GQA 16/8; feed-forward 4608, tied 65536-token embeddings).

Gemma 4's converter takes the vocabulary from the tokenizer as it is (it does not pad), and no
tokenizer of its 262144 tokens can be made here, so there is no Gemma 4 shape.

Usage: python3 scripts/make_bench_models.py [--llamacpp DIR] [--out DIR] [NAME ...]
Writes OUT/NAME.gguf (default OUT: ~/.cache/ferrolm/bench-models); needs the torch +
transformers venv of `scripts/gen_conformance.py` and llama.cpp's sources (--llamacpp, default
the tree `scripts/build_llama_server.py` unpacks under ~/.cache/ferrolm/llama.cpp).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen_conformance as gc  # noqa: E402  (tokenizers, converter wrapper)

LLAMACPP = Path.home() / ".cache/ferrolm/llama.cpp/llama_cpp_python-0.3.36/vendor/llama.cpp"

SHAPES = {
    "qwen3moe-1b": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", "bpe-qwen2", dict(
        hidden_size=1024, num_hidden_layers=16, num_attention_heads=16, num_key_value_heads=4,
        head_dim=64, intermediate_size=3072, num_experts=64, num_experts_per_tok=8,
        moe_intermediate_size=256, norm_topk_prob=True, decoder_sparse_step=1,
        mlp_only_layers=[], vocab_size=151936, tie_word_embeddings=False,
        max_position_embeddings=8192, rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    "qwen35-0.8b": ("Qwen3_5TextConfig", "Qwen3_5ForCausalLM", "bpe-qwen2", dict(
        hidden_size=1024, num_hidden_layers=24, num_attention_heads=8, num_key_value_heads=2,
        head_dim=256, intermediate_size=3584, linear_conv_kernel_dim=4, linear_key_head_dim=128,
        linear_value_head_dim=128, linear_num_key_heads=16, linear_num_value_heads=16,
        layer_types=(["linear_attention"] * 3 + ["full_attention"]) * 6, vocab_size=248320,
        tie_word_embeddings=True, max_position_embeddings=8192, rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 10000000.0,
                         "partial_rotary_factor": 0.25, "mrope_section": [11, 11, 10],
                         "mrope_interleaved": True})),
    "lfm2-350m": ("Lfm2Config", "Lfm2ForCausalLM", "bpe-qwen2", dict(
        hidden_size=1024, num_hidden_layers=16, num_attention_heads=16, num_key_value_heads=8,
        intermediate_size=6656, block_auto_adjust_ff_dim=True, block_ffn_dim_multiplier=1.0,
        block_multiple_of=256, conv_L_cache=3, conv_bias=False,
        layer_types=["conv" if i not in (2, 5, 8, 10, 12, 14) else "full_attention"
                     for i in range(16)],
        vocab_size=65536, tie_word_embeddings=True, max_position_embeddings=8192,
        norm_eps=1e-5, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
}
# convert_hf_to_gguf.py arguments a shape needs (no multi-token-prediction layers)
CONVERT_ARGS = {"qwen35-0.8b": ["--no-mtp"]}


def make(name: str, llamacpp: Path, out_dir: Path, work: Path) -> Path:
    import torch
    import transformers

    config_cls, model_cls, tok_kind, cfg = SHAPES[name]
    tok = gc.get_tok(tok_kind, work)
    config = getattr(transformers, config_cls)(
        **cfg, bos_token_id=tok.bos, eos_token_id=tok.eos, pad_token_id=tok.pad)
    config.architectures = [model_cls]
    torch.manual_seed(0)
    t0 = time.time()
    model = getattr(transformers, model_cls)(config).to(torch.bfloat16)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{name}: {n_params / 1e9:.2f} B parameters, built in {time.time() - t0:.0f} s")
    hf = work / name
    model.save_pretrained(hf, safe_serialization=True)
    del model
    for f in tok.dir.iterdir():
        shutil.copy(f, hf / f.name)
    out = out_dir / f"{name}.gguf"
    t0 = time.time()
    gc.convert(llamacpp, hf, out, name, tok.bpe_pre, work / f"{name}-convert.log",
               outtype="q8_0", model_name=f"ferrolm-bench-{name} (random weights)",
               extra_args=CONVERT_ARGS.get(name))
    print(f"{name}: {out} ({out.stat().st_size / 2**20:.0f} MiB), converted in "
          f"{time.time() - t0:.0f} s")
    shutil.rmtree(hf)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llamacpp", type=Path, default=LLAMACPP,
                    help="llama.cpp source tree (convert_hf_to_gguf.py and gguf-py/)")
    ap.add_argument("--out", type=Path, default=Path.home() / ".cache/ferrolm/bench-models")
    ap.add_argument("names", nargs="*", default=list(SHAPES), help=f"of {list(SHAPES)}")
    args = ap.parse_args()
    unknown = [n for n in args.names if n not in SHAPES]
    if unknown:
        sys.exit(f"unknown model(s) {unknown}; known: {list(SHAPES)}")
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="ferrolm-bench-models-"))
    try:
        for name in args.names:
            make(name, args.llamacpp.resolve(), args.out, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
