"""Generate ferrolm's encoder fixtures: tiny random BERT, Nomic BERT and Jina BERT v2 embedding
models, with reference embeddings.

- `bert`: a transformers `BertModel` (hidden 64, 2 layers, 4 heads, FFN 128, 64 positions,
  `hidden_act="gelu_new"`, the tanh GELU that llama.cpp computes for every BERT) with a WordPiece
  tokenizer of ~200 pieces, weights re-drawn wide enough that attention is not uniform, saved as
  float32 safetensors with a sentence-transformers mean-pooling config, converted by llama.cpp's
  own `convert_hf_to_gguf.py --outtype f32` (the converter writes `bert.pooling_type` = mean).
  Reference: transformers in float32 (last hidden states, then mean and CLS pooling), and
  llama.cpp's embeddings of the same GGUF (llama-cpp-python, mean pooling).
- `nomic-bert` and `jina-bert-v2`: transformers has neither (both are remote code on the Hub), so
  their GGUFs are written directly with llama.cpp's `gguf-py` (llama.cpp's tensor names and keys,
  the bert fixture's vocabulary, random f32 weights), and the reference is llama.cpp's embeddings
  alone. Nomic: fused QKV, NeoX RoPE (base 1000), SwiGLU, no biases. Jina: ALiBi, LayerNorms of
  Q and K, GEGLU with gate and up fused in `ffn_up` (gate rows first), biases.
- `nomic-bert-moe` (nomic-embed-text-v2-moe's architecture, also remote code): written the same
  way, with the reference from llama.cpp alone: Nomic's RoPE and fused QKV with biases, BERT's
  GELU feed-forward with biases in block 0, and in block 1 (`moe_every_n_layers` 2) a mixture of
  4 GELU experts, top 2 by softmax probability, not renormalised. Generated on its own with
  `--only nomic-bert-moe` (its own random stream: the other fixtures stay as they are).

For every model the texts are tokenized by the GGUF's own tokenizer in llama.cpp (and, for bert,
checked equal to the HF tokenizer's ids), and expected.json records per text the token ids and
the mean- and CLS-pooled embeddings (not normalised).

- `qwen3-last`: a decoder's last-token pooling (Qwen3-Embedding's) on the conformance suite's tiny
  Qwen 3 (its GGUF and folder are not copied): transformers' final-norm hidden state of the last
  token, and llama.cpp's.

Output: crates/ferrolm/tests/fixtures/encoders/<name>/{model.gguf,expected.json}, bert/hf/
(the Hugging Face folder the bert GGUF was converted from) and qwen3-last/expected.json.

Usage: /tmp/tvenv/bin/python scripts/gen_encoder_fixture.py [--llamacpp DIR]
(DIR: a llama.cpp source tree with convert_hf_to_gguf.py, conversion/ and gguf-py/; default
$LLAMACPP_DIR or the tree vendored in llama-cpp-python 0.3.36's sdist under /tmp/lcp.)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen_conformance as gc  # noqa: E402  (conversion wrapper)

ROOT = gc.ROOT
OUT = ROOT / "crates" / "ferrolm" / "tests" / "fixtures" / "encoders"
DEFAULT_LLAMACPP = Path(os.environ.get(
    "LLAMACPP_DIR", "/tmp/lcp/llama_cpp_python-0.3.36/vendor/llama.cpp"))

D, LAYERS, HEADS, FF, POSITIONS = 64, 2, 4, 128, 64
SEED = 777
MOE_EXPERTS = 4

WORDS = """the a an of to in on at and or is was be it this that with for as by from cat dog
mat sat ran river mill bread market morning town road quick brown fox jump lazy hello world
engine model token text word number search query document embed retrieval vector small large
city water winter summer children village stone bridge apple pear egg""".split()
SUFFIXES = ["s", "ed", "ing", "er", "ly", "es", "ding", "tion"]

TEXTS = [
    "hello world",
    "The quick brown fox jumps over the lazy dog.",
    "A small engine embeds text for search: query, document, vector!",
    "Children ran to the river in winter; the water was stone cold.",
    "UNKNOWN words like zyxq and Ωmega, plus 42 numbers and café.",
    "market",
]


def wordpiece_vocab() -> list[str]:
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    chars = list("abcdefghijklmnopqrstuvwxyz0123456789.,;:!?'\"-()")
    pieces = special + chars + ["##" + c for c in "abcdefghijklmnopqrstuvwxyz0123456789"]
    pieces += WORDS + ["##" + s for s in SUFFIXES]
    seen: set[str] = set()
    return [p for p in pieces if not (p in seen or seen.add(p))]


def widen(model: torch.nn.Module) -> None:
    """Re-draws a BERT's weights wide enough that attention is not uniform: LayerNorm scales
    1 + N(0, 0.2^2), biases N(0, 0.1^2), everything else N(0, 0.3^2) (torch's generator)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
            else:
                p.copy_(0.3 * torch.randn_like(p))


def make_bert(work: Path) -> Path:
    from transformers import BertConfig, BertModel, BertTokenizerFast

    hf = work / "bert-tiny"
    hf.mkdir()
    vocab = wordpiece_vocab()
    (hf / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tok = BertTokenizerFast(vocab={p: i for i, p in enumerate(vocab)}, do_lower_case=True)
    tok.save_pretrained(hf)
    cfg = BertConfig(vocab_size=len(vocab), hidden_size=D, num_hidden_layers=LAYERS,
                     num_attention_heads=HEADS, intermediate_size=FF,
                     max_position_embeddings=POSITIONS, type_vocab_size=2,
                     hidden_act="gelu_new", layer_norm_eps=1e-12)
    torch.manual_seed(SEED)
    model = BertModel(cfg, add_pooling_layer=False).eval()
    widen(model)
    model.save_pretrained(hf, safe_serialization=True)
    (hf / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]))
    (hf / "1_Pooling").mkdir()
    (hf / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": D, "pooling_mode_mean_tokens": True,
         "pooling_mode_cls_token": False}))
    return hf


