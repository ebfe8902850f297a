#!/usr/bin/env python3
"""Tiny random cross-encoder rerankers with their reference scores from transformers and from
llama.cpp: a BERT one (ms-marco MiniLM shape) and an XLM-RoBERTa one (bge-reranker shape).

The model is transformers' `BertForSequenceClassification` with one label (the encoder fixture's
WordPiece vocabulary and sizes, `scripts/gen_encoder_fixture.py`), weights drawn wide, converted
by llama.cpp's own `convert_hf_to_gguf.py --outtype f32` with the head stored under RoBERTa's
names (see `make_model`): the pooler's dense layer becomes `cls` (followed by tanh), the
classifier `cls.output`, and the file says rank pooling.

Each (query, document) pair is laid out as llama.cpp's server lays out a pair for a model
without a rerank template (`[BOS] query [EOS] [SEP] document [EOS]`, each where the vocabulary
adds it: `[CLS] query [SEP] document` for BERT), with llama.cpp's tokenization; every token has
type 0, as llama.cpp runs it. Recorded per pair: the tokens, transformers' logit for those ids
(float32, eager attention) and llama.cpp's score (llama-cpp-python, rank pooling).

The XLM-RoBERTa one is transformers' `XLMRobertaForSequenceClassification` (RoBERTa's head:
dense, tanh, out_proj on the first token; positions counted from the padding id + 1, which
llama.cpp's converter cuts off the table) with a unigram SentencePiece vocabulary trained here on
data/alice29.txt (`sentencepiece.bpe.model`, as XLM-R ships it), so the GGUF has llama.cpp's
unigram ("t5") tokenizer and pairs read `<s> query </s></s> document </s>`.

Output: crates/ferrolm/tests/fixtures/rerank/{bert-cross,xlmr-cross}/{model.gguf,expected.json}

Usage: python scripts/gen_cross_encoder_fixture.py [--llamacpp DIR] [--only bert|xlmr]
(a python with torch, transformers, sentencepiece, protobuf and llama_cpp)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen_conformance as gc  # noqa: E402
import gen_encoder_fixture as enc  # noqa: E402

FIXTURES = gc.ROOT / "crates" / "ferrolm" / "tests" / "fixtures" / "rerank"
SEED = 4242
# Positions: llama.cpp's server test suite ranks paragraphs of ~100 tokens on this model
# (scripts/server_tests/llama_server_shim.py), more than the other encoder fixtures' 64.
POSITIONS = 512
QUERIES = [
    ("quick brown fox", ["the quick brown fox jumps", "a river in winter", "market town road", "fox"]),
    ("search query document", ["embed the document for retrieval", "children ran", "hello world"]),
]


def make_xlmr(work: Path):
    """A random XLM-RoBERTa cross-encoder with a trained unigram vocabulary."""
    import sentencepiece as spm
    from transformers import XLMRobertaConfig, XLMRobertaForSequenceClassification, XLMRobertaTokenizer

    hf = work / "xlmr-cross"
    hf.mkdir()
    spm.SentencePieceTrainer.train(
        input=str(gc.ROOT / "data" / "alice29.txt"), model_prefix=str(work / "spm"), vocab_size=500,
        model_type="unigram", character_coverage=1.0, bos_id=1, eos_id=2, unk_id=0, pad_id=-1,
        num_threads=1, minloglevel=2)
    XLMRobertaTokenizer(vocab_file=str(work / "spm.model")).save_pretrained(hf)
    # llama.cpp's converter reads XLM-R's SentencePiece file (transformers 5 writes tokenizer.json).
    shutil.copy(work / "spm.model", hf / "sentencepiece.bpe.model")
    # fairseq's ids, as XLM-R numbers them: <s> <pad> </s> <unk>, then the pieces after <unk>.
    n_vocab = spm.SentencePieceProcessor(model_file=str(work / "spm.model")).vocab_size() + 1
    cfg = XLMRobertaConfig(vocab_size=n_vocab, hidden_size=enc.D, num_hidden_layers=enc.LAYERS,
                           num_attention_heads=enc.HEADS, intermediate_size=enc.FF,
                           max_position_embeddings=POSITIONS + 2, type_vocab_size=1, num_labels=1,
                           pad_token_id=1, bos_token_id=0, eos_token_id=2, hidden_act="gelu_new",
                           layer_norm_eps=1e-5)
    torch.manual_seed(SEED)
    cfg._attn_implementation = "eager"
    model = XLMRobertaForSequenceClassification(cfg).eval()
    enc.widen(model)
    model.save_pretrained(hf, safe_serialization=True)
    return model, hf


def make_bert(work: Path):
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    hf = work / "bert-cross"
    hf.mkdir()
    vocab = enc.wordpiece_vocab()
    (hf / "vocab.txt").write_text("\n".join(vocab) + "\n")
    BertTokenizerFast(vocab={p: i for i, p in enumerate(vocab)}, do_lower_case=True).save_pretrained(hf)
    cfg = BertConfig(vocab_size=len(vocab), hidden_size=enc.D, num_hidden_layers=enc.LAYERS,
                     num_attention_heads=enc.HEADS, intermediate_size=enc.FF,
                     max_position_embeddings=POSITIONS, type_vocab_size=2, num_labels=1,
                     hidden_act="gelu_new", layer_norm_eps=1e-12)
    torch.manual_seed(SEED)
    cfg._attn_implementation = "eager"
    model = BertForSequenceClassification(cfg).eval()
    enc.widen(model)
    model.save_pretrained(hf, safe_serialization=True)
    # llama.cpp's converter drops BERT's pooler ("only using BERT for embeddings"), so a
    # BertForSequenceClassification GGUF would score without it. Stored under RoBERTa's head
    # names instead (pooler -> classifier.dense, classifier -> classifier.out_proj), the converter
    # keeps it as `cls` + `cls.output`, which llama.cpp runs as dense, tanh, projection: the
    # same function as BERT's pooler and classifier, so transformers' logits stay the reference.
    from safetensors.torch import load_file, save_file

    path = hf / "model.safetensors"
    renames = {"bert.pooler.dense.weight": "classifier.dense.weight",
               "bert.pooler.dense.bias": "classifier.dense.bias",
               "classifier.weight": "classifier.out_proj.weight",
               "classifier.bias": "classifier.out_proj.bias"}
    tensors = {renames.get(k, k): v for k, v in load_file(path).items()}
    assert set(renames.values()) <= set(tensors), sorted(tensors)
    save_file(tensors, path, metadata={"format": "pt"})
    return model, hf


def pair_tokens(llm, add: dict[str, bool], ids: dict[str, int | None], query: str, doc: str) -> list[int]:
    """llama.cpp's server layout of a pair without a rerank template."""
    tok = lambda t: llm.tokenize(t.encode("utf-8"), add_bos=False, special=False)  # noqa: E731
    eos = ids["eos"] if ids["eos"] is not None else ids["sep"]
    out = [ids["bos"]] if add["bos"] else []
    out += tok(query)
    out += [eos] if add["eos"] else []
    out += [ids["sep"]] if add["sep"] else []
    out += tok(doc)
    out += [eos] if add["eos"] else []
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llamacpp", type=Path, default=enc.DEFAULT_LLAMACPP)
    ap.add_argument("--only", choices=["bert", "xlmr"])
    args = ap.parse_args()
    for kind in ["bert", "xlmr"]:
        if args.only in (None, kind):
            generate(kind, args.llamacpp.resolve())


