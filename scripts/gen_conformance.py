#!/usr/bin/env python3
"""Generate ferrolm's conformance fixtures: tiny random models whose expected outputs come from
the reference implementation itself (transformers on PyTorch, CPU, float32, eager attention).

For each model in MODELS this script

1. builds a tiny tokenizer (a SentencePiece BPE model for the Llama/Mistral/Phi-3/Gemma style
   models, a byte-level BPE `tokenizers` model for the Llama-3/Qwen style ones) whose size is the
   model's vocabulary size;
2. creates the model with a fixed seed, re-initialises every weight with a wide spread (so that
   logits are spread out and greedy decoding is robust) and norm weights randomly around their
   identity value, and saves it as an HF folder with bfloat16 safetensors;
3. loads that folder back in float32 with eager attention, so that the reference is computed from
   exactly the stored bf16 values, and records for each prompt the last-position logits and 8
   greedy tokens (`generate(do_sample=False)`), checking that every greedy step has a top-1/top-2
   logit margin of at least MIN_MARGIN (a prompt that fails is replaced by another one); for
   mixture-of-experts models (experts run with `experts_implementation="eager"`, the plain
   per-expert loop) it also checks the routing: forward hooks on the router modules (`mlp.gate`,
   Granite MoE's `block_sparse_moe.router`: transformers' `*TopKRouter`) capture the router
   logits of the uncached forward over the whole sequence (prompt + greedy tokens, i.e. every
   position the model is ever fed), and for every
   position and MoE layer the gap between the k-th and (k+1)-th largest router probability
   (k = num_experts_per_tok), divided by the largest probability, must be at least
   MIN_ROUTER_GAP, and the gap between the k-th and (k+1)-th largest router logit at least
   MIN_ROUTER_LOGIT_GAP -- otherwise an implementation with other rounding could pick a
   different expert set; such prompts are replaced too. The logit-gap bound is the binding one,
   sized for engines with bf16 activations: llama.cpp's CPU backend (activations rounded to bf16
   before bf16 matmuls, K/V cached in f16) chose another expert at a logit gap of 0.008 (relative
   probability gap 1.8e-3), and a float64 simulation of that rounding moves these models' router
   logits by up to ~0.1; an engine with f32 activations is ~1e-5 from the reference;
4. converts the folder to GGUF with llama.cpp's own `convert_hf_to_gguf.py --outtype bf16`, run
   with llama.cpp's own `gguf-py` first on the path;
5. where llama.cpp reads the GGUF with different semantics than transformers reads config.json
   (a window the converter does not write, an attention scale the GGUF cannot express), it also
   records a second reference, `gguf_reference`, computed by transformers from the same weights
   with the config overridden to what the GGUF means to llama.cpp.

Output: crates/ferrolm/tests/fixtures/conformance/<name>/{hf/,model.gguf,expected.json}, plus
manifest.json and README.md there, and a human-readable summary of every config.json and every
GGUF's metadata/tensors in /tmp/conformance-summary.txt.

Usage: python3 scripts/gen_conformance.py [--llamacpp /tmp/llamacpp/src] [--only NAME ...]

Compatibility workarounds (all inside this script, nothing is patched on disk):
- The converter recognises BPE pre-tokenizers by hashing the token ids of a fixed text
  (`TextModel.get_vocab_base_pre`); our tiny byte-level BPE vocabularies have unknown hashes, so
  the converter is run through a small wrapper that, only when the original function raises
  NotImplementedError ("BPE pre-tokenizer was not recognized"), returns the name of the llama.cpp
  pre-tokenizer with the same regex ("llama-bpe" for the Llama 3 split regex, "qwen2" for the
  Qwen2 one).
- transformers 5.24's Gemma4TextConfig.to_dict() drops `global_head_dim` (and writes an empty
  `per_layer_config`), and the converter reads its hparams through AutoConfig(...).to_dict(): the
  wrapper puts back the config.json keys that dict lacks or has empty (specs can add such keys
  to config.json with `hf_config_extra`).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "crates" / "ferrolm" / "tests" / "fixtures" / "conformance"
SUMMARY = Path("/tmp/conformance-summary.txt")

MIN_MARGIN = 1e-2  # minimal top-1/top-2 logit gap at every greedy step
MIN_ROUTER_GAP = 1e-3  # MoE: minimal (p_k - p_{k+1}) / p_1 of the router probabilities
MIN_ROUTER_LOGIT_GAP = 0.1  # MoE: minimal l_k - l_{k+1} of the router logits (see docstring)
MAX_DRAWS = 400  # random prompts tried per prompt length (MoE models need many more than 50)
N_NEW = 8  # greedy tokens per prompt
PROMPT_LENS = (5, 12, 20)
SIG_DIGITS = 7

# ---------------------------------------------------------------------------------------------
# Tokenizers
# ---------------------------------------------------------------------------------------------

CORPUS = """The river ran quietly past the old mill, where the wheel had not turned for forty years.
Children from the village came in summer to fish from the stone bridge, and in winter the water froze
so thick that the baker's cart could cross it. Nobody remembered who had built the mill, only that it
had once ground flour for three valleys and that the miller's family had moved to the city long ago.
A small engine reads numbers, multiplies matrices and writes the next word: 1, 2, 3, 42, 3.14159, 2048.
Tokens are pieces of text; a tokenizer splits "Hello, world!" into pieces, and a model predicts the next one.
In the morning the market opened early. Farmers brought apples, pears, cabbages and eggs; the fishmonger
shouted prices, and a dog slept under the fountain. By noon the square was full of people talking about
the weather, the harvest, the price of bread, and the new road that would connect the town to the coast.
Quick brown foxes jump over lazy dogs. Pack my box with five dozen liquor jugs! How vexingly quick daft zebras jump.
def main():
    print("hello")
    return 0
Über den Wolken muss die Freiheit wohl grenzenlos sein. Café, naïve, résumé. 東京 and 北京 are cities.
"""

LLAMA3_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def corpus_lines() -> list[str]:
    return [l for l in CORPUS.split("\n") if l.strip()] * 20


@dataclass
class Tok:
    """A tokenizer saved in `dir` (tokenizer.json, tokenizer_config.json, maybe tokenizer.model)."""

    kind: str
    dir: Path
    vocab_size: int
    bos: int | None
    eos: int
    pad: int | None
    add_bos: bool
    bpe_pre: str | None  # llama.cpp pre-tokenizer name to report for an unknown BPE hash
    normal: tuple[int, int]  # [lo, hi) ids of ordinary tokens, for random prompts
    special_ids: list[int]


def _clean_tokenizer_config(d: Path, extra: dict[str, Any]) -> None:
    p = d / "tokenizer_config.json"
    cfg = json.loads(p.read_text())
    for k in ("vocab_file", "is_local", "local_files_only", "name_or_path"):
        cfg.pop(k, None)
    cfg.update(extra)
    p.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")


def build_spm(kind: str, work: Path) -> Tok:
    """SentencePiece BPE with byte fallback, vocab 512, trained on CORPUS.

    kind "spm-llama": Llama 2 layout (<unk>=0, <s>=1, </s>=2, dummy prefix, adds BOS);
    kind "spm-phi3": as spm-llama with 508 pieces plus Phi-3's added special tokens
    <|endoftext|>=508 (the EOS), <|assistant|>, <|end|>, <|user|> (llama.cpp requires
    <|endoftext|> in any vocab whose general.name contains "phi3");
    kind "spm-gemma": Gemma layout (<pad>=0, <eos>=1, <bos>=2, <unk>=3, <mask>=4, no dummy
    prefix, adds BOS)."""
    import sentencepiece as spm
    from tokenizers import AddedToken
    from transformers import AutoTokenizer, GemmaTokenizer, LlamaTokenizer

    d = work / kind
    d.mkdir(parents=True, exist_ok=True)
    common = dict(
        vocab_size=512, model_type="bpe", byte_fallback=True, character_coverage=1.0,
        split_digits=True, remove_extra_whitespaces=False, normalization_rule_name="identity",
        minloglevel=2, num_threads=1, seed_sentencepiece_size=100000,
    )
    phi3_added = ["<|endoftext|>", "<|assistant|>", "<|end|>", "<|user|>"]
    if kind in ("spm-llama", "spm-phi3"):
        n_sp = 512 if kind == "spm-llama" else 512 - len(phi3_added)
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(corpus_lines()), model_writer=(w := io.BytesIO()),
            add_dummy_prefix=True, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
            **dict(common, vocab_size=n_sp))
        (d / "tokenizer.model").write_bytes(w.getvalue())
        tok = LlamaTokenizer.from_pretrained(d, add_bos_token=True, add_eos_token=False)
        bos, eos, pad, lo = 1, 2, None, [0, 1, 2]
        specials = list(lo)
        if kind == "spm-phi3":
            tok.add_tokens([AddedToken(t, special=True, normalized=False) for t in phi3_added],
                           special_tokens=True)
            eos = pad = n_sp
            specials += list(range(n_sp, 512))
            tok.eos_token = "<|endoftext|>"
            tok.pad_token = "<|endoftext|>"
        tok.save_pretrained(d)
        _clean_tokenizer_config(d, {"add_bos_token": True, "add_eos_token": False})
    elif kind == "spm-gemma":
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(corpus_lines()), model_writer=(w := io.BytesIO()),
            add_dummy_prefix=False, pad_id=0, eos_id=1, bos_id=2, unk_id=3, pad_piece="<pad>",
            eos_piece="<eos>", bos_piece="<bos>", unk_piece="<unk>",
            user_defined_symbols=["<mask>"],
            **common)
        (d / "tokenizer.model").write_bytes(w.getvalue())
        tok = GemmaTokenizer.from_pretrained(d, add_bos_token=True, add_eos_token=False)
        tok.save_pretrained(d)
        _clean_tokenizer_config(d, {"add_bos_token": True, "add_eos_token": False})
        bos, eos, pad, lo, n_sp = 2, 1, 0, [0, 1, 2, 3, 4], 512
        specials = list(lo)
    else:
        raise ValueError(kind)
    t = AutoTokenizer.from_pretrained(d)
    assert len(t) == 512, len(t)
    ids = t("Hello world").input_ids
    assert ids[0] == bos, ids
    return Tok(kind, d, 512, bos, eos, pad, True, None, (max(lo) + 1, n_sp), specials)


def build_bpe(kind: str, work: Path) -> Tok:
    """Byte-level BPE (GPT-2 byte alphabet) trained on CORPUS, vocab 384 with the special tokens
    at the end.

    kind "bpe-llama3": Llama 3 split regex, ignore_merges, <|begin_of_text|> added as BOS;
    kind "bpe-qwen2": Qwen2 split regex, no BOS."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    d = work / kind
    d.mkdir(parents=True, exist_ok=True)
    n = 384
    if kind == "bpe-llama3":
        specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]
        regex, pre = LLAMA3_REGEX, "llama-bpe"
    elif kind == "bpe-qwen2":
        specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        regex, pre = QWEN2_REGEX, "qwen2"
    else:
        raise ValueError(kind)
    tk = Tokenizer(models.BPE(ignore_merges=(kind == "bpe-llama3")))
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    trainer = trainers.BpeTrainer(
        vocab_size=n - len(specials), initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False, min_frequency=1)
    tk.train_from_iterator(corpus_lines(), trainer)
    assert tk.get_vocab_size() == n - len(specials), tk.get_vocab_size()
    tk.add_special_tokens(specials)
    ids = {s: tk.token_to_id(s) for s in specials}
    tk.decoder = decoders.ByteLevel()
    if kind == "bpe-llama3":
        bos_s, eos_s = "<|begin_of_text|>", "<|end_of_text|>"
        tk.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(
                single=f"{bos_s}:0 $A:0", pair=f"{bos_s}:0 $A:0 {bos_s}:1 $B:1",
                special_tokens=[(bos_s, ids[bos_s])]),
        ])
        ft = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token=bos_s, eos_token=eos_s)
        bos, eos, pad, add_bos = ids[bos_s], ids[eos_s], None, True
        extra = {"add_bos_token": True, "add_eos_token": False}
    else:
        tk.post_processor = processors.ByteLevel(trim_offsets=False)
        eos_s = "<|endoftext|>"
        ft = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token=eos_s, pad_token=eos_s)
        bos, eos, pad, add_bos = None, ids[eos_s], ids[eos_s], False
        extra = {"add_bos_token": False, "add_eos_token": False}
    ft.save_pretrained(d)
    _clean_tokenizer_config(d, {**extra, "tokenizer_class": "PreTrainedTokenizerFast"})
    t = AutoTokenizer.from_pretrained(d)
    assert len(t) == n, len(t)
    enc = t("Hello world").input_ids
    assert (enc[0] == bos) == add_bos, enc
    return Tok(kind, d, n, bos, eos, pad, add_bos, pre, (0, n - len(specials)),
               sorted(ids.values()))


