#!/usr/bin/env python3
"""Test vectors for llama.cpp's UGM (SentencePiece unigram) tokenizer, made by llama.cpp itself.

llama.cpp ships `models/ggml-vocab-nomic-bert-moe.gguf` (XLM-RoBERTa's 250k-token unigram
vocabulary with its precompiled normalisation charsmap) but no `.inp`/`.out` vectors for it.
This script tokenizes llama.cpp's own test texts (`ggml-vocab-llama-spm.gguf.inp`) plus texts
that exercise the charsmap (NFKC forms, full-width letters, ligatures, odd spaces, invalid
UTF-8 is not possible in Python strings) with llama.cpp (llama-cpp-python built from the sources
the project uses, `add_special` and `parse_special` off, as `test-tokenizer-0`), and writes them
in test-tokenizer-0's format to crates/ferrolm/tests/fixtures/vocab-ugm/.

Usage: python scripts/gen_ugm_vectors.py LLAMA_CPP_DIR   (a python with llama_cpp)
"""

from __future__ import annotations

import sys
from pathlib import Path

import llama_cpp

SEP = "\n__ggml_vocab_test__\n"
OUT = Path(__file__).resolve().parent.parent / "crates/ferrolm/tests/fixtures/vocab-ugm"
EXTRA = [
    "ｈｅｌｌｏ ｗｏｒｌｄ！ ＡＢＣ １２３",
    "ﬁnancial ﬂow ﬀ Ⅻ ① ㈱ ㎏ ½",
    "Café naïve coöperate résumé Ångström",
    "a\u00a0b\u2003c\u3000d\u200be",
    "  leading and   repeated   spaces  ",
    "tabs\tand\nnewlines\r\nmixed",
    "Привет, мир! Γειά σου Κόσμε",
    "東京は日本の首都です。北京是中国的首都。",
    "한국어 텍스트와 ภาษาไทย และ العربية",
    "emoji 🦙🔥 and flags 🇫🇷 🏳️‍🌈",
    "<s> </s> <unk> <mask> special-looking text",
    "x" * 300,
    "\u0301 combining at start, e\u0301 and e\u0300\u0323",
    "",
    " ",
    "\n",
]


def main() -> None:
    llama = Path(sys.argv[1])
    gguf = llama / "models" / "ggml-vocab-nomic-bert-moe.gguf"
    raw = (llama / "models" / "ggml-vocab-llama-spm.gguf.inp").read_text(encoding="utf-8")
    texts = raw.split(SEP)
    if raw.endswith(SEP):
        texts = texts[:-1]
    texts += EXTRA
    llm = llama_cpp.Llama(model_path=str(gguf), vocab_only=True, verbose=False)
    lines = []
    for t in texts:
        ids = llm.tokenize(t.encode("utf-8"), add_bos=False, special=False)
        lines.append(" ".join(str(i) for i in ids))
    OUT.mkdir(parents=True, exist_ok=True)
    name = gguf.name
    (OUT / f"{name}.inp").write_text("".join(t + SEP for t in texts), encoding="utf-8")
    (OUT / f"{name}.out").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{len(texts)} vectors written to {OUT}")


if __name__ == "__main__":
    main()
