"""Greedy `create_completion` equals `ferrolm generate --temp 0`, and streaming yields the same
text as not streaming, on both test models."""

import subprocess

import pytest

import ferrolm

PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village by the sea,",
    "def fibonacci(n):",
]
N = 48


def cli_greedy(binary: str, model_path: str, prompt: str) -> str:
    out = subprocess.run(
        [binary, "generate", "-m", model_path, "-p", prompt, "-n", str(N), "--temp", "0", "--no-display-prompt"],
        capture_output=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr.decode()
    text = out.stdout.decode("utf-8")
    assert text.endswith("\n")
    return text[:-1]


@pytest.fixture
def llm(model_path):
    return ferrolm.Llama(model_path, n_ctx=1024, verbose=False)


def test_greedy_completion_equals_the_cli(llm, model_path, ferrolm_bin):
    for prompt in PROMPTS:
        expected = cli_greedy(ferrolm_bin, model_path, prompt)
        got = llm.create_completion(prompt, max_tokens=N, temperature=0.0)
        assert got["choices"][0]["text"] == expected, prompt


def test_streaming_yields_the_same_text(llm):
    for prompt in PROMPTS:
        whole = llm(prompt, max_tokens=N, temperature=0.0)
        chunks = list(llm(prompt, max_tokens=N, temperature=0.0, stream=True))
        assert "".join(c["choices"][0]["text"] for c in chunks) == whole["choices"][0]["text"]
        assert chunks[-1]["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"]


def test_the_kv_cache_is_reused_across_calls(model_path):
    s = ferrolm.Session(model_path, n_ctx=1024)
    first = s.generate(PROMPTS[1], max_tokens=8, temperature=0.0)
    assert s.last_finish.cached_tokens == 0
    again = s.generate(PROMPTS[1], max_tokens=8, temperature=0.0)
    assert again == first
    n_prompt = s.last_finish.prompt_tokens
    assert s.last_finish.cached_tokens == n_prompt - 1
    s.generate(PROMPTS[1] + first + " And then", max_tokens=4, temperature=0.0)
    assert s.last_finish.cached_tokens >= n_prompt


def test_same_seed_same_sample(model_path):
    llm = ferrolm.Llama(model_path, n_ctx=512, verbose=False)
    a = llm(PROMPTS[0], max_tokens=24, temperature=1.0, seed=123)["choices"][0]["text"]
    b = llm(PROMPTS[0], max_tokens=24, temperature=1.0, seed=123)["choices"][0]["text"]
    assert a == b
    seeded = [ferrolm.Llama(model_path, n_ctx=512, seed=5, verbose=False) for _ in range(2)]
    runs = [[m(PROMPTS[0], max_tokens=16, temperature=1.0)["choices"][0]["text"] for _ in range(2)] for m in seeded]
    assert runs[0] == runs[1]