def hf_reference(hf: Path) -> list[dict[str, Any]]:
    from transformers import BertModel, BertTokenizerFast

    tok = BertTokenizerFast.from_pretrained(hf)
    model = BertModel.from_pretrained(hf, torch_dtype=torch.float32, attn_implementation="eager").eval()
    out = []
    for text in TEXTS:
        ids = tok(text)["input_ids"]
        with torch.no_grad():
            h = model(torch.tensor([ids])).last_hidden_state[0].double().numpy()
        out.append({"text": text, "tokens": ids, "mean": h.mean(0).tolist(), "cls": h[0].tolist()})
    return out


def llamacpp_reference(gguf_path: Path, pooling: str) -> list[dict[str, Any]]:
    import llama_cpp

    ptype = {"mean": llama_cpp.LLAMA_POOLING_TYPE_MEAN, "cls": llama_cpp.LLAMA_POOLING_TYPE_CLS}[pooling]
    llm = llama_cpp.Llama(model_path=str(gguf_path), embedding=True, pooling_type=ptype, n_ctx=POSITIONS,
                          n_batch=POSITIONS, n_ubatch=POSITIONS, n_threads=1, n_threads_batch=1,
                          verbose=False)
    out = []
    for text in TEXTS:
        toks = llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)
        emb = llm.embed(text, normalize=False)
        out.append({"tokens": toks, pooling: [float(x) for x in emb]})
    del llm
    return out


def bert_vocab_fields(gguf_path: Path) -> dict[str, Any]:
    import gguf

    r = gguf.GGUFReader(gguf_path)
    return {f.name: f for f in r.fields.values() if f.name.startswith("tokenizer.")}