_TOK_CACHE: dict[str, Tok] = {}


def get_tok(kind: str, work: Path) -> Tok:
    if kind not in _TOK_CACHE:
        _TOK_CACHE[kind] = (build_spm if kind.startswith("spm") else build_bpe)(kind, work)
    return _TOK_CACHE[kind]


# ---------------------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------------------


@dataclass
class Spec:
    name: str
    config_cls: str  # transformers config class
    model_cls: str  # transformers model class
    tok: str
    cfg: dict[str, Any]
    seed: int
    notes: list[str] = field(default_factory=list)
    # config overrides that give what llama.cpp makes of the converted GGUF, when it differs
    gguf_overrides: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    gguf_reason: str | None = None
    # further references: (key, reason, overrides) -> expected["extra_references"][key]
    extra_refs: list[tuple[str, str, Callable[[dict[str, Any]], dict[str, Any]]]] = field(
        default_factory=list)
    emb_std: float = 0.5  # std of embed_tokens / lm_head
    avoid_tokens: list[int] = field(default_factory=list)  # kept out of prompts and greedy output
    final_norm_gain: float = 1.0  # mean effective multiplier of the final norm
    # keys set in (None: removed from) the saved config.json where transformers does not write
    # back what it was given (Gemma 4's global_head_dim, which the converter needs, and the empty
    # per_layer_config that would make a reload ignore it)
    hf_config_extra: dict[str, Any] = field(default_factory=dict)
    # extra arguments of convert_hf_to_gguf.py (Qwen 3.5 without multi-token-prediction layers
    # needs --no-mtp)
    convert_args: list[str] = field(default_factory=list)


BASE = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, rms_norm_eps=1e-5,
            max_position_embeddings=256, initializer_range=0.02)


def rnd_factors(seed: int, n: int, lo: float, hi: float) -> list[float]:
    g = np.random.default_rng(seed)
    return [round(float(x), 3) for x in g.uniform(lo, hi, n)]


# Granite's four scalar multipliers (defaults 1.0); non-trivial and distinct from what a plain
# Llama would do (attention 0.0625 = 1/head_dim, not 1/sqrt(head_dim) = 0.25)
GRANITE_MULT = dict(embedding_multiplier=6.0, attention_multiplier=0.0625,
                    residual_multiplier=0.22, logits_scaling=4.0)

