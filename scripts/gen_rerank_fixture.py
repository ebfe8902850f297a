#!/usr/bin/env python3
"""Generate ferrolm's reranker fixture: a tiny random Qwen3-Reranker-style model, converted by
llama.cpp's own converter, with reference scores from transformers and llama.cpp's scores.

What llama.cpp does with a Qwen3 reranker ("rank pooling", LLAMA_POOLING_TYPE_RANK = 4):
- the converter recognises a reranker by the HF folder's name (or `_name_or_path`, model_type,
  architecture) containing "qwen3-reranker", or a README.md with a "# Qwen3-Reranker" heading;
  it then writes `cls.output.weight` = the lm_head rows of the tokens "yes" and "no" (stacked
  [yes, no]; with untied embeddings the lm_head itself is *not* written, so the GGUF has no
  `output.weight`), `qwen3.pooling_type` = 4, `qwen3.classifier.output_labels` = ["yes", "no"]
  and a named chat template `tokenizer.chat_template.rerank` (hard-coded in the converter) with
  `{query}` and `{document}` placeholders;
- the server substitutes query and document into that template, tokenizes the result with
  special tokens parsed and nothing added (no BOS), and the graph takes the final-norm hidden
  state of the last token, multiplies it by `cls.output` and applies a softmax; the score is
  the first entry, softmax([yes_logit, no_logit])[0].

This script
1. builds a byte-level BPE tokenizer (GPT-2 byte alphabet, Qwen2 split regex, no BOS, as
   gen_conformance.py's `bpe-qwen2`) of 512 tokens, trained on gen_conformance's CORPUS plus the
   rerank template's text and lines "yes" / "no" (so that both are single tokens), with Qwen3's
   added tokens: `<|endoftext|>` (PAD), `<|im_start|>`, `<|im_end|>` (EOS) as special tokens
   and `<think>`, `</think>` as non-special added tokens (as in Qwen3's tokenizer);
2. builds a Qwen3ForCausalLM like gen_conformance's `qwen3` (hidden 64, 2 layers, 4 query heads
   / 1 kv head, head_dim 32, q/k norms) but with an untied lm_head (as Qwen3-Reranker-4B/8B),
   randomised by gen_conformance's `randomize()`;
3. sets the lm_head rows of "yes" and "no" to a +- (s/2) v (a: the random "yes" row; v: a unit
   direction in hidden space, s: a scale) so that the scores are spread: the hidden states do
   not depend on the lm_head (untied), so the final-norm hidden state h of every pair's last
   token is computed first, and v is drawn (fixed RNG) from the span of the principal
   directions of the h's (centred, orthogonal to their mean, so the yes-no logit gaps have mean
   ~0), s is chosen so that the largest |gap| is GAP_MAX, and the draw whose scores have the
   largest minimal gap (within each query, and over all pairs) is kept;
4. saves the HF folder (bf16 safetensors) in a directory named `qwen3-reranker-tiny` (plus a
   README.md with a "# Qwen3-Reranker" heading, so that a copy under any name is recognised
   too), converts it with llama.cpp's `convert_hf_to_gguf.py --outtype bf16` (through
   gen_conformance's wrapper, which only supplies the pre-tokenizer name "qwen2" for the
   unknown BPE hash), and copies the HF folder to the fixture as `hf/` if it is small;
5. computes the reference from exactly the stored bf16 weights (transformers, float32, eager
   attention): for each pair the prompt tokens (HF tokenizer on the substituted template, no
   BOS, added/special tokens parsed), the logits of "yes" and "no" at the last position, their
   gap, the score softmax([yes, no])[0], and the last position's final-norm hidden state;
6. runs llama-cpp-python on the GGUF (embedding=True, pooling_type=4) per pair, with the tokens
   of `llm.tokenize(prompt, add_bos=False, special=True)` (checked equal to the HF ones), and
   records llama.cpp's softmax output [p_yes, p_no] next to the reference.

Output: crates/ferrolm/tests/fixtures/rerank/qwen3-reranker/{model.gguf,expected.json,
README.md[,hf/]}.

Usage: python3 scripts/gen_rerank_fixture.py [--llamacpp DIR]
(DIR: a llama.cpp source tree with convert_hf_to_gguf.py, conversion/ and gguf-py/; default
$LLAMACPP_DIR or the tree vendored in llama-cpp-python 0.3.36's sdist under /tmp/lcp.)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen_conformance as gc  # noqa: E402  (tiny-model building blocks; fixtures untouched)

ROOT = gc.ROOT
OUT = ROOT / "crates" / "ferrolm" / "tests" / "fixtures" / "rerank" / "qwen3-reranker"
DEFAULT_LLAMACPP = Path(os.environ.get(
    "LLAMACPP_DIR", "/tmp/lcp/llama_cpp_python-0.3.36/vendor/llama.cpp"))

NAME = "qwen3-reranker"
SEED = 4242
VOCAB = 512
HF_MAX_BYTES = 400_000  # keep the HF folder in the fixture only below this size
GAP_MAX = 3.2  # largest |yes - no| logit gap: scores within ~[0.04, 0.96]
N_DRAWS = 4000  # directions tried for the yes/no rows
MIN_QUERY_GAP = 0.05  # required: minimal gap between consecutive scores within a query
MIN_ALL_GAP = 0.01  # required: minimal gap between any two scores
SIG = 7

# The template the converter writes (conversion/qwen.py, Qwen3Model.set_gguf_parameters); it is
# read back from the GGUF and checked equal.
RERANK_TEMPLATE = (
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query "
    "and the Instruct provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n"
    "<|im_start|>user\n<Instruct>: Given a web search query, retrieve relevant passages that "
    "answer the query\n<Query>: {query}\n<Document>: {document}<|im_end|>\n"
    "<|im_start|>assistant\n<think>\n\n</think>\n\n"
)

# A plain ChatML template for tokenizer_config (the real Qwen3-Reranker GGUFs carry the model's
# default chat template next to the rerank one).
CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# (query, documents); a random model's relevance is meaningless, only the numbers matter.
CASES: list[tuple[str, list[str]]] = [
    ("What is the capital of France?", [
        "Paris is the capital and largest city of France.",
        "Berlin is the capital of Germany.",
        "The Eiffel Tower was built in 1889.",
        "Bananas are rich in potassium.",
    ]),
    ("How do I bake bread at home?", [
        "Mix flour, water, salt and yeast, let the dough rise, then bake it for forty minutes.",
        "The baker's cart crossed the frozen river in winter.",
        "Bread is a staple food made from dough.",
        "def main():\n    print(\"hello\")",
    ]),
    ("Which animal is the fastest on land?", [
        "The cheetah is the fastest land animal, reaching about 110 km/h.",
        "Le guépard est l’animal terrestre le plus rapide : 東京 → 北京 ≈ 2100 km.",
        "Quick brown foxes jump over lazy dogs.",
        "Snails move very slowly.",
    ]),
]

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ADDED = ["<think>", "</think>"]  # non-special added tokens, as in Qwen3's tokenizer


def rerank_prompt(query: str, document: str, template: str = RERANK_TEMPLATE) -> str:
    # the server's order: {query} first, then {document}
    return template.replace("{query}", query).replace("{document}", document)


# ---------------------------------------------------------------------------------------------
# Tokenizer
# ---------------------------------------------------------------------------------------------


def build_tokenizer(d: Path) -> dict[str, Any]:
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
    from tokenizers import processors, trainers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    d.mkdir(parents=True, exist_ok=True)
    tmpl_text = (RERANK_TEMPLATE.replace("{query}", "").replace("{document}", "")
                 .replace("<|im_start|>", "").replace("<|im_end|>", "")
                 .replace("<think>", "").replace("</think>", ""))
    extra = [l for l in tmpl_text.split("\n") if l.strip()] + ["yes", "no", "yes", "no"]
    lines = gc.corpus_lines() + extra * 40
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(gc.QWEN2_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    n_bpe = VOCAB - len(SPECIALS) - len(ADDED)
    trainer = trainers.BpeTrainer(
        vocab_size=n_bpe, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False, min_frequency=1)
    tk.train_from_iterator(lines, trainer)
    assert tk.get_vocab_size() == n_bpe, tk.get_vocab_size()
    tk.add_special_tokens(SPECIALS)
    tk.add_tokens([AddedToken(t, special=False, normalized=False) for t in ADDED])
    tk.decoder = decoders.ByteLevel()
    tk.post_processor = processors.ByteLevel(trim_offsets=False)
    ft = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|im_end|>",
                                 pad_token="<|endoftext|>")
    ft.chat_template = CHATML
    ft.save_pretrained(d)
    gc._clean_tokenizer_config(d, {"add_bos_token": False, "add_eos_token": False,
                                   "tokenizer_class": "PreTrainedTokenizerFast"})
    t = AutoTokenizer.from_pretrained(d)
    assert len(t) == VOCAB, len(t)
    ids = {s: t.convert_tokens_to_ids(s) for s in SPECIALS + ADDED + ["yes", "no"]}
    for s in ("yes", "no"):
        assert ids[s] is not None and ids[s] < n_bpe, (s, ids[s])
        assert t("\n\n" + s, add_special_tokens=False).input_ids[-1] == ids[s], s
    for s in SPECIALS + ADDED:
        assert t(f"a{s}b", add_special_tokens=False).input_ids[1] == ids[s], s
    return {"dir": d, "ids": ids, "n_bpe": n_bpe, "eos": ids["<|im_end|>"],
            "pad": ids["<|endoftext|>"]}


def hf_tokens(tok, query: str, document: str) -> list[int]:
    return tok(rerank_prompt(query, document), add_special_tokens=False).input_ids


# ---------------------------------------------------------------------------------------------
# Model
# ---------------------------------------------------------------------------------------------


def qwen3_config(tk: dict[str, Any]):
    import transformers

    spec = next(s for s in gc.MODELS if s.name == "qwen3")
    kw = dict(spec.cfg)
    kw.update(vocab_size=VOCAB, tie_word_embeddings=False, bos_token_id=None,
              eos_token_id=tk["eos"], pad_token_id=tk["pad"])
    cfg = transformers.Qwen3Config(**kw)
    cfg.architectures = ["Qwen3ForCausalLM"]
    return cfg


def last_hidden(model, tokens: list[int]) -> torch.Tensor:
    """Final-norm hidden state of the last position (what rank pooling feeds to cls.output)."""
    with torch.no_grad():
        out = model.model(torch.tensor([tokens], dtype=torch.long))
    return out.last_hidden_state[0, -1].double()


def choose_direction(hs: torch.Tensor, groups: list[list[int]]) -> tuple[torch.Tensor, dict]:
    """A unit direction v (float64 [d]) and the scale s: gaps g_i = s v.h_i with max |g_i| =
    GAP_MAX and the largest minimal score gap (within queries first, then over all pairs)."""
    m = hs.mean(0)
    mu = m / m.norm()
    c = hs - m
    c = c - (c @ mu)[:, None] * mu[None, :]  # orthogonal to the mean: gaps have mean ~0
    _, sv, vt = torch.linalg.svd(c, full_matrices=False)
    k = int((sv > 1e-6 * sv[0]).sum())
    basis = vt[:k]  # rows: principal directions of the centred hidden states
    rng = np.random.default_rng(SEED)
    best = None
    for _ in range(N_DRAWS):
        coef = torch.from_numpy(rng.standard_normal(k)) * sv[:k]
        v = coef @ basis
        v = v - (v @ mu) * mu
        v = v / v.norm()
        s = GAP_MAX / float((hs @ v).abs().max())
        scores = torch.sigmoid(s * (hs @ v))
        q_gap = min(float(np.diff(np.sort(scores[g].numpy())).min()) for g in groups)
        a_gap = float(np.diff(np.sort(scores.numpy())).min())
        key = (min(q_gap / MIN_QUERY_GAP, a_gap / MIN_ALL_GAP), q_gap, a_gap)
        if best is None or key > best[0]:
            best = (key, v, s, scores)
    key, v, s, scores = best
    info = {"principal_rank": k, "singular_values": [float(x) for x in sv[:k]],
            "mean_hidden_norm": float(m.norm()), "scale": s,
            "min_query_gap_design": key[1], "min_all_gap_design": key[2]}
    return v, info


def build_model(work: Path, tk: dict[str, Any]) -> tuple[Path, dict[str, Any]]:
    import transformers

    config = qwen3_config(tk)
    torch.manual_seed(SEED)
    model = transformers.Qwen3ForCausalLM(config)
    # untied: embed_tokens and lm_head are both N(0, 0.5^2), final-norm gain 1 (gen_conformance's
    # defaults, used by its untied models)
    gc.randomize(model, SEED, 0.5, 1.0)
    model = model.to(torch.bfloat16)

    model.generation_config.do_sample = False
    hf = work / "qwen3-reranker-tiny"  # the name makes the converter treat it as a reranker

    def save() -> None:
        if hf.exists():
            shutil.rmtree(hf)
        model.save_pretrained(hf, safe_serialization=True)
        for f in tk["dir"].iterdir():
            shutil.copy(f, hf / f.name)

    # the last hidden states, from the stored bf16 weights in float32 as for the reference;
    # they do not depend on the (untied) lm_head
    save()
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(hf)
    f32 = gc.load_f32(hf)
    pairs = [(qi, di) for qi, (_, docs) in enumerate(CASES) for di in range(len(docs))]
    hs = torch.stack([last_hidden(f32, hf_tokens(tok, CASES[qi][0], CASES[qi][1][di]))
                      for qi, di in pairs])
    del f32
    groups = [[i for i, (qi, _) in enumerate(pairs) if qi == q] for q in range(len(CASES))]
    v, info = choose_direction(hs, groups)
    yes, no = tk["ids"]["yes"], tk["ids"]["no"]
    with torch.no_grad():
        w = model.lm_head.weight
        a = w[yes].double()
        w[yes] = (a + 0.5 * info["scale"] * v).to(torch.bfloat16)
        w[no] = (a - 0.5 * info["scale"] * v).to(torch.bfloat16)
    save()
    (hf / "README.md").write_text(
        "# Qwen3-Reranker (tiny random test model)\n\n"
        "A random 2-layer Qwen3 with a 512-token vocabulary, made by ferrolm's "
        "scripts/gen_rerank_fixture.py to test rerank support; its scores mean nothing.\n")
    return hf, info


# ---------------------------------------------------------------------------------------------
# llama.cpp
# ---------------------------------------------------------------------------------------------


def llamacpp_scores(gguf_path: Path, prompts: list[str], ref_tokens: list[list[int]]):
    import llama_cpp

    llm = llama_cpp.Llama(model_path=str(gguf_path), embedding=True,
                          pooling_type=llama_cpp.LLAMA_POOLING_TYPE_RANK, n_ctx=256,
                          n_batch=256, n_ubatch=256, n_threads=1, n_threads_batch=1,
                          verbose=False)
    mdl = llm._model.model
    n_cls = llama_cpp.llama_model_n_cls_out(mdl)
    labels = [llama_cpp.llama_model_cls_label(mdl, i).decode() for i in range(n_cls)]
    pooling = llama_cpp.llama_pooling_type(llm._ctx.ctx)
    out = []
    for prompt, ref in zip(prompts, ref_tokens):
        toks = llm.tokenize(prompt.encode("utf-8"), add_bos=False, special=True)
        llm._batch.reset()
        llm._ctx.kv_cache_clear()
        llm._batch.add_sequence(toks, 0, True)
        llm._ctx.decode(llm._batch)
        ptr = llama_cpp.llama_get_embeddings_seq(llm._ctx.ctx, 0)
        probs = [float(ptr[i]) for i in range(n_cls)]
        out.append({"tokens_equal": toks == ref, "tokens": toks, "probs": probs})
    llm._batch.reset()
    llm._ctx.kv_cache_clear()
    del llm
    return {"n_cls_out": n_cls, "labels": labels, "pooling_type": int(pooling)}, out


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------


def dir_size(p: Path) -> int:
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llamacpp", type=Path, default=DEFAULT_LLAMACPP,
                    help="llama.cpp source tree (convert_hf_to_gguf.py, conversion/, gguf-py/)")
    args = ap.parse_args()
    llamacpp: Path = args.llamacpp.resolve()
    sys.path.insert(0, str(llamacpp / "gguf-py"))
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS") or 0)
                          or max(1, os.cpu_count() or 1))
    torch.use_deterministic_algorithms(True)
    import gguf
    import llama_cpp
    import tokenizers
    import transformers
    from transformers import AutoTokenizer

    work = Path(tempfile.mkdtemp(prefix="ferrolm-rerank-"))
    tk = build_tokenizer(work / "tok")
    hf, design = build_model(work, tk)
    yes, no = tk["ids"]["yes"], tk["ids"]["no"]

    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    gguf_path = OUT / "model.gguf"
    log = work / "convert.log"
    conv_msgs = gc.convert(llamacpp, hf, gguf_path, NAME, "qwen2", log)
    kv, tensors = gc.gguf_summary(gguf_path)
    r = gguf.GGUFReader(gguf_path)
    template = r.fields["tokenizer.chat_template.rerank"].contents()
    assert template == RERANK_TEMPLATE, template
    assert kv["qwen3.pooling_type"] == 4, kv.get("qwen3.pooling_type")
    assert kv["qwen3.classifier.output_labels"] == ["yes", "no"]
    cls = next(t for t in r.tensors if t.name == "cls.output.weight")

    # reference: transformers, float32 from the stored bf16 weights, eager attention
    model = gc.load_f32(hf)
    tok = AutoTokenizer.from_pretrained(hf)
    # cls.output in the GGUF is exactly lm_head[[yes, no]]
    assert cls.tensor_type.name == "BF16", cls.tensor_type
    raw = np.ascontiguousarray(np.asarray(cls.data)).view(np.uint16).reshape(2, -1)
    cls_f = torch.from_numpy(raw.astype(np.int32) << 16).view(torch.float32)
    lm = model.lm_head.weight.detach()
    assert torch.equal(cls_f, lm[[yes, no]]), "cls.output != lm_head[[yes, no]]"

    queries = []
    flat_prompts, flat_tokens, flat_recs = [], [], []
    for q, docs in CASES:
        recs = []
        for d in docs:
            ids = hf_tokens(tok, q, d)
            with torch.no_grad():
                x = torch.tensor([ids], dtype=torch.long)
                logits = model(x).logits[0, -1].float()
                h = model.model(x).last_hidden_state[0, -1].float()
            ly, ln = float(logits[yes]), float(logits[no])
            # independent check: the rank head on the final-norm hidden state
            ry, rn = (cls_f.double() @ h.double()).tolist()
            assert abs(ry - ly) < 1e-4 and abs(rn - ln) < 1e-4, (ry, ly, rn, ln)
            p = torch.softmax(torch.tensor([ly, ln], dtype=torch.float64), 0)
            rec = {"document": d, "tokens": ids, "n_tokens": len(ids),
                   "yes_logit": gc.sig(ly), "no_logit": gc.sig(ln),
                   "logit_gap": gc.sig(ly - ln), "score": gc.sig(float(p[0])),
                   "last_hidden": [float(f"{x:.6g}") for x in h.tolist()]}
            recs.append(rec)
            flat_prompts.append(rerank_prompt(q, d))
            flat_tokens.append(ids)
            flat_recs.append(rec)
        order = sorted(range(len(recs)), key=lambda i: -recs[i]["score"])
        sc = sorted((r["score"] for r in recs), reverse=True)
        queries.append({"query": q, "documents": recs, "ranking": order,
                        "min_score_gap": round(min(a - b for a, b in zip(sc, sc[1:])), 6)})
    all_scores = sorted(r["score"] for r in flat_recs)
    min_all_gap = min(b - a for a, b in zip(all_scores, all_scores[1:]))
    min_q_gap = min(qq["min_score_gap"] for qq in queries)
    assert min_q_gap >= MIN_QUERY_GAP, min_q_gap
    assert min_all_gap >= MIN_ALL_GAP, min_all_gap
    assert all_scores[0] <= 0.1 and all_scores[-1] >= 0.9, (all_scores[0], all_scores[-1])

    # llama.cpp
    lc_info, lc = llamacpp_scores(gguf_path, flat_prompts, flat_tokens)
    assert lc_info["pooling_type"] == 4, lc_info
    for rec, l in zip(flat_recs, lc):
        assert l["tokens_equal"], (rec["document"], l["tokens"], rec["tokens"])
        py, pn = l["probs"]
        rec["llamacpp_probs"] = [gc.sig(py), gc.sig(pn)]
        rec["llamacpp_score"] = gc.sig(py)
        rec["llamacpp_logit_gap"] = gc.sig(math.log(py / pn))
    max_dscore = max(abs(r["llamacpp_score"] - r["score"]) for r in flat_recs)
    max_dgap = max(abs(r["llamacpp_logit_gap"] - r["logit_gap"]) for r in flat_recs)
    lc_rank_same = all(
        sorted(range(len(qq["documents"])), key=lambda i: -qq["documents"][i]["llamacpp_score"])
        == qq["ranking"] for qq in queries)

    hf_bytes = dir_size(hf)
    keep_hf = hf_bytes < HF_MAX_BYTES
    if keep_hf:
        shutil.copytree(hf, OUT / "hf")

    versions = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "gguf_py": getattr(gguf, "__version__", None) or gc._gguf_py_version(llamacpp),
        "llama_cpp_python": llama_cpp.__version__,
        "llama_cpp": f"vendored llama.cpp of llama-cpp-python {llama_cpp.__version__} "
                     f"(ggml {gc._ggml_version(llamacpp)})",
        "convert_hf_to_gguf_sha256": gc.file_sha256(llamacpp / "convert_hf_to_gguf.py"),
        "conversion_qwen_py_sha256": gc.file_sha256(llamacpp / "conversion" / "qwen.py"),
    }
    cfg = json.loads((hf / "config.json").read_text())
    expected = {
        "name": NAME,
        "generator": "scripts/gen_rerank_fixture.py",
        "versions": versions,
        "arch": kv["general.architecture"],
        "hf_architecture": cfg["architectures"][0],
        "vocab_size": VOCAB,
        "tie_word_embeddings": cfg.get("tie_word_embeddings"),
        "pooling_type": kv["qwen3.pooling_type"],
        "classifier_output_labels": kv["qwen3.classifier.output_labels"],
        "cls_out_tensor": {"name": cls.name, "type": cls.tensor_type.name,
                           "shape_ggml": [int(x) for x in cls.shape]},
        "yes_token_id": yes,
        "no_token_id": no,
        "add_bos": False,
        "template_key": "tokenizer.chat_template.rerank",
        "template": template,
        "score": "softmax([yes_logit, no_logit])[0] at the last prompt token; prompt = template "
                 "with {query} and {document} substituted, tokenized with special tokens "
                 "parsed and nothing added",
        "reference": "transformers Qwen3ForCausalLM, CPU, float32 from the bf16 weights, eager "
                     "attention: lm_head logits of 'yes' and 'no' at the last position; "
                     "last_hidden = final-norm hidden state there (6 significant digits)",
        "llamacpp": {"how": "llama-cpp-python Llama(embedding=True, pooling_type=4 (RANK), "
                            "n_ctx=256, n_threads=1), one pair per decode, tokens from "
                            "llm.tokenize(prompt, add_bos=False, special=True) (equal to "
                            "`tokens`); llamacpp_probs = llama_get_embeddings_seq (the graph's "
                            "softmax over cls.output), llamacpp_logit_gap = ln(p_yes/p_no)",
                     **lc_info,
                     "max_abs_score_diff": round(max_dscore, 7),
                     "max_abs_logit_gap_diff": round(max_dgap, 7),
                     "same_ranking": lc_rank_same},
        "lm_head_design": {
            "how": "lm_head rows of yes/no set to a +- (scale/2) v, v a unit direction in the "
                   "span of the centred last-position hidden states (orthogonal to their mean), "
                   "so that the scores spread; see the script",
            **{k: (round(v, 6) if isinstance(v, float) else v) for k, v in design.items()
               if k != "singular_values"}},
        "min_score_gap_within_query": round(min_q_gap, 6),
        "min_score_gap_overall": round(min_all_gap, 6),
        "queries": queries,
    }
    gc.compact_json(OUT / "expected.json", expected)
    (OUT / "README.md").write_text(readme(versions, kv, tensors, keep_hf, hf_bytes, expected))

    # report
    print(f"work dir: {work}")
    print(f"HF folder {hf}: {hf_bytes} bytes -> {'kept as hf/' if keep_hf else 'not kept'}")
    print("converter warnings/notes:", *conv_msgs, sep="\n  ")
    print("GGUF metadata:")
    for k, v in kv.items():
        print(f"  {k} = {v!r}")
    print("GGUF tensors:")
    for t in tensors:
        print("  " + t)
    print(f"template: {template!r}")
    print(f"design: {json.dumps(design)}")
    print(f"{'q':>2} {'d':>2} {'ntok':>4} {'yes':>10} {'no':>10} {'gap':>10} {'score':>10} "
          f"{'lc_score':>10} {'lc_gap':>10}")
    for qi, qq in enumerate(queries):
        for di, r in enumerate(qq["documents"]):
            print(f"{qi:>2} {di:>2} {r['n_tokens']:>4} {r['yes_logit']:>10.5f} "
                  f"{r['no_logit']:>10.5f} {r['logit_gap']:>10.5f} {r['score']:>10.6f} "
                  f"{r['llamacpp_score']:>10.6f} {r['llamacpp_logit_gap']:>10.5f}")
        print(f"   ranking {qq['ranking']} min gap {qq['min_score_gap']}")
    print(f"min gap within query {min_q_gap:.4f}, overall {min_all_gap:.4f}; llama.cpp: max "
          f"|dscore| {max_dscore:.2e}, max |dgap| {max_dgap:.2e}, same ranking {lc_rank_same}")
    for f in sorted(OUT.rglob("*")):
        if f.is_file():
            print(f"  {f.relative_to(ROOT)}  {f.stat().st_size}")


def readme(versions: dict[str, Any], kv: dict[str, Any], tensors: list[str], keep_hf: bool,
           hf_bytes: int, exp: dict[str, Any]) -> str:
    lc = exp["llamacpp"]
    tlist = "\n".join("    " + t for t in tensors)
    all_scores = [r["score"] for qq in exp["queries"] for r in qq["documents"]]
    hf_note = (f"the HF folder (bf16 safetensors, tokenizer, config; {hf_bytes} bytes). Its name "
               "does not contain qwen3-reranker, but its README.md heading makes the converter\n"
               "  treat it as a reranker anyway: converting `hf/` gives the same model.gguf"
               if keep_hf else f"not kept ({hf_bytes} bytes)")
    rows = []
    for qi, qq in enumerate(exp["queries"]):
        for di, r in enumerate(qq["documents"]):
            rows.append(f"| {qi} | {di} | {r['n_tokens']} | {r['yes_logit']:.5f} | "
                        f"{r['no_logit']:.5f} | {r['score']:.6f} | {r['llamacpp_score']:.6f} |")
    return f"""# Tiny Qwen3-Reranker fixture

