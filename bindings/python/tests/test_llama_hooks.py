"""`Llama`'s per-token hooks and state on the real SmolLM2 model: logits processors and stopping
criteria (llama-cpp-python's signatures, numpy arrays when numpy is installed), `logprobs` on
completions and chat completions (whole and streamed), and save_state/load_state."""

import math

import jsonschema
import pytest

import ferrolm
import shapes
from ferrolm import InvalidInputError, Llama, LogitsProcessorList, StoppingCriteriaList
from ferrolm import llama_hooks

PROMPT = "Q: Name the planets in the solar system? A:"


@pytest.fixture(scope="module")
def llm():
    from conftest import require_model

    return Llama(require_model("smollm2"), n_ctx=512, verbose=False)


def greedy(llm, prompt=PROMPT, **kw):
    kw.setdefault("max_tokens", 8)
    return llm.create_completion(prompt, temperature=0.0, top_k=1, **kw)


def test_a_logits_processor_decides_the_tokens(llm):
    forced = llm.tokenize(b" Mars", add_bos=False)[0]
    seen = []

    def only_mars(input_ids, scores):
        seen.append((len(input_ids), len(scores), type(scores).__name__))
        scores[:] = [-math.inf] * len(scores) if llama_hooks._np is None else -math.inf
        scores[forced] = 0.0
        return scores

    out = greedy(llm, max_tokens=4, logits_processor=LogitsProcessorList([only_mars]))
    jsonschema.validate(out, shapes.COMPLETION)
    assert out["choices"][0]["text"] == " Mars" * 4
    assert out["choices"][0]["finish_reason"] == "length"
    n_prompt = out["usage"]["prompt_tokens"]
    # Called before each token with the context so far and the full vocabulary's logits.
    assert [s[0] for s in seen] == [n_prompt, n_prompt + 1, n_prompt + 2, n_prompt + 3]
    assert all(s[1] == llm.n_vocab() for s in seen)
    if llama_hooks._np is not None:
        assert seen[0][2] == "ndarray"
    # A plain callable and a processor that changes nothing give the unprocessed output.
    assert greedy(llm, logits_processor=lambda ids, s: s)["choices"][0]["text"] == greedy(llm)["choices"][0]["text"]
    # Also in a streamed chat.
    chunks = list(llm.create_chat_completion([{"role": "user", "content": "Hi"}], max_tokens=3, temperature=0.0,
                                             stream=True, logits_processor=[only_mars]))
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == " Mars" * 3


def test_processor_errors_are_raised_and_the_object_stays_usable(llm):
    def boom(input_ids, scores):
        raise KeyError("from the processor")

    with pytest.raises(KeyError, match="from the processor"):
        greedy(llm, logits_processor=boom)
    with pytest.raises(InvalidInputError, match="returned 3 scores"):
        greedy(llm, logits_processor=lambda ids, s: [0.0, 1.0, 2.0])
    assert greedy(llm)["choices"][0]["text"]


def test_stopping_criteria_end_with_stop(llm):
    calls = []

    def after_three(input_ids, logits):
        calls.append(len(input_ids))
        assert len(logits) == llm.n_vocab()
        return len(calls) == 3

    whole = greedy(llm, max_tokens=12)
    out = greedy(llm, max_tokens=12, stopping_criteria=StoppingCriteriaList([after_three]))
    assert out["choices"][0]["finish_reason"] == "stop"
    assert out["usage"]["completion_tokens"] == 3
    assert whole["choices"][0]["text"].startswith(out["choices"][0]["text"])
    n_prompt = out["usage"]["prompt_tokens"]
    # As llama-cpp-python: the ids do not yet hold the token just sampled.
    assert calls == [n_prompt, n_prompt + 1, n_prompt + 2]
    chunks = list(greedy(llm, max_tokens=12, stream=True, stopping_criteria=lambda ids, lg: len(ids) > n_prompt))
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert "".join(c["choices"][0]["text"] for c in chunks) == "".join(
        greedy(llm, max_tokens=2)["choices"][0]["text"])