def generate(kind: str, llamacpp: Path) -> None:
    import llama_cpp

    out = FIXTURES / f"{kind}-cross"
    out.mkdir(parents=True, exist_ok=True)
    gguf_path = out / "model.gguf"
    with tempfile.TemporaryDirectory() as tmp:
        model, hf = (make_bert if kind == "bert" else make_xlmr)(Path(tmp))
        env = dict(os.environ, LLAMACPP_DIR=str(llamacpp), FERROLM_BPE_PRE="bert-bge",
                   PYTHONPATH=os.pathsep.join([str(llamacpp / "gguf-py"), str(llamacpp)]))
        subprocess.run([sys.executable, "-c", gc.CONVERT_WRAPPER, str(hf), "--outfile", str(gguf_path),
                        "--outtype", "f32"], env=env, check=True, stdout=subprocess.DEVNULL)
        llm = llama_cpp.Llama(model_path=str(gguf_path), embedding=True,
                              pooling_type=llama_cpp.LLAMA_POOLING_TYPE_RANK, n_ctx=enc.POSITIONS,
                              n_batch=enc.POSITIONS, n_ubatch=enc.POSITIONS, n_threads=1,
                              n_threads_batch=1, verbose=False)
        v = llama_cpp.llama_model_get_vocab(llm.model)
        add = {"bos": bool(llama_cpp.llama_vocab_get_add_bos(v)),
               "eos": bool(llama_cpp.llama_vocab_get_add_eos(v)),
               "sep": bool(llama_cpp.llama_vocab_get_add_sep(v))}
        null = llama_cpp.LLAMA_TOKEN_NULL
        ids = {k: (None if t == null else t) for k, t in (
            ("bos", llama_cpp.llama_vocab_bos(v)), ("eos", llama_cpp.llama_vocab_eos(v)),
            ("sep", llama_cpp.llama_vocab_sep(v)))}
        queries = []
        for query, docs in QUERIES:
            records = []
            for doc in docs:
                toks = pair_tokens(llm, add, ids, query, doc)
                with torch.no_grad():
                    hf_logit = float(model(torch.tensor([toks]),
                                           token_type_ids=torch.zeros(1, len(toks), dtype=torch.long)).logits[0, 0])
                # llama-cpp-python's embed tokenizes its input: hand it the pair's tokens instead.
                llm.tokenize = lambda *_a, _t=toks, **_k: list(_t)
                score = float(np.asarray(llm.embed("pair", normalize=False))[0])
                del llm.tokenize
                records.append({"document": doc, "tokens": toks, "score": hf_logit, "llamacpp_score": score})
            ranking = sorted(range(len(records)), key=lambda i: -records[i]["score"])
            queries.append({"query": query, "documents": records, "ranking": ranking})
    expected = {
        "reference": f"transformers {type(model).__name__} (float32, eager, token types 0) and "
                     "llama.cpp (rank pooling); scripts/gen_cross_encoder_fixture.py",
        "add_special": add,
        "queries": queries,
    }
    (out / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    for q in queries:
        for d in q["documents"]:
            print(f"{q['query']!r} / {d['document']!r}: transformers {d['score']:.5f}, "
                  f"llama.cpp {d['llamacpp_score']:.5f}")


if __name__ == "__main__":
    main()