MODELS: list[Spec] = [
    Spec("llama", "LlamaConfig", "LlamaForCausalLM", "spm-llama",
         dict(BASE, num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False,
              rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
         seed=101,
         notes=["Llama 2 style: GQA 4 query heads / 2 kv heads, head_dim 16, separate lm_head "
                "(untied), SentencePiece vocab with byte fallback."]),
    Spec("llama3-rope", "LlamaConfig", "LlamaForCausalLM", "bpe-llama3",
         dict(BASE, num_attention_heads=2, num_key_value_heads=1, head_dim=32,
              tie_word_embeddings=True,
              rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                               "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                               "original_max_position_embeddings": 64}),
         seed=202,
         emb_std=0.15, final_norm_gain=3.0,
         notes=["Llama 3.1 RoPE scaling: head_dim 32, theta 5e5, original context 64 -> frequency "
                "pairs 0-1 unscaled (wavelength < 16), pair 2 smoothly interpolated, pairs 3-15 "
                "divided by factor 8. GGUF carries this as the `rope_freqs.weight` tensor "
                "(per-pair divisors), not as rope-scaling keys.",
                "MQA-like GQA: 2 query heads / 1 kv head; tied embeddings (no output.weight in the "
                "GGUF); byte-level BPE with the Llama 3 regex (tokenizer.ggml.pre = llama-bpe)."]),
    Spec("llama-linear", "LlamaConfig", "LlamaForCausalLM", "spm-llama",
         dict(BASE, num_attention_heads=4, num_key_value_heads=4, tie_word_embeddings=True,
              rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}),
         seed=303,
         emb_std=0.15, final_norm_gain=3.0,
         notes=["Linear RoPE scaling (positions divided by 2); MHA 4/4 heads, head_dim 16; "
                "tied embeddings with a SentencePiece vocab."]),
    Spec("llama-yarn", "LlamaConfig", "LlamaForCausalLM", "spm-llama",
         dict(BASE, num_attention_heads=2, num_key_value_heads=2, head_dim=32,
              tie_word_embeddings=False,
              rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                               "original_max_position_embeddings": 64}),
         seed=404,
         notes=["YaRN RoPE scaling, factor 4, original context 64, default beta_fast 32 / "
                "beta_slow 1 (correction range: pairs 0..5 of 16 ramped), transformers' default "
                "attention factor 0.1*ln(4)+1 applied to cos/sin (so to both q and k). MHA 2/2 "
                "heads, head_dim 32."]),
    Spec("mistral", "MistralConfig", "MistralForCausalLM", "spm-llama",
         dict(BASE, num_attention_heads=8, num_key_value_heads=2, head_dim=8, sliding_window=8,
              tie_word_embeddings=False,
              rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
         seed=505,
         notes=["Sliding-window attention, window 8 (transformers: query i sees keys j with "
                "i - 8 < j <= i, i.e. the last 8 positions including itself). GQA 8 query heads "
                "/ 2 kv heads, head_dim 8."],
         gguf_overrides=lambda c: {"sliding_window": None},
         gguf_reason="convert_hf_to_gguf.py does not write a sliding window for "
                     "MistralForCausalLM (it is converted as arch `llama`), so llama.cpp "
                     "attends to the full context when running the GGUF."),
    Spec("qwen2", "Qwen2Config", "Qwen2ForCausalLM", "bpe-qwen2",
         dict(BASE, num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
              rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
         seed=606,
         emb_std=0.15, final_norm_gain=3.0,
         notes=["q/k/v projections with (random, nonzero) biases; o_proj without; tied "
                "embeddings; GQA 4/2, head_dim 16; byte-level BPE with the Qwen2 regex "
                "(tokenizer.ggml.pre = qwen2), no BOS."]),
    Spec("qwen3", "Qwen3Config", "Qwen3ForCausalLM", "bpe-qwen2",
         dict(BASE, num_attention_heads=4, num_key_value_heads=1, head_dim=32,
              tie_word_embeddings=True,
              rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
         seed=707,
         emb_std=0.15, final_norm_gain=3.0,
         notes=["Per-head RMSNorm on q and k (q_norm/k_norm, over head_dim) before RoPE; MQA "
                "4 query heads / 1 kv head; head_dim 32 != hidden/heads (16), so q is 128 wide "
                "and o_proj maps 128 -> 64; tied embeddings."]),
    Spec("phi3", "Phi3Config", "Phi3ForCausalLM", "spm-phi3",
         dict(BASE, num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=False,
              max_position_embeddings=4096, original_max_position_embeddings=1024,
              rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                               "partial_rotary_factor": 0.75,
                               "original_max_position_embeddings": 1024,
                               "short_factor": rnd_factors(1, 12, 1.0, 3.0),
                               "long_factor": rnd_factors(2, 12, 1.0, 20.0)}),
         seed=808,
         extra_refs=[("long_factors",
                      "LongRoPE with long_factor: transformers once the sequence is longer than "
                      "original_max_position_embeddings, llama.cpp whenever n_ctx > "
                      "rope.scaling.original_context_length (llamacpp_n_ctx gives one)",
                      lambda c: {"rope_parameters": dict(
                          c["rope_parameters"], short_factor=c["rope_parameters"]["long_factor"])})],
         notes=["Fused qkv_proj and gate_up_proj (kept fused in GGUF: blk.N.attn_qkv.weight, "
                "blk.N.ffn_up.weight of 2*intermediate rows = [gate; up]). MHA 2/2 heads, head_dim "
                "32, partial rotary factor 0.75 -> 24 rotary dims (NeoX/half-split rotation of "
                "the first 24 dims, last 8 pass through).",
                "LongRoPE: max_position_embeddings 4096, original 1024. transformers uses "
                "short_factor while the sequence length is <= 1024 (all fixture sequences are "
                "<= 27 tokens) and long_factor beyond; llama.cpp picks rope_factors_long when its "
                "context size n_ctx (at least 256 there) is > 1024 instead, whatever the sequence "
                "length. `prompts` use the short factors; extra_references.long_factors has the "
                "same prompts with the long factors (what llama.cpp computes with n_ctx > 1024). "
                "Attention factor sqrt(1 + ln(4096/1024)/ln(1024)) multiplies cos and sin in "
                "both cases (GGUF key phi3.rope.scaling.attn_factor).",
                "Tokenizer: SentencePiece (508 pieces) plus added special tokens "
                "<|endoftext|> (508, EOS and PAD), <|assistant|>, <|end|>, <|user|>, as in Phi-3; "
                "the converter's Phi-3 vocab code marks HF-special added tokens (also <unk>, <s>, "
                "</s>) as CONTROL."]),
    Spec("gemma", "GemmaConfig", "GemmaForCausalLM", "spm-gemma",
         dict(BASE, num_attention_heads=4, num_key_value_heads=1, head_dim=32,
              tie_word_embeddings=True, hidden_activation="gelu_pytorch_tanh",
              rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, pad_token_id=0),
         seed=909,
         avoid_tokens=[107],
         emb_std=0.03, final_norm_gain=6.0,
         notes=["Gemma 1: GeGLU (gelu tanh approximation), embeddings scaled by sqrt(64)=8 (in "
                "the activation dtype), RMSNorm computes x*(1+w) in HF (the safetensors store w, "
                "the GGUF stores 1+w in f32); MQA 4/1 heads, head_dim 32 (q width 128 != 64); "
                "tied embeddings.",
                "The converter's Gemma 1 vocab code hard-codes CodeGemma's special ids: it writes "
                "tokenizer.ggml.eot_token_id = 107 (an ordinary piece here, which llama.cpp will "
                "treat as end-of-generation); prompts and greedy outputs avoid token 107."]),
    Spec("gemma2", "Gemma2Config", "Gemma2ForCausalLM", "spm-gemma",
         dict(BASE, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
              tie_word_embeddings=True, hidden_activation="gelu_pytorch_tanh",
              attn_logit_softcapping=5.0, final_logit_softcapping=8.0, sliding_window=8,
              query_pre_attn_scalar=24, rms_norm_eps=1e-6,
              rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, pad_token_id=0),
         seed=1010,
         emb_std=0.03, final_norm_gain=10.0,
         notes=["Gemma 2: attention-logit softcap 5 (tanh(s/5)*5 before the mask), final-logit "
                "softcap 8, sliding window 8 on even layers (layer_types: layer 0 sliding, layer "
                "1 full), query_pre_attn_scalar 24 (scores scaled by 24^-0.5, not "
                "head_dim^-0.5), pre/post attention and pre/post feed-forward norms, GQA 4/2, "
                "head_dim 32."],
         gguf_overrides=lambda c: {"query_pre_attn_scalar": c["head_dim"]},
         gguf_reason="the GGUF has no key for query_pre_attn_scalar; llama.cpp's gemma2 uses "
                     "1/sqrt(head_dim) (1/sqrt(n_embd/n_head) only for the 46-layer 27B)."),
    Spec("gemma3", "Gemma3TextConfig", "Gemma3ForCausalLM", "spm-gemma",
         dict(BASE, num_hidden_layers=6, intermediate_size=64, num_attention_heads=4,
              num_key_value_heads=1, head_dim=16, tie_word_embeddings=True,
              hidden_activation="gelu_pytorch_tanh", sliding_window=8,
              query_pre_attn_scalar=24, rms_norm_eps=1e-6,
              rope_parameters={
                  "full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                  "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
              pad_token_id=0),
         seed=1111,
         emb_std=0.03, final_norm_gain=6.0,
         notes=["Gemma 3 text-only (model_type gemma3_text): 6 layers so that the default "
                "pattern applies (layers 0-4 sliding with window 8 and RoPE base 1e4, layer 5 "
                "global with RoPE base 1e6) -- llama.cpp hard-codes that 5:1 pattern since the "
                "converter writes no gemma3.attention.sliding_window_pattern; q_norm/k_norm "
                "(Gemma (1+w) RMSNorm over head_dim), pre/post norms, query_pre_attn_scalar 24, "
                "MQA 4/1, head_dim 16, intermediate 64 (kept small: 6 layers), tied embeddings, "
                "embeddings scaled by sqrt(64)."],
         gguf_overrides=lambda c: {"query_pre_attn_scalar": c["head_dim"]},
         gguf_reason="the GGUF has no key for query_pre_attn_scalar; llama.cpp's gemma3 uses "
                     "1/sqrt(head_dim) (1/sqrt(n_embd/n_head) only for the 62-layer 27B)."),
    Spec("gemma4", "Gemma4TextConfig", "Gemma4ForCausalLM", "spm-gemma",
         dict(BASE, num_hidden_layers=5, intermediate_size=64, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, global_head_dim=32, tie_word_embeddings=True,
              hidden_activation="gelu_pytorch_tanh", sliding_window=8, rms_norm_eps=1e-6,
              layer_types=["sliding_attention", "sliding_attention", "full_attention",
                           "sliding_attention", "full_attention"],
              num_kv_shared_layers=2, hidden_size_per_layer_input=8,
              use_double_wide_mlp=True, attention_k_eq_v=True, num_global_key_value_heads=1,
              vocab_size_per_layer_input=512, final_logit_softcapping=30.0,
              rope_parameters={
                  "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                     "rope_theta": 1000000.0},
                  "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
              pad_token_id=0),
         seed=2122,
         emb_std=0.03, final_norm_gain=6.0,
         hf_config_extra={"global_head_dim": 32, "num_global_key_value_heads": 1,
                          "per_layer_config": None},
         notes=["Gemma 4 text decoder (model_type gemma4_text, GGUF arch `gemma4`): 5 layers, "
                "layers 0, 1, 3 sliding (window 8, RoPE base 1e4, all 16 dims rotated), 2 and 4 "
                "global (proportional RoPE, base 1e6, partial_rotary_factor 0.25: the first 4 "
                "of 16 frequency pairs rotate with base^(-2i/32), the other 12 have frequency 0; "
                "GGUF: rope_freqs.weight [1 x 4, 1e30 x 12] divides the frequencies).",
                "Head sizes: 16 in the sliding layers (head_dim), 32 in the global ones "
                "(global_head_dim; GGUF key_length 32, key_length_swa 16): q is 64 or 128 wide, "
                "k and v 32 or 64, o_proj maps 64 or 128 -> 64.",
                "KV sharing: num_kv_shared_layers 2, so layers 3 and 4 have no k/v projections "
                "and attend over the keys and values of the last earlier layer of their kind "
                "(3 -> 1, 4 -> 2; llama.cpp: n_layer_kv_from_start - 2 / - 1).",
                "Per-layer embeddings (hidden_size_per_layer_input 8): a [512, 5*8] table "
                "scaled by sqrt(8), plus the projection of the scaled token embedding "
                "(per_layer_model_projection / sqrt(64), RMSNorm per layer), sum times "
                "1/sqrt(2); after each block gelu(x W_gate) * that input, W_proj, RMSNorm, "
                "added to the residual. Each block's output is multiplied by a random "
                "layer_scalar (GGUF blk.N.layer_output_scale.weight).",
                "Attention scale 1 (no 1/sqrt(head_dim)); q_norm/k_norm per head and a "
                "weightless RMSNorm of v; norms multiply by w (not 1+w); final-logit softcap "
                "30; GQA 4/2; tied embeddings scaled by sqrt(64).",
                "use_double_wide_mlp: the KV-shared layers' MLPs are twice as wide (128; GGUF "
                "feed_forward_length is the per-layer array [64, 64, 64, 128, 128]). "
                "attention_k_eq_v: the global layers have no v_proj, their values are the key "
                "projection before k_norm and RoPE (then the weightless v norm); the sliding "
                "layers keep their v_proj (GGUF: no blk.2.attn_v.weight). With attention_k_eq_v, "
                "num_global_key_value_heads 1 gives the global layers one key/value head (MQA "
                "4/1) where the sliding ones have 2 (GGUF head_count_kv [2, 2, 1, 2, 1]).",
                "Seed 2122: with 2121 llama.cpp's CPU path on the bf16 GGUF (activations "
                "rounded to bf16) picked another token at 1 of the 24 greedy steps, where its "
                "f32 path agreed with transformers; with 2122 it agrees at every step.",
                "config.json: transformers 5.24 saves an empty per_layer_config and no "
                "global_head_dim (a reload would give the global layers head_dim 16); the script "
                "writes global_head_dim and removes per_layer_config."]),
    Spec("gemma4moe", "Gemma4TextConfig", "Gemma4ForCausalLM", "spm-gemma",
         dict(BASE, num_hidden_layers=2, intermediate_size=48, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, global_head_dim=32, tie_word_embeddings=True,
              hidden_activation="gelu_pytorch_tanh", sliding_window=8, rms_norm_eps=1e-6,
              layer_types=["sliding_attention", "full_attention"],
              num_kv_shared_layers=0, hidden_size_per_layer_input=0,
              attention_k_eq_v=True, num_global_key_value_heads=1,
              enable_moe_block=True, num_experts=4, top_k_experts=2, moe_intermediate_size=32,
              final_logit_softcapping=30.0,
              rope_parameters={
                  "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                     "rope_theta": 1000000.0},
                  "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
              pad_token_id=0),
         seed=2124,
         emb_std=0.03, final_norm_gain=6.0,
         hf_config_extra={"global_head_dim": 32, "num_global_key_value_heads": 1,
                          "per_layer_config": None},
         notes=["Gemma 4 with mixture-of-experts blocks (the 26B-A4B shape; GGUF arch "
                "`gemma4` with expert keys): 2 layers (0 sliding, 1 global), head sizes "
                "16 and 32, attention_k_eq_v with one global key/value head, no per-layer "
                "embeddings, no KV sharing.",
                "Every block's feed-forward is two branches added before the post-FFN norm: "
                "the dense MLP (intermediate_size 48) of pre_feedforward_layernorm(x), normed by "
                "post_feedforward_layernorm_1 (GGUF post_ffw_norm_1), and 4 GELU experts (2 per "
                "token, moe_intermediate_size 32) of pre_feedforward_layernorm_2(x) (GGUF "
                "pre_ffw_norm_2), normed by post_feedforward_layernorm_2 (post_ffw_norm_2); "
                "x is the residual stream after attention.",
                "Router (GGUF ffn_gate_inp): logits of rms_norm(x) * router.scale / sqrt(64) "
                "(scale: ffn_gate_inp.scale), softmax over the 4, top 2 renormalised to sum 1, "
                "then each multiplied by its expert's router.per_expert_scale (GGUF "
                "ffn_down_exps.scale, which llama.cpp applies to the expert's output). Experts "
                "fused as experts.gate_up_proj [4, 64, 64] (GGUF ffn_gate_up_exps) and "
                "experts.down_proj [4, 64, 32] (ffn_down_exps). Two layers and four experts: "
                "every routing decision of a prompt must clear the router gaps, and with more "
                "of them no prompt of 20 tokens did."]),
    Spec("qwen35", "Qwen3_5TextConfig", "Qwen3_5ForCausalLM", "bpe-qwen2",
         dict(BASE, num_hidden_layers=4, intermediate_size=96, num_attention_heads=4,
              num_key_value_heads=2, head_dim=32, tie_word_embeddings=False,
              layer_types=["linear_attention", "linear_attention", "linear_attention",
                           "full_attention"],
              linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16,
              linear_num_key_heads=2, linear_num_value_heads=4, rms_norm_eps=1e-6,
              rope_parameters={"rope_type": "default", "rope_theta": 10000000.0,
                               "partial_rotary_factor": 0.25, "mrope_section": [2, 1, 1],
                               "mrope_interleaved": True}),
         seed=3501, convert_args=["--no-mtp"],
         notes=["Qwen 3.5 (model_type qwen3_5_text, GGUF arch `qwen35`): layers 0-2 gated "
                "delta net (linear attention with a recurrent state), layer 3 full attention.",
                "Gated delta net: in_proj_qkv -> a causal depthwise conv (kernel 4, no bias) "
                "over q, k, v with SiLU; q and k L2-normalised per head (q also / sqrt(16)); "
                "beta = sigmoid(in_proj_b x), g = -exp(A_log) softplus(in_proj_a x + dt_bias); "
                "per value head S <- S exp(g) + k (beta (v - S^T k))^T, o = S^T q; then an "
                "RMSNorm of o times silu(in_proj_z x) (weight as is), out_proj. Two key heads, "
                "four value heads: value head h uses key head h / 2 (GGUF: llama.cpp's "
                "converter reorders the value heads so that head j uses key head j % 2).",
                "Full attention: q_proj gives per head 32 query values then 32 gate values; "
                "q/k RMSNorm per head; RoPE (NeoX) on the first 8 of 32 dims (partial 0.25, "
                "base 1e7; mrope sections [2, 1, 1] give every section the text position); "
                "attention output times sigmoid(gate) before o_proj.",
                "Norms other than the delta net's gated one are zero-centred (x (1 + w)); the "
                "converter adds 1, and writes A_log as ssm_a = -exp(A_log)."]),
    Spec("qwen35moe", "Qwen3_5MoeTextConfig", "Qwen3_5MoeForCausalLM", "bpe-qwen2",
         dict(BASE, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, head_dim=32, tie_word_embeddings=False,
              layer_types=["linear_attention", "full_attention"],
              linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16,
              linear_num_key_heads=2, linear_num_value_heads=4, rms_norm_eps=1e-6,
              num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
              shared_expert_intermediate_size=48,
              rope_parameters={"rope_type": "default", "rope_theta": 10000000.0,
                               "partial_rotary_factor": 0.25, "mrope_section": [2, 1, 1],
                               "mrope_interleaved": True}),
         seed=3502, convert_args=["--no-mtp"],
         notes=["Qwen 3.5 MoE (model_type qwen3_5_moe_text, GGUF arch `qwen35moe`): the "
                "layers of `qwen35` (here a delta net, then attention) with every "
                "feed-forward a mixture: 4 SwiGLU experts of width 32, top 2 of a "
                "softmax over all 4 router logits (mlp.gate, GGUF ffn_gate_inp), the two "
                "weights always renormalised to sum 1, plus a shared SwiGLU expert of width "
                "48 times sigmoid(shared_expert_gate . x) (GGUF ffn_gate_inp_shexp).",
                "Experts stored fused as mlp.experts.gate_up_proj [4, 64, 64] (gate rows "
                "first) and mlp.experts.down_proj [4, 64, 32]. Two layers: with four, no "
                "20-token prompt cleared the router-gap rule."]),
    Spec("qwen3next", "Qwen3NextConfig", "Qwen3NextForCausalLM", "bpe-qwen2",
         dict(BASE, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, head_dim=32, tie_word_embeddings=False,
              layer_types=["linear_attention", "full_attention"],
              linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16,
              linear_num_key_heads=2, linear_num_value_heads=4, rms_norm_eps=1e-6,
              num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
              shared_expert_intermediate_size=48, norm_topk_prob=True,
              decoder_sparse_step=1, mlp_only_layers=[],
              rope_parameters={"rope_type": "default", "rope_theta": 10000000.0,
                               "partial_rotary_factor": 0.25}),
         seed=3503, convert_args=["--no-mtp"],
         notes=["Qwen3-Next (model_type qwen3_next, GGUF arch `qwen3next`): Qwen 3.5 MoE's "
                "blocks (`qwen35moe` above) with fused delta net projections: in_proj_qkvz "
                "holds, for each key head, its query (16 rows), its key (16), then the values "
                "(2 x 16) and output gates (2 x 16) of its two value heads; in_proj_ba holds "
                "for each key head the beta rows of its value heads, then their alpha rows. "
                "Value head h uses key head h / 2 (llama.cpp keeps this grouped order: its "
                "converter splits in_proj_qkvz into attn_qkv and attn_gate and keeps "
                "ssm_ba (beta and alpha) fused; ferrolm reads the folder's fused tensors as they are).",
                "RoPE without sections (NeoX) on 8 of the 32 dims; top 2 of 4 experts "
                "renormalised, a shared expert of width 48 gated by a sigmoid."]),
    Spec("lfm2", "Lfm2Config", "Lfm2ForCausalLM", "bpe-qwen2",
         dict(BASE, num_hidden_layers=4, intermediate_size=130, num_attention_heads=4,
              num_key_value_heads=2, tie_word_embeddings=False, norm_eps=1e-5,
              layer_types=["conv", "full_attention", "conv", "full_attention"],
              conv_L_cache=3, conv_bias=False, block_auto_adjust_ff_dim=True,
              block_ffn_dim_multiplier=1.0, block_multiple_of=32,
              rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
         seed=3601,
         notes=["LFM2 (model_type lfm2, GGUF arch `lfm2`): layers 0 and 2 short "
                "convolutions, 1 and 3 attention. A convolution layer: in_proj gives B, C, x "
                "(64 each); out_proj(C * conv(B * x)), conv a causal depthwise convolution of "
                "width 3 (conv_L_cache) without bias or activation; its state is the last two "
                "B * x of the sequence.",
                "Attention: per-head RMSNorm q_layernorm/k_layernorm before RoPE (NeoX, base "
                "1e6), GQA 4/2, out_proj. Norms operator_norm (before the mixer), ffn_norm, and "
                "the final embedding_norm (GGUF token_embd_norm), all x * w.",
                "Feed-forward SwiGLU (w1 gate, w3 up, w2 down) of width 96: intermediate_size "
                "130, times 2/3 (block_auto_adjust_ff_dim) = 86, times "
                "block_ffn_dim_multiplier 1.0, rounded up to block_multiple_of 32."]),
    # ---- mixture-of-experts models and SmolLM3 ----
    Spec("qwen3moe", "Qwen3MoeConfig", "Qwen3MoeForCausalLM", "bpe-qwen2",
         dict(BASE, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
              num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
              norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
              tie_word_embeddings=False,
              rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
         seed=1212,
         notes=["Qwen3-MoE: every layer is a sparse MoE block (decoder_sparse_step 1, "
                "mlp_only_layers []): 8 experts, top-2, expert FFN width moe_intermediate_size "
                "32 (SwiGLU); intermediate_size (96) is unused. Router: softmax over all 8 "
                "router logits (in f32), top-2, then the two weights renormalised to sum 1 "
                "(norm_topk_prob true; llama.cpp's qwen3moe graph always renormalises).",
                "Attention as Qwen3: per-head RMSNorm q_norm/k_norm (over head_dim 32) before "
                "RoPE (NeoX/half-split), GQA 4/2, head_dim 32 != 64/4 (q width 128, o_proj "
                "128 -> 64), no biases; untied lm_head.",
                "transformers 5 writes the expert count as config.json `num_local_experts` "
                "(Qwen3MoeConfig maps num_experts to it); real Qwen3-MoE checkpoints say "
                "`num_experts`."]),
    Spec("qwen2moe", "Qwen2MoeConfig", "Qwen2MoeForCausalLM", "bpe-qwen2",
         dict(BASE, num_attention_heads=4, num_key_value_heads=2,
              num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
              shared_expert_intermediate_size=48, norm_topk_prob=False,
              decoder_sparse_step=1, mlp_only_layers=[], tie_word_embeddings=False,
              rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
         seed=1313,
         notes=["Qwen2-MoE (Qwen1.5-MoE style): every layer sparse: 8 routed experts, top-2, "
                "width 32, weights = softmax probabilities of the chosen experts NOT renormalised "
                "(norm_topk_prob false; llama.cpp's qwen2moe never renormalises), plus a shared "
                "expert (SwiGLU, width shared_expert_intermediate_size 48) whose output is "
                "multiplied by sigmoid(shared_expert_gate . x) (a [1, 64] weight; GGUF "
                "blk.N.ffn_gate_inp_shexp.weight, f32, ne [64, 1]) and added; intermediate_size "
                "(96) is unused.",
                "Attention as Qwen2: q/k/v biases (qkv_bias true), no o_proj bias, GQA 4/2, "
                "head_dim 16, NeoX RoPE base 1e6; untied lm_head (llama.cpp's qwen2moe requires "
                "output.weight)."]),
    Spec("mixtral", "MixtralConfig", "MixtralForCausalLM", "spm-llama",
         dict(BASE, intermediate_size=48, num_attention_heads=4, num_key_value_heads=2,
              num_local_experts=4, num_experts_per_tok=2, sliding_window=None,
              router_jitter_noise=0.0, tie_word_embeddings=False,
              rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
         seed=1414,
         notes=["Mixtral: every layer sparse, 4 experts (num_local_experts), top-2, expert width "
                "intermediate_size 48 (SwiGLU: w1 = gate, w3 = up, w2 = down); router softmax "
                "over all 4, top-2, renormalised to sum 1 (always, in transformers and in "
                "llama.cpp's llama graph). No shared expert, no biases.",
                "Safetensors use Mixtral's original names: model.layers.N.block_sparse_moe."
                "experts.E.{w1,w2,w3}.weight and model.layers.N.block_sparse_moe.gate.weight "
                "(not mlp.experts / mlp.gate).",
                "Converted as GGUF arch `llama` (llama.expert_count / llama.expert_used_count "
                "present, expert width = llama.feed_forward_length, no "
                "expert_feed_forward_length key), so q/k rows are permuted like Llama; "
                "sliding_window is None in config.json (the converter writes no window for "
                "MixtralForCausalLM anyway). GQA 4/2, head_dim 16, RoPE base 1e6; untied "
                "lm_head; Llama 2 style SentencePiece vocab."]),
    Spec("olmoe", "OlmoeConfig", "OlmoeForCausalLM", "bpe-qwen2",
         dict(BASE, intermediate_size=32, num_attention_heads=4, num_key_value_heads=4,
              num_experts=8, num_experts_per_tok=2, norm_topk_prob=False, clip_qkv=None,
              tie_word_embeddings=False,
              rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
         seed=1515,
         notes=["OLMoE: every layer sparse, 8 experts, top-2, expert width intermediate_size 32 "
                "(SwiGLU), router softmax over all 8, top-2, NOT renormalised (norm_topk_prob "
                "false, as in OLMoE-1B-7B and llama.cpp's olmoe graph).",
                "q_norm/k_norm are RMSNorms over the WHOLE projected q (width n_head*head_dim = "
                "64) and k (n_kv_head*head_dim), applied before splitting into heads and before "
                "RoPE (NeoX/half-split in llama.cpp's olmoe) -- not per head as in Qwen3. "
                "MHA 4/4 heads, head_dim 16: llama.cpp creates attn_k_norm with n_embd entries, "
                "so GQA would not load there (OLMoE-1B-7B is MHA too). clip_qkv None (when set, "
                "transformers clamps q, k, v to [-clip, clip] after the norms; the converter "
                "writes no key for it).",
                "The converter hard-codes olmoe.attention.layer_norm_rms_epsilon = 1e-5, which is "
                "also config.json's rms_norm_eps here. Untied lm_head (llama.cpp's olmoe "
                "requires output.weight). Tokenizer: byte-level BPE with the Qwen2 regex, no BOS "
                "(like the real OLMoE's GPT-NeoX-style BPE; OlmoeConfig's default bos_token_id "
                "is None)."]),
    Spec("smollm3", "SmolLM3Config", "SmolLM3ForCausalLM", "bpe-llama3",
         dict(BASE, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
              no_rope_layers=[1, 1, 1, 0], no_rope_layer_interval=4, use_sliding_window=False,
              tie_word_embeddings=True,
              rope_parameters={"rope_type": "default", "rope_theta": 2000000.0}),
         seed=1616,
         emb_std=0.15, final_norm_gain=3.0,
         notes=["SmolLM3: Llama architecture where every 4th layer has no RoPE (NoPE). "
                "config.json `no_rope_layers` = [1, 1, 1, 0] is a per-layer USE-RoPE flag "
                "(1 = apply RoPE): layers 0-2 rotate q/k, layer 3 does not. transformers' "
                "default for no_rope_layers is int((i + 1) % no_rope_layer_interval != 0) with "
                "interval 4, the same as llama.cpp's smollm3 graph (use_rope = (il + 1) % 4 != 0, "
                "n_no_rope_layer_step hard-coded to 4; the converter writes no key for it), "
                "hence 4 layers here.",
                "GGUF arch `smollm3`: q/k rows permuted like Llama (adjacent-pair RoPE in GGML); "
                "GQA 4/2, head_dim 16, RoPE base 2e6, tied embeddings, byte-level BPE with the "
                "Llama 3 regex and BOS."]),
    # ---- IBM Granite (dense, MoE, MoE with a shared expert) ----
    Spec("granite", "GraniteConfig", "GraniteForCausalLM", "bpe-llama3",
         dict(BASE, num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
              **GRANITE_MULT, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
         seed=1717,
         emb_std=0.01, final_norm_gain=120.0,
         notes=["Granite (3.x dense): Llama layout with four scalar multipliers, all "
                "non-trivial here: embedding_multiplier 6 (embeddings times 6 after the lookup, "
                "GGUF granite.embedding_scale), attention_multiplier 0.0625 (the attention "
                "score scale, replacing 1/sqrt(head_dim) = 0.25; granite.attention.scale), "
                "residual_multiplier 0.22 (the attention output and the MLP output are each "
                "multiplied by it before being added to the residual stream; "
                "granite.residual_scale), logits_scaling 4 (logits DIVIDED by 4 after lm_head; "
                "granite.logit_scale = 4). GQA 4/2, head_dim 16 (the converter ignores "
                "head_dim, so it must be hidden/heads), q/k rows permuted like Llama.",
                "Tied embeddings (as the real Granite 3 models): emb_std 0.01 (x6 = 0.06 "
                "after the multiplier, against residual-stream updates of ~0.3 after the 0.22) "
                "and a final norm gain of 120 to spread the logits again (std ~2.5 after the "
                "/4): with larger tied embeddings (0.03-0.08) these models mostly repeat one "
                "token in greedy decoding. Byte-level BPE with the Llama 3 regex and BOS."]),
    Spec("granitemoe", "GraniteMoeConfig", "GraniteMoeForCausalLM", "spm-llama",
         dict(BASE, intermediate_size=32, num_attention_heads=4, num_key_value_heads=2,
              num_local_experts=8, num_experts_per_tok=2, tie_word_embeddings=False,
              **GRANITE_MULT, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
         seed=1818,
         emb_std=0.1, final_norm_gain=12.0,
         notes=["Granite MoE (PowerMoE / granite-3.x-aNNNm style): every layer sparse, 8 "
                "experts (num_local_experts), top-2, expert width intermediate_size 32 "
                "(SwiGLU). Router: transformers takes the top-2 router LOGITS and softmaxes "
                "those two, which equals softmax over all 8 then renormalising the two to sum 1 "
                "(llama.cpp's granite graph: softmax gating, norm_w true). Same four Granite "
                "multipliers as `granite` (embedding 6, attention 0.0625, residual 0.22, "
                "logits /4); GGUF arch `granitemoe`.",
                "Safetensors keep Granite's original fused layout: "
                "model.layers.N.block_sparse_moe.input_linear.weight [E, 2*ff, d] (per expert "
                "[gate; up], gate rows first), block_sparse_moe.output_linear.weight [E, d, ff] "
                "(down), router block_sparse_moe.router.layer.weight [E, d]. The converter "
                "splits input_linear into blk.N.ffn_gate_exps / ffn_up_exps.",
                "GQA 4/2, head_dim 16, q/k permuted like Llama; untied lm_head; Llama 2 style "
                "SentencePiece vocab."]),
    Spec("granitemoeshared", "GraniteMoeSharedConfig", "GraniteMoeSharedForCausalLM",
         "bpe-qwen2",
         dict(BASE, intermediate_size=32, num_attention_heads=4, num_key_value_heads=2,
              num_local_experts=8, num_experts_per_tok=2, shared_intermediate_size=48,
              tie_word_embeddings=True,
              **GRANITE_MULT, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
         seed=1919,
         emb_std=0.01, final_norm_gain=120.0,
         notes=["Granite MoE with a shared expert (GraniteMoeShared): as `granitemoe` (8 "
                "experts, top-2, width 32, renormalised top-2 softmax, the four Granite "
                "multipliers) plus an always-on shared SwiGLU MLP of width "
                "shared_intermediate_size 48 whose output is simply ADDED to the "
                "routed experts' output (no gate, unlike Qwen2-MoE), before the residual "
                "multiplier. Safetensors: model.layers.N.shared_mlp.input_linear.weight "
                "[2*48, 64] ([gate; up]) and shared_mlp.output_linear.weight [64, 48]; the "
                "converter splits input_linear into blk.N.ffn_gate_shexp / ffn_up_shexp and "
                "writes granitemoe.expert_shared_feed_forward_length. GGUF arch `granitemoe` "
                "(the same as GraniteMoeForCausalLM: the shared expert is detected by that key).",
                "Tied embeddings (emb_std 0.01, final norm gain 120, as `granite`); "
                "byte-level BPE with the Qwen2 regex and no BOS (real Granite tokenizers add "
                "none either)."]),
    # ---- OpenAI gpt-oss ----
    Spec("gpt-oss", "GptOssConfig", "GptOssForCausalLM", "bpe-llama3",
         dict(BASE, intermediate_size=32, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, num_local_experts=8, num_experts_per_tok=2,
              sliding_window=8, tie_word_embeddings=False,
              rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 4.0,
                               "original_max_position_embeddings": 64, "beta_fast": 32.0,
                               "beta_slow": 1.0, "truncate": False}),
         seed=2020,
         notes=["gpt-oss (GptOssForCausalLM, GGUF arch `gpt-oss`): every layer sparse, 8 "
                "experts, top-2 chosen by the router LOGITS (router with a bias) and weighted by "
                "the softmax of those two logits only; each expert's projections have biases; "
                "gpt-oss's clamped SwiGLU (gate capped at 7, up clamped to +-7, "
                "gate*sigmoid(1.702*gate)*(up+1)). Safetensors keep transformers' fused layout "
                "mlp.experts.gate_up_proj [E, d, 2*ff] with gate and up INTERLEAVED along the "
                "last dim and down_proj [E, ff, d] (input-major, x @ W); the converter "
                "transposes and de-interleaves them into ffn_gate_exps / ffn_up_exps.",
                "Attention: biases on q, k, v and o; a learned sink logit per query head "
                "(self_attn.sinks, GGUF attn_sinks.weight) joins every softmax; even layers "
                "attend in a window of 8 (layer_types sliding/full alternating; llama.cpp's "
                "default pattern of 2), NeoX RoPE with YaRN (factor 4, original context 64, "
                "base 150000) on every layer. GQA 4/2, head_dim 16, 2 layers (one windowed, one "
                "global: more layers leave no prompt whose every routing is robust). The norm before "
                "the experts is post_attention_layernorm (GGUF post_attention_norm).",
                "YaRN `truncate: false` (as gpt-oss's config): transformers ramps between the "
                "exact correction dimensions, where llama.cpp always rounds them outwards to "
                "whole pairs; the GGUF carries no key for it, hence gguf_reference. Byte-level "
                "BPE with the Llama 3 regex and BOS (the real o200k vocabulary has no BOS; "
                "irrelevant to the model's numbers)."],
         gguf_overrides=lambda c: {"rope_parameters": {**c["rope_parameters"], "truncate": True}},
         gguf_reason="llama.cpp rounds YaRN's correction range outwards (ggml_rope_yarn_corr_dims) "
                     "and the converter writes no key for transformers' `truncate: false`."),
]


# MoE router weights [E, d] (and Qwen2-MoE's shared-expert gate [1, d]) by parameter name in the
# transformers 5 modules: `mlp.gate` (Qwen2/3-MoE, OLMoE, Mixtral), `block_sparse_moe.router`
# (Granite MoE; saved as `block_sparse_moe.router.layer.weight`)
ROUTER_SUFFIXES = ("mlp.gate.weight", "mlp.shared_expert_gate.weight",
                   "block_sparse_moe.router.weight", "mlp.router.weight", "router.proj.weight")


def randomize(model: torch.nn.Module, seed: int, emb_std: float,
              final_norm_gain: float = 1.0) -> None:
    """Wide random init: linear weights N(0, (1.5/sqrt(fan_in))^2), biases N(0, 0.2^2),
    embeddings / lm_head N(0, emb_std^2), norm weights with an effective multiplier (w, or 1+w
    for Gemma's norms) of 1 + N(0, 0.15^2) -- times final_norm_gain for the final norm.

    Mixture-of-experts parameters: transformers 5 keeps the experts of a layer fused in 3-D
    parameters (`mlp.experts.gate_up_proj` [E, 2*ff, d], `mlp.experts.down_proj` [E, d, ff];
    Granite MoE: `block_sparse_moe.experts.*`), scaled like linear weights with fan_in = the
    last dim; the router (`mlp.gate.weight` [E, d], Granite MoE's
    `block_sparse_moe.router.weight`) and Qwen2-MoE's `mlp.shared_expert_gate.weight` [1, d]
    get the wider
    N(0, (3/sqrt(d))^2), so that router probabilities are well separated (no near-ties in the
    top-k choice, see MIN_ROUTER_GAP). Parameters are visited in the same order and drawn from
    the same generator as before these branches existed, so dense models are unchanged.

    Tied-embedding models get a small emb_std (the token's own embedding would otherwise dominate
    the residual stream, and e_t . norm(e_t) makes a random tied model repeat its last token)
    and a larger final-norm gain to spread the logits again; Gemma's sqrt(hidden) embedding
    scale makes that even more necessary."""
    g = torch.Generator().manual_seed(seed)
    # gpt-oss keeps its experts input-major ([E, in, out]) and has attention sinks
    gpt_oss = getattr(model.config, "model_type", None) == "gpt_oss"
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if gpt_oss and name.endswith(".sinks"):  # one logit per head, N(0, 1)
                p.copy_(r)
            elif gpt_oss and name.endswith("_bias"):  # experts' biases [E, out]
                p.copy_(0.2 * r)
            elif gpt_oss and p.ndim == 3 and ".experts." in name:  # [E, in, out]
                p.copy_(1.5 / math.sqrt(p.shape[1]) * r)
            elif gpt_oss and name.endswith("mlp.router.weight"):
                # twice the other routers' spread: every routing of a 20-token prompt and its 8
                # greedy tokens must clear MIN_ROUTER_LOGIT_GAP
                p.copy_(6.0 / math.sqrt(p.shape[1]) * r)
            elif name.endswith(".A_log"):  # Qwen 3.5: decay rates A = exp(A_log) around 1
                p.copy_(0.5 * r)
            elif name.endswith(".dt_bias"):  # Qwen 3.5: added to the decay's input
                p.copy_(0.5 * r)
            elif name.endswith(("conv1d.weight", "conv.conv.weight")):  # Qwen 3.5, LFM2: [C, 1, K]
                p.copy_(1.5 / math.sqrt(p.shape[-1]) * r)
            elif name.endswith("router.proj.weight"):
                # Gemma 4's router sees rms_norm(x) * scale / sqrt(d), a vector of norm ~1: its
                # logits have the weights' spread, N(0, 2^2)
                p.copy_(2.0 * r)
            elif name.endswith("router.scale"):  # Gemma 4: multiplies the router's input
                p.copy_(1.0 + 0.15 * r)
            elif name.endswith("router.per_expert_scale"):  # Gemma 4: multiplies each expert
                p.copy_(1.0 + 0.25 * r)
            elif p.ndim == 1 and "norm" in name:
                base = float(p.detach().float().mean())  # 1.0 (x*w) or 0.0 (x*(1+w))
                assert base in (0.0, 1.0), (name, base)
                gain = final_norm_gain if name == "model.norm.weight" else 1.0
                # effective multiplier (base 0 means the model computes x * (1 + w))
                p.copy_(gain * (1.0 + 0.15 * r) - (1.0 - base))
            elif name.endswith(".bias"):
                p.copy_(0.2 * r)
            elif "embed_tokens" in name or "lm_head" in name:
                p.copy_(emb_std * r)
            elif p.ndim == 2 and name.endswith(ROUTER_SUFFIXES):  # MoE router, shared-expert gate
                p.copy_(3.0 / math.sqrt(p.shape[1]) * r)
            elif p.ndim == 2:
                p.copy_(1.5 / math.sqrt(p.shape[1]) * r)
            elif p.ndim == 3 and ".experts." in name:  # fused experts [E, out, in]
                p.copy_(1.5 / math.sqrt(p.shape[-1]) * r)
            else:
                raise ValueError(f"unexpected parameter {name} {tuple(p.shape)}")
        # Gemma 4's per-block output multiplier is a buffer (ones by default): drawn from its own
        # generator so that every other parameter keeps its value
        gs = torch.Generator().manual_seed(seed + 1)
        for name, b in model.named_buffers():
            if name.endswith("layer_scalar"):
                b.copy_(0.5 + torch.rand(b.shape, generator=gs, dtype=torch.float32))


def sig(x: float) -> float:
    return float(f"{x:.{SIG_DIGITS}g}")


def is_moe_config(cfg: Any) -> bool:
    return (getattr(cfg, "num_experts_per_tok", None) is not None
            or bool(getattr(cfg, "enable_moe_block", False)))


def load_f32(hf_dir: Path, overrides: dict[str, Any] | None = None):
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.from_pretrained(hf_dir)
    for k, v in (overrides or {}).items():
        setattr(cfg, k, v)
    # MoE: the plain per-expert loop (the default would be "grouped_mm" where available)
    extra = {"experts_implementation": "eager"} if is_moe_config(cfg) else {}
    m = AutoModelForCausalLM.from_pretrained(
        hf_dir, config=cfg, dtype=torch.float32, attn_implementation="eager", **extra)
    m.eval()
    if extra:
        assert routers(m), "MoE config but no router modules found"
    return m


def routers(model) -> list[tuple[str, Any]]:
    """The MoE router modules (transformers 5: `model.layers.N.mlp.gate`, Granite MoE's
    `model.layers.N.block_sparse_moe.router`: a *TopKRouter whose forward returns
    (router_logits, top-k weights, top-k indices), with a `top_k` attribute; Gemma 4's
    `model.layers.N.router`, a Gemma4TextRouter that returns the router probabilities first,
    its k in `config.top_k_experts`)."""
    return [(n, m) for n, m in model.named_modules()
            if type(m).__name__.endswith("TopKRouter") or type(m).__name__ == "Gemma4TextRouter"]


def router_min_gaps(model, seq: torch.Tensor) -> tuple[float, float] | None:
    """Uncached forward over `seq` with hooks on the routers: the minima over positions and MoE
    layers of (p_k - p_{k+1}) / p_1, p sorted router probabilities (softmax of the router
    logits in f32), and of l_k - l_{k+1}, l the sorted router logits; k = top_k. None for a
    model without routers."""
    rs = routers(model)
    if not rs:
        return None
    gaps: list[tuple[float, float]] = []

    def hook(mod, _inp, out):
        logits = out[0] if isinstance(out, tuple) else out
        logits = logits.detach().float().reshape(-1, logits.shape[-1])
        if type(mod).__name__ == "Gemma4TextRouter":
            logits = torch.log(logits)  # it returns the probabilities: back to logits (+ const)
            k = int(mod.config.top_k_experts)
        else:
            k = int(mod.top_k)
        probs = torch.softmax(logits, dim=-1)
        top = torch.topk(probs, k + 1, dim=-1).values
        topl = torch.topk(logits, k + 1, dim=-1).values
        prob_gap = float(((top[:, k - 1] - top[:, k]) / top[:, 0]).min())
        if type(mod).__name__ == "GptOssTopKRouter":
            # gpt-oss picks by logit (its softmax only weighs the k chosen): no probability
            # over all experts is ever computed, so only the logit gap matters
            prob_gap = 1.0
        gaps.append((prob_gap, float((topl[:, k - 1] - topl[:, k]).min())))

    handles = [m.register_forward_hook(hook) for _, m in rs]
    try:
        with torch.no_grad():
            model(seq)
    finally:
        for h in handles:
            h.remove()
    assert len(gaps) == len(rs), (len(gaps), len(rs))
    return min(g[0] for g in gaps), min(g[1] for g in gaps)


def run_prompt(model, tokens: list[int]) -> dict[str, Any]:
    from transformers import GenerationConfig

    ids = torch.tensor([tokens], dtype=torch.long)
    # never stop at EOS (eos_token_id=None in the GenerationConfig alone means "the model's
    # default"); prompts whose greedy tokens include a special token are rejected instead
    model.generation_config.eos_token_id = None
    with torch.no_grad():
        last = model(ids).logits[0, -1].float()
        gc = GenerationConfig(do_sample=False, max_new_tokens=N_NEW, min_new_tokens=0,
                              eos_token_id=None, pad_token_id=0, bos_token_id=None)
        out = model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=gc,
                             output_logits=True, return_dict_in_generate=True)
        greedy = out.sequences[0, len(tokens):].tolist()
        margins = []
        for step in out.logits:
            top = torch.topk(step[0].float(), 2).values
            margins.append(float(top[0] - top[1]))
        # independent check: a full (uncached) forward over the whole sequence agrees
        full = model(out.sequences).logits[0].float()
        argmax = full[len(tokens) - 1: -1].argmax(-1).tolist()
    assert len(greedy) == N_NEW
    assert torch.allclose(out.logits[0][0].float(), last, atol=1e-4, rtol=1e-4)
    rec = {
        "tokens": tokens,
        "last_logits": [sig(x) for x in last.tolist()],
        "greedy": greedy,
        "greedy_margins": [round(m, 5) for m in margins],
        "_uncached_argmax_agrees": argmax == greedy,
    }
    # MoE: routing robustness over every position the model is fed (prompt + greedy[:-1])
    gaps = router_min_gaps(model, out.sequences[:, :-1])
    if gaps is not None:
        rec["router_min_gap"] = float(f"{gaps[0]:.4g}")
        rec["router_min_logit_gap"] = float(f"{gaps[1]:.4g}")
        rec["_router_gaps"] = gaps  # unrounded, for the acceptance test
    return rec


def make_prompts(spec: Spec, tok: Tok, models: list[Any]) -> list[list[dict[str, Any]]]:
    """For each prompt length, draw random prompts until every greedy step of every reference
    model (HF, and the GGUF-semantics variant if any) has margin >= MIN_MARGIN, no greedy
    token is a special token, and (MoE) every routing decision has a relative top-k probability
    gap >= MIN_ROUTER_GAP and a top-k logit gap >= MIN_ROUTER_LOGIT_GAP."""
    results: list[list[dict[str, Any]]] = [[] for _ in models]
    g = np.random.default_rng(spec.seed)
    for n in PROMPT_LENS:
        for attempt in range(MAX_DRAWS):
            body = g.integers(*tok.normal, size=n - (1 if tok.add_bos else 0))
            tokens = ([tok.bos] if tok.add_bos else []) + [int(x) for x in body]
            recs = [run_prompt(m, tokens) for m in models]
            avoid = set(tok.special_ids) | set(spec.avoid_tokens)
            ok = not set(tokens[1 if tok.add_bos else 0:]) & avoid and all(
                min(r["greedy_margins"]) >= MIN_MARGIN
                and r["_uncached_argmax_agrees"]
                and not set(r["greedy"]) & avoid
                and r.get("_router_gaps", (1.0, 1.0))[0] >= MIN_ROUTER_GAP
                and r.get("_router_gaps", (1.0, 1.0))[1] >= MIN_ROUTER_LOGIT_GAP
                for r in recs)
            if ok:
                for i, r in enumerate(recs):
                    del r["_uncached_argmax_agrees"]
                    r.pop("_router_gaps", None)
                    results[i].append(r)
                if attempt:
                    print(f"  prompt len {n}: accepted after {attempt} rejected draw(s)")
                break
        else:
            raise RuntimeError(f"{spec.name}: no robust prompt of length {n}")
    return results


# ---------------------------------------------------------------------------------------------
# Conversion
# ---------------------------------------------------------------------------------------------

CONVERT_WRAPPER = r"""
import os, runpy, sys
llama = os.environ["LLAMACPP_DIR"]
sys.path.insert(0, os.path.join(llama, "gguf-py"))
sys.path.insert(1, llama)
import conversion.base as base
pre = os.environ.get("FERROLM_BPE_PRE")
if pre:
    _orig = base.TextModel.get_vocab_base_pre
    def _patched(self, tokenizer):
        try:
            return _orig(self, tokenizer)
        except NotImplementedError:
            print(f"[gen_conformance] unknown BPE pre-tokenizer hash -> using {pre!r}",
                  file=sys.stderr)
            return pre
    base.TextModel.get_vocab_base_pre = _patched
# transformers 5.24's Gemma4TextConfig.to_dict() drops global_head_dim (and writes an empty
# per_layer_config), so the converter, which reads AutoConfig(...).to_dict(), cannot find the
# global layers' head size: keys of config.json that the dict lacks or has empty are put back
import json
_orig_hp = base.ModelBase.load_hparams
def _hparams(dir_model, is_mistral_format):
    hp = _orig_hp(dir_model, is_mistral_format)
    cfg_path = os.path.join(dir_model, "config.json")
    if not is_mistral_format and os.path.isfile(cfg_path):
        with open(cfg_path, encoding="utf-8") as f:
            raw = json.load(f)
        for k, v in raw.items():
            if hp.get(k) in (None, {}) and v not in (None, {}):
                print(f"[gen_conformance] {k} from config.json", file=sys.stderr)
                hp[k] = v
    return hp
base.ModelBase.load_hparams = staticmethod(_hparams)
sys.argv = [os.path.join(llama, "convert_hf_to_gguf.py")] + sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def convert(llamacpp: Path, hf_dir: Path, out: Path, name: str, bpe_pre: str | None,
            log: Path, outtype: str = "bf16", model_name: str | None = None,
            extra_args: list[str] | None = None) -> list[str]:
    env = dict(os.environ)
    env["LLAMACPP_DIR"] = str(llamacpp)
    env["PYTHONPATH"] = os.pathsep.join([str(llamacpp / "gguf-py"), str(llamacpp)])
    if bpe_pre:
        env["FERROLM_BPE_PRE"] = bpe_pre
    cmd = [sys.executable, "-c", CONVERT_WRAPPER, str(hf_dir), "--outfile", str(out),
           "--outtype", outtype, "--model-name", model_name or f"ferrolm-conformance-{name}"]
    cmd += extra_args or []
    with open(log, "w") as f:
        r = subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT)
    text = log.read_text()
    if r.returncode != 0:
        print(text[-5000:])
        raise RuntimeError(f"conversion of {hf_dir} failed (log: {log})")
    return [l for l in text.splitlines() if "WARNING" in l or "gen_conformance" in l]


def gguf_summary(path: Path) -> tuple[dict[str, Any], list[str]]:
    import gguf  # llama.cpp's gguf-py (put first on sys.path in main)

    r = gguf.GGUFReader(path)
    kv: dict[str, Any] = {}
    for f in r.fields.values():
        if f.name.startswith("GGUF."):
            continue
        v = f.contents()
        if isinstance(v, list) and len(v) > 16:
            v = f"<array of {len(v)}: {v[:4]!r} ...>"
        kv[f.name] = v
    tensors = [f"{t.name:<28} {t.tensor_type.name:<5} {list(int(x) for x in t.shape)}"
               for t in r.tensors]
    return kv, tensors


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------


def dump_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=1, ensure_ascii=False) + "\n")


def compact_json(path: Path, obj: Any) -> None:
    """expected.json: compact (a single line) to keep the file small."""
    s = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    path.write_text(s + "\n")


def gen_model(spec: Spec, llamacpp: Path, work: Path, summary: list[str]) -> dict[str, Any]:
    import transformers

    print(f"== {spec.name}")
    tok = get_tok(spec.tok, work)
    mdir = OUT / spec.name
    hf = mdir / "hf"
    if mdir.exists():
        shutil.rmtree(mdir)
    hf.mkdir(parents=True)

    cfg_kwargs = dict(spec.cfg)
    cfg_kwargs.update(vocab_size=tok.vocab_size, bos_token_id=tok.bos, eos_token_id=tok.eos)
    if "pad_token_id" not in cfg_kwargs:
        cfg_kwargs["pad_token_id"] = tok.pad
    config = getattr(transformers, spec.config_cls)(**cfg_kwargs)
    config.architectures = [spec.model_cls]
    torch.manual_seed(spec.seed)
    model = getattr(transformers, spec.model_cls)(config)
    randomize(model, spec.seed, spec.emb_std, spec.final_norm_gain)
    if is_moe_config(config):  # the routers must have had the wide init (ROUTER_SUFFIXES)
        rnames = {n for n, _ in routers(model)}
        assert rnames and all(any(p.startswith(r + ".") and p.endswith(ROUTER_SUFFIXES)
                                  for p, _ in model.named_parameters()) for r in rnames), rnames
    model = model.to(torch.bfloat16)
    model.generation_config.do_sample = False
    model.save_pretrained(hf, safe_serialization=True)
    if spec.hf_config_extra:
        c = json.loads((hf / "config.json").read_text())
        for k, v in spec.hf_config_extra.items():
            if v is None:
                c.pop(k, None)
            else:
                c[k] = v
        (hf / "config.json").write_text(json.dumps(c, indent=2, sort_keys=True) + "\n")
    for f in tok.dir.iterdir():
        shutil.copy(f, hf / f.name)

    # reference(s) from exactly the stored bf16 values
    hf_cfg0 = json.loads((hf / "config.json").read_text())
    models = [load_f32(hf)]
    overrides = None
    if spec.gguf_overrides is not None:
        overrides = spec.gguf_overrides(hf_cfg0)
        models.append(load_f32(hf, overrides))
    extra = [(key, reason, fn(hf_cfg0)) for key, reason, fn in spec.extra_refs]
    models += [load_f32(hf, ov) for _, _, ov in extra]
    runs = make_prompts(spec, tok, models)
    extra_runs = runs[len(runs) - len(extra):]

    gguf_path = mdir / "model.gguf"
    log = work / f"convert-{spec.name}.log"
    conv_msgs = convert(llamacpp, hf, gguf_path, spec.name, tok.bpe_pre, log,
                        extra_args=spec.convert_args)
    kv, tensors = gguf_summary(gguf_path)
    arch = kv["general.architecture"]
    window_key = f"{arch}.attention.sliding_window"
    hf_cfg = json.loads((hf / "config.json").read_text())
    hf_window = hf_cfg.get("sliding_window")

    notes = list(spec.notes)
    entry: dict[str, Any] = {
        "name": spec.name,
        "arch": arch,
        "hf_architecture": spec.model_cls,
        "model_type": hf_cfg["model_type"],
        "vocab_size": tok.vocab_size,
        "tokenizer": spec.tok,
        "bos_token_id": tok.bos,
        "eos_token_id": tok.eos,
        "add_bos": tok.add_bos,
        "sliding_window": hf_window,
        "gguf_has_window": (window_key in kv) if hf_window else None,
        "gguf_sliding_window": kv.get(window_key),
        "gguf_reference": overrides is not None,
        "notes": notes,
    }
    if spec.tok.startswith("bpe"):
        notes.append(f"tokenizer.ggml.pre = {kv.get('tokenizer.ggml.pre')!r}: set by the "
                     f"conformance script because the converter does not know the hash of this "
                     f"tiny vocabulary (same split regex as {tok.bpe_pre!r}).")
    if hf_window and window_key not in kv:
        notes.append(f"GGUF has no {window_key}: compare GGUF-path outputs with gguf_reference "
                     f"(or only prompts whose whole sequence fits in the window).")
    expected: dict[str, Any] = {
        "name": spec.name,
        "arch": arch,
        "hf_architecture": spec.model_cls,
        "model_type": hf_cfg["model_type"],
        "vocab_size": tok.vocab_size,
        "n_new": N_NEW,
        "notes": notes,
        "prompts": runs[0],
    }
    for p in expected["prompts"]:
        # does the window cut anything? (last_logits: the prompt; greedy: the model sees at most
        # len(tokens) + N_NEW - 1 positions)
        p["prompt_fits_in_window"] = len(p["tokens"]) <= hf_window if hf_window else True
        p["greedy_fits_in_window"] = (
            len(p["tokens"]) + N_NEW - 1 <= hf_window if hf_window else True)
    if overrides is not None:
        expected["gguf_reference"] = {
            "reason": spec.gguf_reason,
            "config_overrides": overrides,
            "prompts": [{k: v for k, v in r.items() if k != "tokens"} for r in runs[1]],
        }
        entry["gguf_reference_reason"] = spec.gguf_reason
        same = [a["greedy"] == b["greedy"] for a, b in zip(runs[0], runs[1])]
        notes.append(f"gguf_reference present ({spec.gguf_reason}); greedy equal to the HF "
                     f"reference per prompt: {same}.")
    if extra:
        expected["extra_references"] = {
            key: {"reason": reason, "config_overrides": ov,
                  **({"llamacpp_n_ctx": 2048} if key == "long_factors" else {}),
                  "prompts": [{k: v for k, v in r.items() if k != "tokens"} for r in rr]}
            for (key, reason, ov), rr in zip(extra, extra_runs)}
        entry["extra_references"] = [key for key, _, _ in extra]
    compact_json(mdir / "expected.json", expected)

    summary.append("=" * 100)
    summary.append(f"MODEL {spec.name}  ({spec.model_cls}, GGUF arch {arch})")
    summary.append("-" * 100)
    summary.append("config.json:")
    summary.append((hf / "config.json").read_text())
    summary.append("generation_config.json:")
    summary.append((hf / "generation_config.json").read_text())
    summary.append("tokenizer_config.json:")
    summary.append((hf / "tokenizer_config.json").read_text())
    summary.append("HF safetensors tensors:")
    from safetensors import safe_open
    with safe_open(hf / "model.safetensors", "pt") as f:
        for k in f.keys():
            t = f.get_slice(k)
            summary.append(f"  {k:<50} {t.get_dtype():<5} {t.get_shape()}")
    summary.append("GGUF metadata:")
    for k, v in kv.items():
        summary.append(f"  {k} = {v!r}")
    summary.append("GGUF tensors (name, type, shape as GGML ne):")
    summary.extend("  " + t for t in tensors)
    if conv_msgs:
        summary.append("converter warnings/notes:")
        summary.extend("  " + m for m in conv_msgs)
    summary.append("greedy margins (HF): " + str([min(p["greedy_margins"]) for p in runs[0]]))
    gaps = [p["router_min_gap"] for rr in runs for p in rr if "router_min_gap" in p]
    if gaps:
        entry["router_min_gap"] = min(gaps)
        entry["router_min_logit_gap"] = min(
            p["router_min_logit_gap"] for rr in runs for p in rr)
        for key in ("router_min_gap", "router_min_logit_gap"):
            summary.append(f"{key} per prompt (HF): {[p[key] for p in runs[0]]}")
            print(f"  {key}={[p[key] for p in runs[0]]}")
    OVERVIEW.append(overview(spec.name, hf_cfg, kv, tensors))
    print(f"  arch={arch} greedy={[p['greedy'] for p in runs[0]]}")
    print(f"  min margins={[min(p['greedy_margins']) for p in runs[0]]}")
    return entry


OVERVIEW: list[str] = []
STD_CFG = {"architectures", "attention_dropout", "dtype", "transformers_version", "use_cache",
           "initializer_range", "pretraining_tp", "mlp_bias", "attention_bias", "embd_pdrop",
           "resid_pdrop", "model_type", "bos_token_id", "eos_token_id", "pad_token_id",
           "num_hidden_layers", "hidden_size", "intermediate_size", "max_position_embeddings",
           "vocab_size", "rms_norm_eps", "num_attention_heads", "num_key_value_heads",
           "hidden_act", "hidden_activation", "use_bidirectional_attention", "max_window_layers",
           "use_sliding_window", "_sliding_window_pattern"}


def overview(name: str, cfg: dict[str, Any], kv: dict[str, Any], tensors: list[str]) -> str:
    """A few lines per model: the config.json keys that matter beyond the usual ones, the GGUF
    architecture keys, and the GGUF tensor names with block numbers folded."""
    arch = kv["general.architecture"]
    lines = [f"--- {name} ({cfg['architectures'][0]}, model_type {cfg['model_type']}, GGUF arch "
             f"{arch})"]
    c = {k: v for k, v in cfg.items() if k not in STD_CFG}
    if cfg.get("attention_bias"):
        c["attention_bias"] = True
    if "layer_types" in c:
        c["layer_types"] = [t.split("_")[0] for t in c["layer_types"]]
    lines.append("  config.json: " + json.dumps(c))
    akv = {k[len(arch) + 1:]: v for k, v in kv.items() if k.startswith(arch + ".")}
    lines.append("  GGUF " + arch + ".*: " + ", ".join(f"{k}={v}" for k, v in akv.items()))
    tok = {k[len("tokenizer.ggml."):]: v for k, v in kv.items()
           if k.startswith("tokenizer.ggml.") and not str(v).startswith("<array")}
    lines.append("  GGUF tokenizer.ggml.*: " + ", ".join(f"{k}={v}" for k, v in tok.items()))
    seen: dict[str, str] = {}
    for t in tensors:
        n, typ, shape = t.split(maxsplit=2)
        parts = n.split(".")
        if parts[0] == "blk":
            n = "blk.N." + ".".join(parts[2:])
        seen.setdefault(n, f"{n} {typ} {shape}")
    lines.append("  GGUF tensors: " + "; ".join(seen.values()))
    return "\n".join(lines)


def file_sha256(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llamacpp", type=Path, default=Path("/tmp/llamacpp/src"),
                    help="llama.cpp source tree (with convert_hf_to_gguf.py and gguf-py/)")
    ap.add_argument("--only", nargs="*", help="generate only these models (manifest is merged)")
    args = ap.parse_args()
    llamacpp: Path = args.llamacpp.resolve()
    sys.path.insert(0, str(llamacpp / "gguf-py"))

    # OMP_NUM_THREADS (e.g. 1 on a busy machine) is honoured; the default is every core. The
    # thread count changes f32 reduction order: last_logits move by ~5e-6 (the 7th digit), the
    # weights, prompts and greedy tokens do not; the fixtures were made with 2 threads
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS") or 0)
                          or max(1, os.cpu_count() or 1))
    torch.use_deterministic_algorithms(True)
    import gguf
    import sentencepiece
    import tokenizers
    import transformers

    OUT.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="ferrolm-conformance-"))
    summary: list[str] = []
    entries = []
    specs = [s for s in MODELS if not args.only or s.name in args.only]
    for spec in specs:
        entries.append(gen_model(spec, llamacpp, work, summary))

    manifest_path = OUT / "manifest.json"
    old = {}
    old_manifest = None
    if args.only and manifest_path.exists():
        old_manifest = json.loads(manifest_path.read_text())
        old = {m["name"]: m for m in old_manifest["models"]}
    order = [s.name for s in MODELS]
    versions = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "sentencepiece": sentencepiece.__version__,
        "gguf_py": getattr(gguf, "__version__", None) or _gguf_py_version(llamacpp),
        "llama_cpp": "vendored llama.cpp of llama-cpp-python 0.3.36 "
                     f"(ggml {_ggml_version(llamacpp)})",
        "convert_hf_to_gguf_sha256": file_sha256(llamacpp / "convert_hf_to_gguf.py"),
    }
    if old_manifest is not None and set(old) - {e["name"] for e in entries}:
        # merging into fixtures made with other versions: the top-level versions stay those of
        # the existing fixtures, the new entries record what differs
        top = old_manifest["versions"]
        diff = {k: v for k, v in versions.items() if top.get(k) != v}
        for e in entries:
            e.pop("versions", None)
            if diff:
                e["versions"] = diff
        versions = top
    for e in entries:
        old[e["name"]] = e
    manifest = {
        "description": "Tiny random models with reference outputs from transformers (CPU, "
                       "float32 from bf16 weights, eager attention); see README.md.",
        "generator": "scripts/gen_conformance.py",
        "versions": versions,
        "min_greedy_margin": MIN_MARGIN,
        "min_router_gap": MIN_ROUTER_GAP,
        "min_router_logit_gap": MIN_ROUTER_LOGIT_GAP,
        "n_new": N_NEW,
        "models": [old[n] for n in order if n in old],
    }
    dump_json(manifest_path, manifest)
    (OUT / "README.md").write_text(readme(versions, manifest["models"]))
    text = "\n".join(
        [f"versions: {json.dumps(versions, indent=1)}", "",
         "OVERVIEW (config.json keys beyond the usual ones; GGUF keys; GGUF tensors, blk.N = "
         "every block; shapes in GGML order ne0, ne1)"] + OVERVIEW + ["", "DETAILS"] + summary)
    SUMMARY.write_text(text + "\n")
    print(text)
    print(f"summary: {SUMMARY}")
    print(f"work dir (tokenizers, converter logs): {work}")


def readme(versions: dict[str, Any], models: list[dict[str, Any]]) -> str:
    rows = "\n".join(
        f"| `{m['name']}` | {m['hf_architecture']} | `{m['arch']}` | {m['vocab_size']} "
        f"({m['tokenizer']}) | {m['sliding_window'] or '-'} | "
        f"{'-' if m['gguf_has_window'] is None else str(m['gguf_has_window']).lower()} | "
        f"{'yes' if m['gguf_reference'] else '-'} | "
        f"{', '.join(m.get('extra_references') or []) or '-'} |"
        for m in models)
    vers = "\n".join(f"- {k}: `{v}`" for k, v in versions.items())
    later = [m for m in models if m.get("versions")]
    tf_versions = " and ".join(dict.fromkeys(
        [versions["transformers"]] + [m["versions"]["transformers"] for m in later
                                      if "transformers" in m["versions"]]))
    if later:
        vers += ("\n\nGenerated later with other versions (`versions` in their manifest entry; "
                 "the other models were not regenerated):\n\n" + "\n".join(
                     f"- `{m['name']}`: "
                     + ", ".join(f"{k} `{v}`" for k, v in m["versions"].items())
                     for m in later))
    return f"""# Conformance fixtures

Tiny random models whose expected outputs come from the reference implementation itself:
transformers on PyTorch (CPU, float32, eager attention). Generated by
`scripts/gen_conformance.py` -- do not edit by hand; re-run the script instead:

```
python3 scripts/gen_conformance.py --llamacpp /path/to/llama.cpp   # all models, ~2 min on 2 cores
python3 scripts/gen_conformance.py --only qwen3 gemma2             # some models (manifest merged)
```

It also writes `/tmp/conformance-summary.txt`: every model's config.json, tokenizer_config.json,
safetensors tensor list, and every GGUF's metadata keys and tensor names/types/shapes.

## Versions

{vers}

The GGUF files were made by that tree's `convert_hf_to_gguf.py`, run with the tree's own
`gguf-py` first on `PYTHONPATH`:

```
python3 convert_hf_to_gguf.py <name>/hf --outfile <name>/model.gguf --outtype bf16 \\
    --model-name ferrolm-conformance-<name>
```

(through a small wrapper, see "Workarounds").

## Models

| name | HF class | GGUF arch | vocab (tokenizer) | window | GGUF has window | gguf_reference | extra_references |
|---|---|---|---|---|---|---|---|
{rows}

Per-model details (head layout, RoPE variant, what is being exercised) are in `manifest.json`
(`notes`) and in each `expected.json`.

## Files

- `<name>/hf/`: `config.json`, `generation_config.json`, `model.safetensors` (bfloat16),
  `tokenizer.json`, `tokenizer_config.json`, and `tokenizer.model` for the SentencePiece ones.
- `<name>/model.gguf`: the converter's output with `--outtype bf16`: every matrix is the same
  bf16 value as in the safetensors; 1-D tensors (norms, biases) and the extra RoPE tensors are
  f32 (exact widenings of the bf16 values, except Gemma's norms, stored as `1 + w`).
- `<name>/expected.json`:
  - `prompts[i].tokens`: prompt token ids (begins with BOS when the tokenizer adds one);
  - `prompts[i].last_logits`: float32 logits of the last prompt position, the whole vocabulary,
    rounded to 7 significant digits;
  - `prompts[i].greedy`: the {N_NEW} tokens of `model.generate(do_sample=False,
    max_new_tokens={N_NEW})` (KV cache on; EOS does not stop it, and the script rejects prompts
    whose greedy tokens hit a special token), checked against the argmax of an uncached forward
    over the whole sequence;
  - `prompts[i].greedy_margins`: top-1 minus top-2 logit at each greedy step; prompts are
    redrawn until all are >= {MIN_MARGIN};
  - `prompts[i].router_min_gap` / `router_min_logit_gap` (mixture-of-experts models only): the
    smallest `(p_k - p_(k+1)) / p_1` / `l_k - l_(k+1)` over every position fed to the model
    (prompt and greedy tokens but the last) and every MoE layer, `p` / `l` the sorted router
    probabilities / logits, k = experts per token; prompts are redrawn until they are
    >= {MIN_ROUTER_GAP} / >= {MIN_ROUTER_LOGIT_GAP}, so that no expert choice is a near-tie (the
    logit bound is sized for engines with bf16 activations such as llama.cpp's CPU backend,
    whose rounding moves router logits by up to ~0.1 here (estimated by simulating it); with f32
    activations they are ~1e-5 off);
  - `prompts[i].prompt_fits_in_window` / `greedy_fits_in_window`: whether the sliding window
    (if any) cuts the prompt / the longest sequence that greedy decoding looks at
    (`len(tokens) + {N_NEW} - 1` positions);
  - `gguf_reference` (some models): what llama.cpp computes from the GGUF when that differs from
    what transformers computes from config.json -- same weights, config overridden by
    `config_overrides` (reason in `reason`), same prompts, `last_logits`, `greedy`,
    `greedy_margins`.
  - `extra_references` (phi3): further references with the same shape, e.g. `long_factors`.
- `manifest.json`: versions, the model list and per-model notes (`gguf_has_window`,
  `gguf_sliding_window`, `gguf_reference`, `router_min_gap` / `router_min_logit_gap` (MoE:
  minima over the prompts),
  `versions` (only where they differ from the top-level ones), ...).

## How the models are made

- Fixed seeds; every weight re-initialised with a wide spread: linear weights
  N(0, (1.5/sqrt(fan_in))^2), biases N(0, 0.2^2), embeddings N(0, 0.5^2) for untied models and
  smaller for tied ones (0.15, Gemma 0.03), norm weights with an effective multiplier
  (`w`, or `1 + w` for Gemma) of 1 + N(0, 0.15^2), the final norm's multiplier scaled by 3-10 in
  tied models to spread the logits again (see `randomize` in the script for why). Granite
  (embeddings multiplied by 6, logits divided by 4): embeddings N(0, 0.01^2) with a final-norm
  gain of 120 (tied `granite`, `granitemoeshared`), N(0, 0.1^2) with a gain of 12 (untied
  `granitemoe`).
- Mixture-of-experts models: transformers 5 holds each layer's experts as fused 3-D parameters
  (`mlp.experts.gate_up_proj` [E, 2*ff, d], `mlp.experts.down_proj` [E, d, ff]), randomised like
  linear weights (fan_in = last dim); router weights (`mlp.gate.weight`, [E, d]; Granite MoE:
  `block_sparse_moe.router.weight`) and Qwen2-MoE's `shared_expert_gate` ([1, d]) get
  N(0, (3/sqrt(d))^2) so that router probabilities are well separated. `save_pretrained` writes
  the experts back in the original checkpoint layout (one 2-D tensor per expert, see below;
  Granite MoE: its fused 3-D tensors).
- Saved with `save_pretrained` in bfloat16; the reference is computed after loading that folder
  back with `dtype=torch.float32, attn_implementation="eager"` (MoE models also with
  `experts_implementation="eager"`, the plain per-expert loop), so from exactly the stored values.
- Tokenizers are tiny and trained on a few paragraphs of text: SentencePiece BPE with byte
  fallback, vocab 512 (`spm-llama`: `<unk>`=0, `<s>`=1, `</s>`=2, dummy prefix; `spm-phi3`: the
  same with 508 pieces plus `<|endoftext|>` (EOS), `<|assistant|>`, `<|end|>`, `<|user|>` --
  llama.cpp insists on `<|endoftext|>` when general.name contains "phi3"; `spm-gemma`:
  `<pad>`=0, `<eos>`=1, `<bos>`=2, `<unk>`=3, `<mask>`=4, no dummy prefix), converted to
  tokenizer.json by transformers; or byte-level BPE built with `tokenizers`, vocab 384 with the
  special tokens last (`bpe-llama3`: Llama 3 split regex, `ignore_merges`, BOS
  `<|begin_of_text|>` added; `bpe-qwen2`: Qwen2 split regex, no BOS). The model vocabulary size
  equals the tokenizer's.

## Things to know when reading these files

- transformers 5 writes `rope_parameters` (with `rope_theta` and `rope_type` inside) instead of
  `rope_theta` / `rope_scaling`; for Gemma 3 it is keyed by layer type (`full_attention`,
  `sliding_attention`), and `layer_types` lists each layer's kind (also for Gemma 2). Phi-3 has
  `original_max_position_embeddings` both at the top level and inside `rope_parameters`.
- The converter permutes the rows of `attn_q`/`attn_k` for arch `llama` (HF's half-split
  "rotate_half" RoPE becomes GGML's adjacent-pair RoPE); qwen2/qwen3/phi3/gemma* keep HF's row
  order and llama.cpp applies NeoX-style (half-split) RoPE to them.
- Llama 3 RoPE scaling is not a metadata key: it is the f32 tensor `rope_freqs.weight`
  (head_dim/2 divisors of the base frequencies). Phi-3 LongRoPE is `rope_factors_short.weight`
  / `rope_factors_long.weight` plus `phi3.rope.scaling.attn_factor`; transformers uses the short
  factors while the sequence is <= `original_max_position_embeddings` (1024; all fixture
  sequences are shorter), llama.cpp chooses by context size (long when n_ctx > 1024; note that
  llama.cpp rounds n_ctx up to at least 256). `prompts` are computed with the short factors,
  `extra_references.long_factors` with the long ones.
- Tied models have no `output.weight` in the GGUF (and no `lm_head.weight` in the safetensors).
- `mistral`: the converter writes no sliding window for MistralForCausalLM (arch `llama`); see
  `gguf_reference`, or compare only prompts that fit in the window.
- `gemma2`, `gemma3`: `query_pre_attn_scalar` != head_dim in config.json, but a GGUF cannot say
  so (llama.cpp uses 1/sqrt(head_dim) except for the 27B models); see `gguf_reference`.
- `gemma3`: the converter writes `gemma3.attention.sliding_window` but no pattern; llama.cpp
  assumes 5 sliding layers then 1 global, which is why this model has 6 layers (transformers'
  default `layer_types` agree). Sliding layers use `rope.freq_base_swa` (1e4), the global one
  `rope.freq_base` (1e6).
- `gemma4`: the converter (and transformers) need `global_head_dim` in config.json, which
  transformers 5.24 does not write back (see the script's workarounds). llama.cpp picks the
  layer a KV-shared layer reads as the last unshared layer (global) or the one before it
  (sliding), transformers as the last unshared layer of the same kind: the same layers whenever
  the last unshared layer is global and the one before it sliding, as here.
- Sliding window semantics (transformers and llama.cpp agree): query position i attends to key
  positions j with i - window < j <= i.
- Mixture-of-experts safetensors (except Granite MoE's, see below) hold one 2-D tensor per
  expert, in the original checkpoints' names:
  `model.layers.N.mlp.experts.E.{{gate,up,down}}_proj.weight` (Qwen2-MoE, Qwen3-MoE, OLMoE;
  router `model.layers.N.mlp.gate.weight` [E, d]) and, for Mixtral,
  `model.layers.N.block_sparse_moe.experts.E.{{w1,w2,w3}}.weight` (w1 = gate, w3 = up, w2 =
  down; router `model.layers.N.block_sparse_moe.gate.weight`). The GGUF stacks them per layer:
  `blk.N.ffn_{{gate,up}}_exps.weight` ne [d, ff, E], `blk.N.ffn_down_exps.weight` ne [ff, d, E]
  (bf16), router `blk.N.ffn_gate_inp.weight` ne [d, E] in f32 (exact widening). Routing in all
  of them: softmax over all E router logits, top-k; `qwen3moe` (norm_topk_prob true), `mixtral`
  and the Granite MoE models renormalise the k weights to sum 1, `qwen2moe` and `olmoe`
  (norm_topk_prob false) do not; no GGUF key says which -- llama.cpp hard-codes it per
  architecture.
- `qwen3moe`: transformers 5 writes the expert count as `num_local_experts` in config.json (real
  Qwen3-MoE checkpoints say `num_experts`); `intermediate_size` is unused (every layer sparse) but
  the converter still writes it as `feed_forward_length`; the expert width is
  `expert_feed_forward_length` (`moe_intermediate_size`).
- `qwen2moe`: the shared expert (`blk.N.ffn_{{gate,up,down}}_shexp`, width
  `expert_shared_feed_forward_length`) is added after being scaled by
  sigmoid(`ffn_gate_inp_shexp` . x) (ne [d, 1], f32).
- `mixtral`: converted as GGUF arch `llama` (with `llama.expert_count` /
  `llama.expert_used_count`; the expert width is `llama.feed_forward_length`), q/k rows permuted
  like Llama; no sliding window (None in config.json, none in the GGUF).
- `olmoe`: `q_norm` / `k_norm` are RMSNorms over the whole q (n_head*head_dim) / k
  (n_kv_head*head_dim) projections, before the head split and RoPE (Qwen3 normalises per head);
  MHA because llama.cpp creates `attn_k_norm` with n_embd entries; the converter hard-codes
  `olmoe.attention.layer_norm_rms_epsilon` = 1e-5 (equal to config.json's here).
- `smollm3`: GGUF arch `smollm3` (Llama layout, q/k permuted). config.json's `no_rope_layers`
  is a per-layer use-RoPE flag ([1, 1, 1, 0]: layer 3 has no RoPE); the GGUF has no key for it
  and llama.cpp hard-codes "no RoPE when (layer + 1) % 4 == 0", which is the same pattern.
- Granite (`granite`, `granitemoe`, `granitemoeshared`): four scalars, in config.json and as
  GGUF keys: `embedding_multiplier` = `{{arch}}.embedding_scale` (embeddings multiplied after
  the lookup, before layer 0), `attention_multiplier` = `{{arch}}.attention.scale` (the score
  scale, used INSTEAD of 1/sqrt(head_dim)), `residual_multiplier` = `{{arch}}.residual_scale`
  (attention output and FFN/MoE output each multiplied by it before the residual add; the GGUF
  holds the f32 0.2199999988), `logits_scaling` = `{{arch}}.logit_scale` (logits DIVIDED by
  it). The converter writes a key only when the multiplier is truthy, and ignores `head_dim`
  (head_dim must be hidden/heads). q/k permuted like Llama (`granite`/`granitemoe` are Llama
  layout in GGML).
- `granitemoe` / `granitemoeshared`: both GGUF arch `granitemoe`. The safetensors keep Granite's
  fused layout: `model.layers.N.block_sparse_moe.input_linear.weight` [E, 2*ff, d] (per expert
  [gate; up], gate rows first), `block_sparse_moe.output_linear.weight` [E, d, ff] (down),
  router `block_sparse_moe.router.layer.weight` [E, d]; the shared expert (`granitemoeshared`)
  is `model.layers.N.shared_mlp.input_linear.weight` [2*ff_sh, d] ([gate; up]) and
  `shared_mlp.output_linear.weight` [d, ff_sh]. The converter splits both fused tensors:
  `blk.N.ffn_{{gate,up}}_exps.weight` ne [d, ff, E] and `blk.N.ffn_{{gate,up}}_shexp.weight`
  ne [d, ff_sh], plus `granitemoe.expert_shared_feed_forward_length` (its presence is what
  makes llama.cpp build the shared expert). Routing: transformers takes the top-k router logits
  and softmaxes only those (= softmax over all E, then renormalised); the shared expert's output
  is added ungated to the routed experts' output, before the residual multiplier.

## Cross-check with llama.cpp

`scripts/check_conformance_llamacpp.py` runs every `model.gguf` with llama-cpp-python (same
llama.cpp version, CPU) against `gguf_reference` (else `prompts`) and the `extra_references` that
name a `llamacpp_n_ctx`, and compares the tokenizers (GGUF vocab vs tokenizer.json) on a sample
text. At generation time all models matched: last-position logits within 0.02-0.16 absolute
(1.3-7.4 % of the logits' standard deviation -- llama.cpp's CPU backend rounds activations to
bf16 before bf16 dot products, and tabulates GELU in f16), the same argmax, the same greedy
tokens except two late steps whose reference margin (0.04, 0.013) is below that noise, and
identical tokenizations. An engine that multiplies the bf16 weights with f32 activations should
be within ~1e-4 of the reference (a float64 recomputation of the references differs from them by
at most 2e-5), where the {MIN_MARGIN} minimum greedy margin is ample.

The models added later (`qwen3moe`, `qwen2moe`, `mixtral`, `olmoe`, `smollm3`; same llama.cpp)
also matched: logits within 0.06-0.20 absolute (1.6-4.8 % of the standard deviation), the same
argmax, the same greedy tokens except two steps whose reference margin (0.109 for `qwen2moe`,
0.074 for `smollm3`) is below that noise, identical tokenizations; and a float64
re-implementation that reads only `model.gguf` reproduces their `last_logits` within 2.1e-5 and
their greedy tokens exactly. With only the {MIN_ROUTER_GAP} relative-probability bound, llama.cpp
picked another expert at one position (router logit gap 0.008) and missed a `qwen2moe` reference
by 1.4 in the logits; hence the {MIN_ROUTER_LOGIT_GAP} router-logit bound.

The Granite models (`granite`, `granitemoe`, `granitemoeshared`; same llama.cpp) matched too:
logits within 0.018-0.090 absolute (0.7-3.8 % of the standard deviation), the same greedy
tokens at every step, identical tokenizations.

## Workarounds

- The converter identifies BPE pre-tokenizers by hashing the token ids of a fixed text
  (`TextModel.get_vocab_base_pre`) and refuses unknown hashes. The tiny byte-level BPE
  vocabularies are unknown, so the script runs the converter through a wrapper that, only when
  the original raises NotImplementedError, returns the llama.cpp pre-tokenizer with the same
  split regex (`llama-bpe` for the `bpe-llama3` models, `qwen2` for the `bpe-qwen2` ones).
  Nothing else in the converter is changed; it otherwise works with transformers
  {tf_versions} as is.
- transformers 5 needs `protobuf` to turn a SentencePiece model into a tokenizer.json.
- Benign converter warnings: "Unknown RoPE type: default", "Unknown separator token ... in
  TemplateProcessing<pair>", Gemma's "No handler for special token type prefix/suffix/...",
  Gemma 3's and OLMoE's "Duplicated key name ..., overwriting" (those classes set some keys twice
  with the same values). transformers warns that Phi-3's `rope_parameters` holds
  `original_max_position_embeddings` instead of `factor`; the scaling factor it derives
  (4096/1024 = 4) is the one intended and the one the converter uses.
"""


def _gguf_py_version(llamacpp: Path) -> str:
    for line in (llamacpp / "gguf-py" / "pyproject.toml").read_text().splitlines():
        if line.startswith("version"):
            return line.split("=")[1].strip().strip('"')
    return "?"


def _ggml_version(llamacpp: Path) -> str:
    parts = {}
    for line in (llamacpp / "ggml" / "CMakeLists.txt").read_text().splitlines():
        for k in ("MAJOR", "MINOR", "PATCH"):
            if line.startswith(f"set(GGML_VERSION_{k} "):
                parts[k] = line.split()[1].rstrip(")")
    return ".".join(parts.get(k, "?") for k in ("MAJOR", "MINOR", "PATCH"))


if __name__ == "__main__":
    main()
