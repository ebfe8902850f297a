"""Short programs written against `llama_cpp.Llama` (tests/programs/) run against `ferrolm.Llama`
with only the import changed, and their results validate against llama-cpp-python's shapes."""

import json
import pathlib
import subprocess
import sys

import jsonschema
import pytest

import shapes

PROGRAMS = pathlib.Path(__file__).parent / "programs"
IMPORT = "from llama_cpp import Llama"


def run_program(name: str, model_path: str, tmp_path: pathlib.Path) -> dict:
    source = (PROGRAMS / f"{name}.py").read_text()
    assert source.count(IMPORT) == 1
    ported = tmp_path / f"{name}.py"
    ported.write_text(source.replace(IMPORT, "from ferrolm import Llama"))
    out = subprocess.run([sys.executable, str(ported), model_path], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_completion(model_path, tmp_path):
    r = run_program("completion", model_path, tmp_path)
    jsonschema.validate(r["output"], shapes.COMPLETION)
    jsonschema.validate(r["greedy"], shapes.COMPLETION)
    text = r["output"]["choices"][0]["text"]
    assert text.startswith("Q: Name the planets in the solar system? A: ")
    generated = text[len("Q: Name the planets in the solar system? A: "):]
    assert "\n" not in generated and "Q:" not in generated
    assert r["greedy"]["usage"]["completion_tokens"] <= 16
    assert r["greedy"]["usage"]["total_tokens"] == (
        r["greedy"]["usage"]["prompt_tokens"] + r["greedy"]["usage"]["completion_tokens"])
    assert r["greedy"]["choices"][0]["text"].strip()
    assert r["n_ctx"] == 512


def test_streamed_chat(model_path, tmp_path):
    r = run_program("chat_stream", model_path, tmp_path)
    chunks = r["chunks"]
    for c in chunks:
        jsonschema.validate(c, shapes.CHAT_CHUNK)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")
    assert len({c["id"] for c in chunks}) == 1
    jsonschema.validate(r["whole"], shapes.CHAT_COMPLETION)
    assert r["reply"].strip()
    # Greedy: the streamed reply is the whole reply.
    assert r["reply"] == r["whole"]["choices"][0]["message"]["content"]


def test_json_schema_response(model_path, tmp_path):
    r = run_program("json_schema", model_path, tmp_path)
    jsonschema.validate(r["result"], shapes.CHAT_COMPLETION)
    content = json.loads(r["result"]["choices"][0]["message"]["content"])
    jsonschema.validate(content, r["schema"])


def test_embeddings(model_path, tmp_path):
    r = run_program("embeddings", model_path, tmp_path)
    jsonschema.validate(r["response"], shapes.EMBEDDING)
    data = r["response"]["data"]
    assert [d["index"] for d in data] == [0, 1]
    assert len(data[0]["embedding"]) == len(data[1]["embedding"]) == len(r["single"])
    assert data[0]["embedding"] != data[1]["embedding"]
    # The same text gives the same vector, alone or with others.
    assert r["single"] == pytest.approx(data[0]["embedding"], rel=1e-4, abs=1e-5)
    assert r["response"]["usage"]["prompt_tokens"] > 0


def test_tokenize_round_trip(model_path, tmp_path):
    r = run_program("round_trip", model_path, tmp_path)
    assert r["back"] == r["text"]
    assert all(isinstance(t, int) and 0 <= t < r["n_vocab"] for t in r["tokens"])
    if r["bos"] >= 0 and r["with_bos"][0] == r["bos"]:
        assert r["with_bos"][1:] == r["tokens"]
    else:
        assert r["with_bos"] == r["tokens"]
    assert r["eos"] >= 0