def write_synthetic(path: Path, arch: str, bert_gguf: Path, rng: np.random.Generator) -> None:
    """A random nomic-bert, nomic-bert-moe or jina-bert-v2 GGUF with the bert fixture's
    vocabulary."""
    import gguf

    reader = gguf.GGUFReader(bert_gguf)
    tokens = [bytes(reader.fields["tokenizer.ggml.tokens"].parts[i]).decode()
              for i in reader.fields["tokenizer.ggml.tokens"].data]
    toktypes = [int(reader.fields["tokenizer.ggml.token_type"].parts[i][0])
                for i in reader.fields["tokenizer.ggml.token_type"].data]
    w = gguf.GGUFWriter(path, arch)
    w.add_name(f"ferrolm-encoder-{arch}")
    w.add_context_length(POSITIONS)
    w.add_embedding_length(D)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(FF)
    w.add_head_count(HEADS)
    w.add_layer_norm_eps(1e-12)
    w.add_causal_attention(False)
    w.add_pooling_type(gguf.PoolingType.MEAN)
    w.add_token_type_count(2)
    if arch in ("nomic-bert", "nomic-bert-moe"):
        w.add_rope_freq_base(1000.0)
    if arch == "nomic-bert-moe":
        w.add_expert_count(MOE_EXPERTS)
        w.add_expert_used_count(2)
        w.add_moe_every_n_layers(2)
    w.add_tokenizer_model("bert")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(toktypes)
    # Special token ids (BOS = [CLS], EOS = [SEP], unknown, padding, mask…) as the converter wrote them.
    for name, field in reader.fields.items():
        if name.startswith("tokenizer.ggml.") and name.endswith("_token_id"):
            w.add_uint32(name, int(field.parts[-1][0]))
        elif name.startswith("tokenizer.ggml.add_") and name.endswith("_token"):
            w.add_bool(name, bool(field.parts[-1][0]))

    def t(name: str, *shape: int, scale: float = 0.3, around: float = 0.0) -> None:
        # gguf-py takes numpy shapes (outermost first): a [rows, cols] matrix is (rows, cols).
        w.add_tensor(name, (around + scale * rng.standard_normal(shape)).astype(np.float32))

    n_vocab = len(tokens)
    t("token_embd.weight", n_vocab, D)
    t("token_types.weight", 2, D)
    t("token_embd_norm.weight", D, scale=0.2, around=1.0)
    t("token_embd_norm.bias", D, scale=0.1)
    for i in range(LAYERS):
        b = f"blk.{i}"
        if arch == "nomic-bert":
            t(f"{b}.attn_qkv.weight", 3 * D, D)
            t(f"{b}.attn_output.weight", D, D)
            t(f"{b}.ffn_gate.weight", FF, D)
            t(f"{b}.ffn_up.weight", FF, D)
            t(f"{b}.ffn_down.weight", D, FF)
        elif arch == "nomic-bert-moe":
            t(f"{b}.attn_qkv.weight", 3 * D, D)
            t(f"{b}.attn_qkv.bias", 3 * D, scale=0.1)
            t(f"{b}.attn_output.weight", D, D)
            t(f"{b}.attn_output.bias", D, scale=0.1)
            if i % 2 == 1:
                # a wide router, so that no top-2 choice is a near tie
                t(f"{b}.ffn_gate_inp.weight", MOE_EXPERTS, D, scale=1.0)
                t(f"{b}.ffn_up_exps.weight", MOE_EXPERTS, FF, D)
                t(f"{b}.ffn_down_exps.weight", MOE_EXPERTS, D, FF)
            else:
                t(f"{b}.ffn_up.weight", FF, D)
                t(f"{b}.ffn_up.bias", FF, scale=0.1)
                t(f"{b}.ffn_down.weight", D, FF)
                t(f"{b}.ffn_down.bias", D, scale=0.1)
        else:
            for p in ("attn_q", "attn_k", "attn_v"):
                t(f"{b}.{p}.weight", D, D)
                t(f"{b}.{p}.bias", D, scale=0.1)
            for p in ("attn_q_norm", "attn_k_norm"):
                t(f"{b}.{p}.weight", D, scale=0.2, around=1.0)
                t(f"{b}.{p}.bias", D, scale=0.1)
            t(f"{b}.attn_output.weight", D, D)
            t(f"{b}.attn_output.bias", D, scale=0.1)
            t(f"{b}.ffn_up.weight", 2 * FF, D)
            t(f"{b}.ffn_down.weight", D, FF)
            t(f"{b}.ffn_down.bias", D, scale=0.1)
        for p in ("attn_output_norm", "layer_output_norm"):
            t(f"{b}.{p}.weight", D, scale=0.2, around=1.0)
            t(f"{b}.{p}.bias", D, scale=0.1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llamacpp", type=Path, default=DEFAULT_LLAMACPP)
    ap.add_argument("--only", choices=["nomic-bert-moe"],
                    help="make only this fixture (from the committed bert fixture's vocabulary)")
    args = ap.parse_args()
    llamacpp: Path = args.llamacpp.resolve()
    sys.path.insert(0, str(llamacpp / "gguf-py"))
    OUT.mkdir(parents=True, exist_ok=True)
    if args.only:
        synthetic_fixture(args.only, OUT / "bert" / "model.gguf", np.random.default_rng(SEED + 1))
        return
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        hf = make_bert(work)
        bert_dir = OUT / "bert"
        bert_dir.mkdir(exist_ok=True)
        gguf_path = bert_dir / "model.gguf"
        env = dict(os.environ, LLAMACPP_DIR=str(llamacpp), FERROLM_BPE_PRE="bert-bge",
                   PYTHONPATH=os.pathsep.join([str(llamacpp / "gguf-py"), str(llamacpp)]))
        import subprocess
        subprocess.run([sys.executable, "-c", gc.CONVERT_WRAPPER, str(hf), "--outfile", str(gguf_path),
                        "--outtype", "f32"], env=env, check=True, stdout=subprocess.DEVNULL)
        ref = hf_reference(hf)
        lc = llamacpp_reference(gguf_path, "mean")
        for r, l in zip(ref, lc):
            r["llamacpp_tokens"] = l["tokens"]
            r["llamacpp_mean"] = l["mean"]
        write_expected(bert_dir, "bert", "transformers 5 BertModel (float32, eager) and llama.cpp", ref)
        rng = np.random.default_rng(SEED)
        for arch in ("nomic-bert", "jina-bert-v2"):
            synthetic_fixture(arch, gguf_path, rng)
        qwen3_last_token()
        # The folder itself, for loading a Hugging Face folder directly (~350 KB).
        shutil.rmtree(bert_dir / "hf", ignore_errors=True)
        shutil.copytree(hf, bert_dir / "hf")


def synthetic_fixture(arch: str, bert_gguf: Path, rng: np.random.Generator) -> None:
    """A random `arch` GGUF and llama.cpp's mean and CLS embeddings of the texts."""
    d = OUT / arch
    d.mkdir(exist_ok=True)
    write_synthetic(d / "model.gguf", arch, bert_gguf, rng)
    mean = llamacpp_reference(d / "model.gguf", "mean")
    cls = llamacpp_reference(d / "model.gguf", "cls")
    recs = [{"text": t, "tokens": m["tokens"], "llamacpp_tokens": m["tokens"], "llamacpp_mean": m["mean"],
             "llamacpp_cls": c["cls"]} for t, m, c in zip(TEXTS, mean, cls)]
    write_expected(d, arch, "llama.cpp only (transformers has no built-in class)", recs)


def qwen3_last_token() -> None:
    """Last-token pooling of a decoder (Qwen3-Embedding's pooling) on the conformance suite's tiny
    Qwen 3: transformers' final-norm hidden state of each text's last token (the text tokenized
    as the model adds special tokens), and llama.cpp's on the suite's GGUF of the same weights."""
    import llama_cpp
    from transformers import AutoModel, AutoTokenizer

    hf = ROOT / "crates" / "ferrolm" / "tests" / "fixtures" / "conformance" / "qwen3" / "hf"
    tok = AutoTokenizer.from_pretrained(hf)
    model = AutoModel.from_pretrained(hf, dtype=torch.float32, attn_implementation="eager").eval()
    llm = llama_cpp.Llama(model_path=str(hf.parent / "model.gguf"), embedding=True,
                          pooling_type=llama_cpp.LLAMA_POOLING_TYPE_LAST, n_ctx=128, n_batch=128,
                          n_ubatch=128, n_threads=1, n_threads_batch=1, verbose=False)
    records = []
    for text in TEXTS:
        ids = tok(text)["input_ids"]
        with torch.no_grad():
            h = model(torch.tensor([ids])).last_hidden_state[0, -1].double().numpy()
        toks = llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)
        records.append({"text": text, "tokens": ids, "last": h.tolist(), "llamacpp_tokens": toks,
                        "llamacpp_last": [float(x) for x in llm.embed(text, normalize=False)]})
    del llm
    d = OUT / "qwen3-last"
    d.mkdir(exist_ok=True)
    write_expected(d, "qwen3", "transformers Qwen3Model (float32, eager) and llama.cpp, last-token pooling",
                   records)


def write_expected(d: Path, arch: str, source: str, records: list[dict[str, Any]]) -> None:
    rnd = lambda v: [float(f"{x:.7g}") for x in v]  # noqa: E731
    for r in records:
        for k in ("mean", "cls", "last", "llamacpp_mean", "llamacpp_cls", "llamacpp_last"):
            if k in r:
                r[k] = rnd(r[k])
    obj = {"arch": arch, "reference": source, "texts": records}
    (d / "expected.json").write_text(json.dumps(obj, separators=(",", ":"), ensure_ascii=False) + "\n")
    print(f"{arch}: {len(records)} texts -> {d}")


if __name__ == "__main__":
    main()