def test_completion_logprobs(llm):
    out = greedy(llm, logprobs=3)
    jsonschema.validate(out, shapes.COMPLETION)
    lp = out["choices"][0]["logprobs"]
    n = out["usage"]["completion_tokens"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == len(lp["text_offset"]) == n
    assert "".join(lp["tokens"]) == out["choices"][0]["text"]
    assert lp["text_offset"][0] == 0
    for tok, logprob, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
        assert logprob <= 0.0
        # Greedy: the token is the most likely one, and among its alternatives.
        assert top[tok] == logprob and max(top.values()) == pytest.approx(logprob)
        assert 1 <= len(top) <= 4
    assert greedy(llm)["choices"][0]["logprobs"] is None
    chunks = list(greedy(llm, logprobs=2, stream=True))
    streamed = [c["choices"][0]["logprobs"] for c in chunks if c["choices"][0]["logprobs"]]
    assert [t for r in streamed for t in r["tokens"]] == lp["tokens"]
    assert [x for r in streamed for x in r["token_logprobs"]] == pytest.approx(lp["token_logprobs"])
    assert [x for r in streamed for x in r["text_offset"]] == lp["text_offset"]
    with pytest.raises(InvalidInputError, match="echo"):
        greedy(llm, logprobs=1, echo=True)


def test_chat_logprobs(llm):
    msgs = [{"role": "user", "content": "Say hello."}]
    out = llm.create_chat_completion(msgs, max_tokens=5, temperature=0.0, logprobs=True, top_logprobs=2)
    jsonschema.validate(out, shapes.CHAT_COMPLETION)
    content = out["choices"][0]["logprobs"]["content"]
    assert len(content) == out["usage"]["completion_tokens"]
    assert "".join(c["token"] for c in content) == out["choices"][0]["message"]["content"]
    for c in content:
        assert bytes(c["bytes"]).decode("utf-8", "replace") == c["token"]
        assert len(c["top_logprobs"]) == 2 and c["top_logprobs"][0]["logprob"] == pytest.approx(c["logprob"])
    assert llm.create_chat_completion(msgs, max_tokens=2)["choices"][0]["logprobs"] is None
    chunks = list(llm.create_chat_completion(msgs, max_tokens=5, temperature=0.0, logprobs=True, stream=True))
    streamed = [x for c in chunks if c["choices"][0]["logprobs"] for x in c["choices"][0]["logprobs"]["content"]]
    assert [x["token"] for x in streamed] == [c["token"] for c in content]


def test_load_state_continues_as_without_the_detour(smollm2_path):
    llm = Llama(smollm2_path, n_ctx=512, seed=7, verbose=False)
    first = llm(PROMPT, max_tokens=10, temperature=0.0)["choices"][0]["text"]
    state = llm.save_state()
    assert isinstance(state, ferrolm.LlamaState)
    assert state.n_tokens == llm.n_tokens > 0 and len(state.llama_state) == 4 * state.n_tokens
    follow = PROMPT + first + "\nQ: Which one is the largest? A:"
    # Sampled with seeds drawn from the Llama's generator: the state restores it too.
    want = llm(follow, max_tokens=12, temperature=0.9)["choices"][0]["text"]
    llm.reset()
    llm("Something else entirely", max_tokens=5, temperature=0.9)
    llm.load_state(state)
    assert llm.n_tokens == state.n_tokens
    assert llm(follow, max_tokens=12, temperature=0.9)["choices"][0]["text"] == want
    # A state loads into another Llama of the same model.
    other = Llama(smollm2_path, n_ctx=512, verbose=False)
    other.load_state(state)
    assert other.n_tokens == state.n_tokens
    assert other(follow, max_tokens=12, temperature=0.9)["choices"][0]["text"] == want


def test_hooks_take_lists_without_numpy(llm, monkeypatch):
    monkeypatch.setattr(llama_hooks, "_np", None)
    forced = llm.tokenize(b" Mars", add_bos=False)[0]
    kinds = []

    def only_mars(input_ids, scores):
        kinds.append((type(input_ids), type(scores)))
        return [0.0 if i == forced else -math.inf for i in range(len(scores))]

    out = greedy(llm, max_tokens=3, logits_processor=only_mars,
                 stopping_criteria=lambda ids, logits: isinstance(logits, list) and len(kinds) == 2)
    assert out["choices"][0]["text"] == " Mars" * 2
    assert out["choices"][0]["finish_reason"] == "stop"
    assert kinds == [(list, list)] * 2