A random 2-layer Qwen3 (hidden 64, 4 query heads / 1 kv head, head_dim 32, q/k norms, untied
lm_head, 512-token byte-level BPE with the Qwen2 split regex and Qwen3's special tokens),
converted by llama.cpp's own converter as a Qwen3 reranker, with reference scores from
transformers and the scores llama.cpp computes. Its relevance judgements are meaningless; only
the numbers matter.

Made by `scripts/gen_rerank_fixture.py` (see its docstring for every step):

```
OMP_NUM_THREADS=1 python3 scripts/gen_rerank_fixture.py \\
    --llamacpp /tmp/lcp/llama_cpp_python-0.3.36/vendor/llama.cpp
```

Versions: {json.dumps(versions, indent=1)}

## Files

- `model.gguf`: `convert_hf_to_gguf.py <dir>/qwen3-reranker-tiny --outtype bf16` (through
  gen_conformance.py's wrapper, which only supplies the pre-tokenizer name `qwen2` for the
  unknown BPE hash of this tiny vocabulary). The converter recognises the reranker by the folder
  name (`qwen3-reranker` in it; the HF folder's README.md has a `# Qwen3-Reranker` heading,
  which works too) and then writes `qwen3.pooling_type` = {kv['qwen3.pooling_type']} (RANK),
  `qwen3.classifier.output_labels` = {kv['qwen3.classifier.output_labels']},
  `tokenizer.chat_templates` = {kv.get('tokenizer.chat_templates')} with
  `tokenizer.chat_template.rerank` (its fixed template), and `cls.output.weight` = lm_head rows
  of "yes" ({exp['yes_token_id']}) and "no" ({exp['no_token_id']}), stacked [yes, no]. The
  lm_head is untied and is not written at all: there is no `output.weight` (llama.cpp then
  uses token_embd as the LM head, which only matters for generation). `tokenizer.chat_template`
  is the plain ChatML template of tokenizer_config. `<|endoftext|>` (PAD), `<|im_start|>`,
  `<|im_end|>` (EOS) are CONTROL tokens; `<think>` and `</think>` (non-special added tokens in
  HF, as in Qwen3) are USER_DEFINED, which llama.cpp's tokenizer matches as whole tokens too.
  Tensors (GGML shapes):

{tlist}

- `hf/`: {hf_note}.
- `expected.json` (one line): the template (`template`, read back from the GGUF), and per query
  and document: `tokens` (HF tokenizer on the substituted template, no BOS, added and special
  tokens parsed; llama.cpp's `llama_tokenize(..., add_special=false, parse_special=true)` gives
  the same), `yes_logit`, `no_logit`, `logit_gap` (yes - no) and `score` =
  softmax([yes, no])[0] from transformers (CPU, float32 from the bf16 weights, eager attention;
  7 significant digits), `last_hidden` (the final-norm hidden state of the last token, 6
  digits), `ranking` (document indices by decreasing score), and llama.cpp's
  `llamacpp_probs` ([p_yes, p_no], the RANK-pooled output), `llamacpp_score`,
  `llamacpp_logit_gap` (ln(p_yes/p_no)).

## Scores

The lm_head rows of "yes" and "no" are a +- (s/2) v with v a direction in the span of the
pairs' (centred) last hidden states, so that the scores spread (here {min(all_scores)} ..
{max(all_scores)}): minimal gap
between consecutive scores within a query {exp['min_score_gap_within_query']}, between any two
scores {exp['min_score_gap_overall']}. llama.cpp (bf16 weights, CPU, 1 thread): max |score
difference| {lc['max_abs_score_diff']}, max |logit gap difference| {lc['max_abs_logit_gap_diff']},
same ranking: {lc['same_ranking']}.

| q | doc | tokens | yes logit | no logit | score (HF) | score (llama.cpp) |
|---|-----|--------|-----------|----------|------------|-------------------|
{chr(10).join(rows)}

Queries: {json.dumps([q['query'] for q in exp['queries']], ensure_ascii=False)}
"""


if __name__ == "__main__":
    main()
