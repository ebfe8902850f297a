"""The GIL is released during generation, Ctrl-C stops a generation and leaves the object
usable, and errors are Python exceptions with clear messages."""

import os
import signal
import threading
import time

import pytest

import ferrolm


def test_another_thread_runs_while_generating(smollm2_path):
    llm = ferrolm.Llama(smollm2_path, n_ctx=1024, verbose=False)
    counter = [0]
    stop = threading.Event()

    def count():
        while not stop.is_set():
            counter[0] += 1

    t = threading.Thread(target=count)
    t.start()
    try:
        time.sleep(0.05)
        before = counter[0]
        t0 = time.time()
        # One call: without the GIL released, the counter could not move until it returns.
        out = llm.create_completion("Once upon a time", max_tokens=64, temperature=0.0)
        elapsed = time.time() - t0
        during = counter[0] - before
    finally:
        stop.set()
        t.join()
    assert out["usage"]["completion_tokens"] > 0
    assert elapsed > 0.05
    assert during > 1000, f"the counter advanced {during} times in {elapsed:.2f} s of generation"


@pytest.fixture
def sigint_raises():
    """Ctrl-C raises KeyboardInterrupt even where the test runner was started with SIGINT
    ignored (a background job of a non-interactive shell, as CI may start it)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_stops_a_generation_and_the_object_stays_usable(smollm2_path, sigint_raises):
    llm = ferrolm.Llama(smollm2_path, n_ctx=4096, verbose=False)
    expected = llm("The capital of France is", max_tokens=8, temperature=0.0)["choices"][0]["text"]
    timer = threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    t0 = time.time()
    with pytest.raises(KeyboardInterrupt):
        llm("Once upon a time", max_tokens=3500, temperature=0.0, logit_bias={llm.token_eos(): float("-inf")})
    assert time.time() - t0 < 20
    timer.join()
    assert llm("The capital of France is", max_tokens=8, temperature=0.0)["choices"][0]["text"] == expected


def test_ctrl_c_stops_a_blocking_engine_iteration(smollm2_model, sigint_raises):
    engine = ferrolm.Engine(smollm2_model, n_slots=1, n_ctx=4096)
    timer = threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        for _ in engine.submit("Once upon a time", max_tokens=3500, ignore_eos=True, temperature=0.0):
            pass
    timer.join()
    assert engine.wait_idle(10)
    assert engine.generate("The capital of France is", max_tokens=4, temperature=0.0).strip()


def test_errors_are_python_exceptions(smollm2_path, tmp_path):
    with pytest.raises(FileNotFoundError) as e:
        ferrolm.Llama(str(tmp_path / "missing.gguf"), verbose=False)
    assert isinstance(e.value, ferrolm.Error) and "missing.gguf" in str(e.value)
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file at all")
    with pytest.raises(ferrolm.Error):
        ferrolm.Llama(str(bad), verbose=False)
    llm = ferrolm.Llama(smollm2_path, n_ctx=64, verbose=False)
    with pytest.raises(ValueError, match="context window"):
        llm("word " * 200, max_tokens=4)
    with pytest.raises(ValueError, match="top_p"):
        llm("Hi", max_tokens=4, top_p=3.0)
    with pytest.raises(ValueError):
        llm.create_chat_completion([{"role": "user"}], max_tokens=4, response_format={"type": "json_object", "schema": {"type": "bogus"}})
    with pytest.raises(ValueError):
        llm.detokenize([10**9])
    with pytest.raises(ValueError, match="GBNF: line 1, column 12"):
        llm("Hi", max_tokens=2, grammar=ferrolm.LlamaGrammar.from_string('root ::= "a'))
    with pytest.raises(TypeError):
        ferrolm.Llama(smollm2_path, no_such_argument=1)
    assert llm("Hi", max_tokens=2, temperature=0.0)["usage"]["completion_tokens"] <= 2


def test_grammar_and_tools(smollm2_path):
    llm = ferrolm.Llama(smollm2_path, n_ctx=1024, verbose=False)
    grammar = ferrolm.LlamaGrammar.from_lark('start: "yes" | "no"')
    out = llm("Is the sky blue? Answer:", grammar=grammar, max_tokens=8)
    assert out["choices"][0]["text"] in ("yes", "no")
    # GBNF, as llama-cpp-python's LlamaGrammar.from_string takes it.
    gbnf = ferrolm.LlamaGrammar.from_string('root ::= answer "."\nanswer ::= "yes" | "no"\n')
    out = llm("Is the sky blue? Answer:", grammar=gbnf, max_tokens=8)
    assert out["choices"][0]["text"] in ("yes.", "no.")
    tools = [{"type": "function", "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30}},
                       "required": ["city"], "additionalProperties": False},
    }}]
    r = llm.create_chat_completion(
        [{"role": "user", "content": "What is the weather in Paris?"}],
        tools=tools, tool_choice={"type": "function", "function": {"name": "get_weather"}}, max_tokens=48,
        temperature=0.0,
    )
    call = r["choices"][0]["message"]["tool_calls"][0]
    assert r["choices"][0]["finish_reason"] == "tool_calls"
    assert call["function"]["name"] == "get_weather"
    import json

    assert isinstance(json.loads(call["function"]["arguments"])["city"], str)


def test_another_thread_cancels_a_session_generation(smollm2_path):
    s = ferrolm.Session(smollm2_path, n_ctx=4096)
    timer = threading.Timer(0.3, s.cancel)
    timer.start()
    t0 = time.time()
    s.generate("Once upon a time", max_tokens=3500, ignore_eos=True, temperature=0.0)
    timer.join()
    assert s.last_finish.reason == "cancelled"
    assert s.last_finish.completion_tokens < 3500 and time.time() - t0 < 20
    assert s.generate("The capital of France is", max_tokens=4, temperature=0.0).strip()


def test_a_reranker_scores_documents():
    root = os.path.join(os.path.dirname(__file__), "..", "..", "..", "crates", "ferrolm", "tests",
                        "fixtures", "rerank", "qwen3-reranker")
    model = ferrolm.Model(os.path.join(root, "model.gguf"))
    assert model.is_reranker
    import json
    with open(os.path.join(root, "expected.json")) as f:
        q = json.load(f)["queries"][0]
    scores = model.rerank(q["query"], [d["document"] for d in q["documents"]])
    for got, d in zip(scores, q["documents"]):
        assert abs(got - d["score"]) < 1e-2
    assert sorted(range(len(scores)), key=lambda i: -scores[i]) == q["ranking"]
    plain = ferrolm.Model(os.path.join(root, "..", "..", "conformance", "qwen3", "model.gguf"))
    assert not plain.is_reranker
    with pytest.raises(ferrolm.InvalidInputError, match="cannot rerank"):
        plain.rerank("q", ["d"])
