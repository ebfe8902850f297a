#!/usr/bin/env python3
"""End-to-end test of `ferrolm serve` through the official `openai` Python client.

Run it with the venv of setup_venv.sh (it needs `openai`):
    $(bash scripts/server_tests/setup_venv.sh) scripts/server_tests/test_openai_client.py

Starts SmolLM2 with --parallel 4 -c 2048 --alias ferrolm-test and checks chat and text
completions (plain and streamed, usage chunk, greedy stream == non-stream), n=2, stop strings,
max_tokens / max_completion_tokens, seed reproducibility, log-probabilities (chat and legacy),
echo scoring with max_tokens 0, embeddings (float and base64, single and list, unit norm),
response_format json_object / json_schema, tools (SmolLM2's template has none: the generic
format, a JSON call constrained to the offered tools), cached
prompt tokens in usage, the models list, errors as client exceptions, /tokenize + /detokenize,
/health, /metrics, /slots, and --api-key on a second server. One PASS/FAIL line per check; exits
1 when any check fails, 2 when the server cannot start.
"""

import argparse
import base64
import json
import math
import struct
import sys
import threading
import time

import common

try:
    import openai
except ImportError:
    sys.exit("the `openai` package is missing: run this with the python printed by "
             "scripts/server_tests/setup_venv.sh")

MODEL = "ferrolm-test"
N_CTX = 2048
SERVER_ARGS = ["--parallel", "4", "-c", str(N_CTX), "--alias", MODEL]
STORY = [{"role": "user", "content": "Write a short story about a lighthouse keeper."}]
METRIC_NAMES = [
    "requests_total", "requests_finished_total", "requests_cancelled_total", "requests_failed_total",
    "requests_rejected_total", "prompt_tokens_total", "cached_tokens_total", "generated_tokens_total",
    "forward_passes_total", "generation_tokens_per_second", "prompt_tokens_per_second", "queue_depth",
    "slots_busy", "slots_total", "kv_tokens", "kv_bytes", "kv_capacity_tokens", "kv_usage_ratio",
    "prefix_cache_entries", "prefix_cache_tokens", "prefix_cache_bytes", "prefix_cache_hits_total",
    "prefix_cache_lookups_total", "uptime_seconds",
]
SLOT_KEYS = {"id", "state", "request_id", "n_prompt", "n_cached", "n_prompt_done", "n_generated", "n_kv",
             "is_processing", "n_ctx"}


def expect_error(exc_type, status, fn, param=None, code=None):
    """Calls fn, which must raise `exc_type` with HTTP `status` (and error param/code)."""
    try:
        fn()
    except exc_type as e:
        assert e.status_code == status, f"status {e.status_code}, expected {status}"
        err = (e.body or {}) if isinstance(e.body, dict) else {}
        err = err.get("error", err)
        assert isinstance(err.get("message"), str) and err["message"], f"no error message: {e.body}"
        if param is not None:
            assert err.get("param") == param, f"param {err.get('param')!r}, expected {param!r}"
        if code is not None:
            assert err.get("code") == code, f"code {err.get('code')!r}, expected {code!r}"
        return f"{status}: {err['message'][:80]}"
    raise AssertionError(f"no {exc_type.__name__} raised")


def check_usage(u, max_completion=None):
    assert u.prompt_tokens > 0 and u.completion_tokens >= 0, u
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens, u
    assert u.prompt_tokens_details is not None and u.prompt_tokens_details.cached_tokens is not None, u
    assert 0 <= u.prompt_tokens_details.cached_tokens < u.prompt_tokens, u
    if max_completion is not None:
        assert u.completion_tokens <= max_completion, u


class Suite:
    """The checks against one server."""

    def __init__(self, url):
        self.url = url
        self.client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=180)
        self.greedy_chat = None

    def prime(self, **kw):
        """Sends a request once (1 token) so that the prefix cache holds its prompt.

        Greedy results are compared only between requests that find the same cached prefix: a
        prompt run whole and one whose last token runs alone after a cache hit go through other
        kernels, and a near-tie between two tokens may come out either way.
        """
        if "messages" in kw:
            self.client.chat.completions.create(model=MODEL, max_tokens=1, **kw)
        else:
            self.client.completions.create(model=MODEL, max_tokens=1, **kw)

    # -- chat ------------------------------------------------------------------------------------
    def chat_nonstream(self):
        self.prime(messages=STORY)
        r = self.client.chat.completions.create(model=MODEL, messages=STORY, temperature=0, max_tokens=40)
        assert r.object == "chat.completion" and r.id.startswith("chatcmpl-"), (r.object, r.id)
        assert r.model == MODEL, r.model
        assert len(r.choices) == 1 and r.choices[0].index == 0
        m = r.choices[0].message
        assert m.role == "assistant" and isinstance(m.content, str) and m.content.strip(), m
        assert r.choices[0].finish_reason in ("stop", "length"), r.choices[0].finish_reason
        check_usage(r.usage, 40)
        assert r.usage.completion_tokens > 0
        self.greedy_chat = r
        return f"{r.usage.completion_tokens} tokens: {m.content[:60]!r}"

    def chat_stream(self):
        ref = self.greedy_chat
        assert ref is not None, "needs chat_nonstream"
        chunks = list(self.client.chat.completions.create(
            model=MODEL, messages=STORY, temperature=0, max_tokens=40, stream=True,
            stream_options={"include_usage": True}))
        assert chunks, "no chunks"
        content, finishes, role = "", [], None
        for c in chunks[:-1]:
            assert c.object == "chat.completion.chunk" and c.id == chunks[0].id, c
            assert c.usage is None, f"usage before the last chunk: {c}"
            for ch in c.choices:
                role = role or ch.delta.role
                content += ch.delta.content or ""
                if ch.finish_reason:
                    finishes.append(ch.finish_reason)
        last = chunks[-1]
        assert last.choices == [] and last.usage is not None, f"last chunk is not the usage: {last}"
        assert role == "assistant", role
        assert finishes == [ref.choices[0].finish_reason], finishes
        assert content == ref.choices[0].message.content, f"{content!r} != {ref.choices[0].message.content!r}"
        assert last.usage.completion_tokens == ref.usage.completion_tokens, (last.usage, ref.usage)
        assert last.usage.prompt_tokens == ref.usage.prompt_tokens
        return f"{len(chunks)} chunks, content equals the non-streamed reply"

    def n2(self):
        r = self.client.chat.completions.create(model=MODEL, messages=STORY, n=2, temperature=1.0, seed=7,
                                                max_tokens=12)
        assert [c.index for c in r.choices] == [0, 1], r.choices
        assert all(c.message.content for c in r.choices)
        # Streamed: both choices' chunks arrive, each with one finish_reason.
        seen = {0: "", 1: ""}
        finished = set()
        for c in self.client.chat.completions.create(model=MODEL, messages=STORY, n=2, temperature=1.0,
                                                     seed=7, max_tokens=12, stream=True):
            for ch in c.choices:
                seen[ch.index] += ch.delta.content or ""
                if ch.finish_reason:
                    assert ch.index not in finished, "two finish_reasons"
                    finished.add(ch.index)
        assert finished == {0, 1} and seen[0] and seen[1], (finished, seen)
        assert [seen[0], seen[1]] == [c.message.content for c in r.choices], (seen, r.choices)
        return "2 choices, streamed equals non-streamed with the same seed"

    def seed(self):
        kw = dict(model=MODEL, messages=STORY, temperature=1.0, top_p=1.0, max_tokens=24)
        a = self.client.chat.completions.create(seed=1234, **kw).choices[0].message.content
        b = self.client.chat.completions.create(seed=1234, **kw).choices[0].message.content
        c = self.client.chat.completions.create(seed=98765, **kw).choices[0].message.content
        assert a == b, f"same seed, different text: {a!r} vs {b!r}"
        assert a != c, f"different seeds gave the same 24 tokens at temperature 1: {a!r}"
        # Choice i of a request with seed s samples with seed s + i.
        two = self.client.chat.completions.create(seed=1233, n=2, **kw)
        assert two.choices[1].message.content == a, "choice 1 of seed 1233 differs from seed 1234"
        return "same seed same text; other seed differs; choice i uses seed + i"

    def stop(self):
        prompt = "List the numbers from one to thirty in words: one, two, three,"
        self.prime(prompt=prompt)
        full = self.client.completions.create(model=MODEL, prompt=prompt, temperature=0, max_tokens=40)
        text = full.choices[0].text
        assert len(text) > 12, f"greedy text too short to pick a stop string: {text!r}"
        k = len(text) // 2
        stop = text[k:k + 4]
        expected = text[:text.index(stop)]
        r = self.client.completions.create(model=MODEL, prompt=prompt, temperature=0, max_tokens=40,
                                           stop=[stop, "NEVER-SEEN"])
        assert r.choices[0].text == expected, f"{r.choices[0].text!r} != {expected!r} (stop {stop!r})"
        assert r.choices[0].finish_reason == "stop", r.choices[0].finish_reason
        streamed = "".join(c.choices[0].text for c in self.client.completions.create(
            model=MODEL, prompt=prompt, temperature=0, max_tokens=40, stop=stop, stream=True) if c.choices)
        assert streamed == expected, f"streamed {streamed!r} != {expected!r}"
        return f"stop {stop!r} cut the text at {len(expected)} chars"

    def max_tokens(self):
        r = self.client.chat.completions.create(model=MODEL, messages=STORY, max_tokens=5,
                                                extra_body={"ignore_eos": True})
        assert r.usage.completion_tokens == 5 and r.choices[0].finish_reason == "length", r
        r = self.client.chat.completions.create(model=MODEL, messages=STORY, max_completion_tokens=3,
                                                extra_body={"ignore_eos": True})
        assert r.usage.completion_tokens == 3 and r.choices[0].finish_reason == "length", r
        r = self.client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=7,
                                           extra_body={"ignore_eos": True})
        assert r.usage.completion_tokens == 7 and r.choices[0].finish_reason == "length", r
        return "5, 3 and 7 tokens, finish_reason length"

    # -- completions -------------------------------------------------------------------------------
    def completion(self):
        self.prime(prompt="The capital of France is")
        r = self.client.completions.create(model=MODEL, prompt="The capital of France is", temperature=0,
                                           max_tokens=16)
        assert r.object == "text_completion" and r.id.startswith("cmpl-"), r
        assert len(r.choices) == 1 and isinstance(r.choices[0].text, str) and r.choices[0].text
        check_usage(r.usage, 16)
        s = list(self.client.completions.create(model=MODEL, prompt="The capital of France is", temperature=0,
                                                max_tokens=16, stream=True, stream_options={"include_usage": True}))
        text = "".join(c.choices[0].text for c in s if c.choices)
        assert text == r.choices[0].text, f"streamed {text!r} != {r.choices[0].text!r}"
        assert s[-1].usage is not None and s[-1].usage.completion_tokens == r.usage.completion_tokens
        reasons = [c.choices[0].finish_reason for c in s if c.choices and c.choices[0].finish_reason]
        assert reasons == [r.choices[0].finish_reason], reasons
        # A batch of prompts: one choice per prompt, in order.
        b = self.client.completions.create(model=MODEL, prompt=["The capital of France is", "1, 2, 3,"],
                                           temperature=0, max_tokens=16)
        assert [c.index for c in b.choices] == [0, 1] and b.choices[0].text == r.choices[0].text, b.choices
        return f"{r.choices[0].text!r}"

    def logprobs_chat(self):
        r = self.client.chat.completions.create(model=MODEL, messages=STORY, temperature=0, max_tokens=10,
                                                logprobs=True, top_logprobs=3)
        c = r.choices[0]
        entries = c.logprobs.content
        assert len(entries) == r.usage.completion_tokens, (len(entries), r.usage)
        joined = b"".join(bytes(e.bytes) for e in entries).decode("utf-8")
        assert joined == c.message.content, f"{joined!r} != {c.message.content!r}"
        for e in entries:
            assert e.logprob <= 0 and len(e.top_logprobs) == 3, e
            lps = [t.logprob for t in e.top_logprobs]
            assert lps == sorted(lps, reverse=True), lps
            # Greedy: the chosen token is the most likely one.
            assert e.token == e.top_logprobs[0].token and abs(e.logprob - lps[0]) < 1e-4, e
            assert sum(math.exp(x) for x in lps) <= 1.0 + 1e-4
        expect_error(openai.BadRequestError, 400, lambda: self.client.chat.completions.create(
            model=MODEL, messages=STORY, max_tokens=2, top_logprobs=30, logprobs=True), param="top_logprobs")
        return f"{len(entries)} tokens with 3 alternatives each"

    def logprobs_completion(self):
        r = self.client.completions.create(model=MODEL, prompt="The sky is", temperature=0, max_tokens=8,
                                           logprobs=2)
        lp = r.choices[0].logprobs
        n = r.usage.completion_tokens
        assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == n
        assert "".join(lp.tokens) == r.choices[0].text
        assert lp.text_offset == sorted(lp.text_offset) and lp.text_offset[0] == 0, lp.text_offset
        for tok, x, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
            assert x <= 0 and 1 <= len(top) <= 2 and abs(max(top.values()) - x) < 1e-4, (tok, x, top)
        return f"{n} tokens"

    def echo_logprobs(self):
        prompt = "The quick brown fox jumps over the lazy"
        r = self.client.completions.create(model=MODEL, prompt=prompt, temperature=0, max_tokens=3,
                                           echo=True, logprobs=1)
        c, u = r.choices[0], r.usage
        assert c.text.startswith(prompt), c.text
        lp = c.logprobs
        assert len(lp.tokens) == u.prompt_tokens + u.completion_tokens, (len(lp.tokens), u)
        assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
        assert all(x is not None and x <= 0 for x in lp.token_logprobs[1:]), lp.token_logprobs
        assert "".join(lp.tokens) == c.text
        # Score the prompt plus the first generated token with max_tokens 0: that token's
        # prompt log-probability must equal its log-probability when it was generated.
        first_gen = lp.tokens[u.prompt_tokens]
        s = self.client.completions.create(model=MODEL, prompt=prompt + first_gen, max_tokens=0, echo=True,
                                           logprobs=0)
        slp = s.choices[0].logprobs
        assert s.usage.completion_tokens == 0 and s.choices[0].text == prompt + first_gen, s
        assert slp.tokens == lp.tokens[:u.prompt_tokens + 1], (slp.tokens, lp.tokens)
        for a, b in zip(slp.token_logprobs[1:], lp.token_logprobs[1:u.prompt_tokens + 1]):
            assert abs(a - b) < 2e-2, f"scored {a} vs generated {b}"
        expect_error(openai.BadRequestError, 400, lambda: self.client.completions.create(
            model=MODEL, prompt=prompt, max_tokens=0), param="max_tokens")
        return f"{u.prompt_tokens} prompt tokens scored; max_tokens 0 without echo is 400"

    # -- embeddings --------------------------------------------------------------------------------
    def embeddings(self):
        one = self.client.embeddings.create(model=MODEL, input="A sentence to embed.", encoding_format="float")
        v = one.data[0].embedding
        dim = len(v)
        assert dim >= 64 and all(isinstance(x, float) for x in v), dim
        assert abs(math.sqrt(sum(x * x for x in v)) - 1) < 1e-3, "not normalized"
        assert one.usage.prompt_tokens > 0
        texts = ["first text", "second, different text", "first text"]
        many = self.client.embeddings.create(model=MODEL, input=texts)  # the client asks for base64
        assert [d.index for d in many.data] == [0, 1, 2]
        vs = [d.embedding for d in many.data]
        assert all(len(x) == dim for x in vs)
        for x in vs:
            assert abs(math.sqrt(sum(a * a for a in x)) - 1) < 1e-3
        assert max(abs(a - b) for a, b in zip(vs[0], vs[2])) < 1e-5, "same text, different vectors"
        assert max(abs(a - b) for a, b in zip(vs[0], vs[1])) > 1e-3, "different texts, same vector"
        raw = common.post_json(self.url + "/v1/embeddings", {"input": "A sentence to embed.",
                                                            "encoding_format": "base64"})[1]
        b = base64.b64decode(raw["data"][0]["embedding"])
        decoded = struct.unpack(f"<{len(b) // 4}f", b)
        assert len(decoded) == dim and max(abs(a - b) for a, b in zip(decoded, v)) < 1e-6
        return f"dimension {dim}, unit norm, base64 == float"

    # -- constrained output ------------------------------------------------------------------------
    def json_object(self):
        r = self.client.chat.completions.create(
            model=MODEL, temperature=0, max_tokens=300, response_format={"type": "json_object"},
            messages=[{"role": "user", "content": "Describe a cat as a JSON object with a name and an age."}])
        text = r.choices[0].message.content
        assert r.choices[0].finish_reason == "stop", f"{r.choices[0].finish_reason}: {text!r}"
        obj = json.loads(text)
        assert isinstance(obj, dict), obj
        return f"{text[:70]!r}"

    def json_schema(self):
        schema = {
            "type": "object",
            "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer"},
                           "indoor": {"type": "boolean"}},
            "required": ["name", "age", "indoor"],
            "additionalProperties": False,
        }
        r = self.client.chat.completions.create(
            model=MODEL, temperature=0, max_tokens=200,
            response_format={"type": "json_schema", "json_schema": {"name": "cat", "schema": schema, "strict": True}},
            messages=[{"role": "user", "content": "Give me a cat's name, age and whether it lives indoors."}])
        text = r.choices[0].message.content
        assert r.choices[0].finish_reason == "stop", f"{r.choices[0].finish_reason}: {text!r}"
        obj = json.loads(text)
        assert set(obj) == {"name", "age", "indoor"}, obj
        assert isinstance(obj["name"], str) and len(obj["name"]) <= 20, obj
        assert isinstance(obj["age"], int) and not isinstance(obj["age"], bool), obj
        assert isinstance(obj["indoor"], bool), obj
        expect_error(openai.BadRequestError, 400, lambda: self.client.chat.completions.create(
            model=MODEL, messages=STORY, response_format={"type": "json_schema",
                                                          "json_schema": {"name": "x", "schema": 5}}))
        return f"{obj}"

    def tools(self):
        # An enum keeps the tiny model's arguments short.
        tools = [{"type": "function", "function": {
            "name": "get_weather", "description": "Weather of a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]}},
                           "required": ["city"]}}}]
        msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
        # SmolLM2's chat template never mentions tools: the generic format (the tools in a system
        # instruction, the answer constrained to a call of an offered tool or a response;
        # crates/ferrolm-server/src/api/generic_tools.rs). A required or named call is a call.
        for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
            r = self.client.chat.completions.create(model=MODEL, messages=msgs, tools=tools, tool_choice=choice,
                                                    temperature=0, max_tokens=64)
            c = r.choices[0]
            assert c.finish_reason == "tool_calls" and c.message.tool_calls, c
            call = c.message.tool_calls[0]
            assert call.function.name == "get_weather", call
            assert json.loads(call.function.arguments)["city"] in ("Paris", "Oslo"), call
        # The call and its result go back as history; auto may call or answer.
        history = msgs + [{"role": "assistant", "content": None, "tool_calls": [
            {"id": call.id, "type": "function", "function": {"name": "get_weather", "arguments": call.function.arguments}}]},
            {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 21 C"}]
        r = self.client.chat.completions.create(model=MODEL, messages=history, tools=tools, temperature=0,
                                                max_tokens=64)
        c = r.choices[0]
        assert c.finish_reason in ("tool_calls", "stop", "length"), c
        assert c.message.tool_calls or c.message.content, c
        # tool_choice "none" offers no tool: a plain answer.
        r = self.client.chat.completions.create(model=MODEL, messages=msgs, tools=tools, tool_choice="none",
                                                temperature=0, max_tokens=8)
        c = r.choices[0]
        assert c.message.content and not c.message.tool_calls and c.finish_reason != "tool_calls", c
        # A tool_choice naming a tool that is not offered, and a malformed tool, are 400s.
        expect_error(openai.BadRequestError, 400, lambda: self.client.chat.completions.create(
            model=MODEL, messages=msgs, tools=tools, max_tokens=8,
            tool_choice={"type": "function", "function": {"name": "nope"}}), param="tool_choice")
        expect_error(openai.BadRequestError, 400, lambda: self.client.chat.completions.create(
            model=MODEL, messages=msgs, tools=[{"type": "function"}], max_tokens=8), param="tools[0]")
        return f"generic tool calls: {call.function.name}({call.function.arguments}); tool_choice none answers"

    # -- usage, models, errors -----------------------------------------------------------------------
    def cached_tokens(self):
        msgs = [{"role": "user", "content": f"Cache probe {time.time_ns()}: name three rivers in Europe."}]
        a = self.client.chat.completions.create(model=MODEL, messages=msgs, temperature=0, max_tokens=4)
        b = self.client.chat.completions.create(model=MODEL, messages=msgs, temperature=0, max_tokens=4)
        ca, cb = a.usage.prompt_tokens_details.cached_tokens, b.usage.prompt_tokens_details.cached_tokens
        assert a.usage.prompt_tokens == b.usage.prompt_tokens
        # The last prompt token always runs (its logits start generation).
        assert cb == b.usage.prompt_tokens - 1, f"second request cached {cb} of {b.usage.prompt_tokens}"
        assert ca < cb, f"first request already cached {ca}"
        return f"first {ca}, repeat {cb} of {b.usage.prompt_tokens} prompt tokens cached"

    def models(self):
        models = self.client.models.list().data
        ids = [m.id for m in models]
        # One model, as llama-server lists it; its --alias names in `aliases`.
        assert ids == [MODEL] and models[0].aliases == [MODEL], models
        m = self.client.models.retrieve(MODEL)
        assert m.id == MODEL and m.object == "model", m
        # Every name answers requests, and the answer names the model by the name asked.
        r = self.client.completions.create(model=models[0].aliases[0], prompt="Hi", max_tokens=1)
        assert r.model == models[0].aliases[0], r.model
        # Any other name is served too (llama-server's behaviour), answered under the id.
        r = self.client.completions.create(model="gpt-3.5-turbo-instruct", prompt="Hi", max_tokens=1)
        assert r.model == MODEL, r.model
        expect_error(openai.NotFoundError, 404, lambda: self.client.models.retrieve("no-such-model"))
        return f"{ids} aliases {models[0].aliases}"

    def responses(self):
        # The Responses API through the SDK: plain, streamed (greedy: the same text), cut short.
        ask = dict(model=MODEL, instructions="You are a poet.", input=[
            {"role": "user", "content": [{"type": "input_text", "text": "Write one sentence about the sea."}]}])
        self.client.responses.create(**ask, max_output_tokens=1)  # cached alike for both calls (see prime)
        r = self.client.responses.create(**ask, max_output_tokens=200, temperature=0)
        assert r.object == "response" and r.id.startswith("resp_") and r.status == "completed", r
        assert r.model == MODEL and r.output_text.strip(), r
        assert r.usage.input_tokens > 10 and r.usage.output_tokens > 0, r.usage
        with self.client.responses.stream(**ask, max_output_tokens=200, temperature=0) as s:
            text = "".join(e.delta for e in s if e.type == "response.output_text.delta")
            final = s.get_final_response()
        assert text == r.output_text == final.output_text, (text, r.output_text)
        short = self.client.responses.create(**ask, max_output_tokens=3, temperature=0)
        assert short.status == "incomplete" and short.incomplete_details.reason == "max_output_tokens", short
        kinds = [e.type for e in self.client.responses.create(**ask, max_output_tokens=3, stream=True)]
        assert kinds[0] == "response.created" and kinds[-1] == "response.incomplete", kinds
        expect_error(openai.BadRequestError, 400, lambda: self.client.responses.create(
            model=MODEL, input="x", previous_response_id="resp_1"), param="previous_response_id")
        return f"{r.usage.output_tokens} tokens, streamed equal; max_output_tokens 3 -> incomplete"

    def errors(self):
        out = []
        for bad in (-1, 0, N_CTX + 1, 10**12):
            expect_error(openai.BadRequestError, 400, lambda: self.client.chat.completions.create(
                model=MODEL, messages=STORY, max_tokens=bad), param="max_tokens")
        out.append(expect_error(openai.BadRequestError, 400, lambda: self.client.completions.create(
            model=MODEL, prompt="x", max_tokens=-5), param="max_tokens"))
        expect_error(openai.BadRequestError, 400, lambda: self.client.chat.completions.create(
            model=MODEL, messages="hi"), param="messages")
        # An empty list is rendered as it is (the generation prompt alone), as llama-server does.
        r = self.client.chat.completions.create(model=MODEL, messages=[], max_tokens=2)
        assert r.choices[0].finish_reason in ("length", "stop"), r
        expect_error(openai.BadRequestError, 400, lambda: self.client.chat.completions.create(
            model=MODEL, messages=STORY, n=0), param="n")
        expect_error(openai.BadRequestError, 400, lambda: self.client.completions.create(
            model=MODEL, prompt="word " * (N_CTX + 10)), code="context_length_exceeded")
        return "; ".join(out)

    # -- llama-server style routes -----------------------------------------------------------------
    def tokenize(self):
        text = "Hello, world! Ünïcödé ✓ and 日本語 text."
        st, tok = common.post_json(self.url + "/tokenize", {"content": text})
        assert st == 200 and tok["tokens"] and all(isinstance(t, int) for t in tok["tokens"]), tok
        st, de = common.post_json(self.url + "/detokenize", {"tokens": tok["tokens"]})
        assert st == 200 and de["content"] == text, de
        st, pieces = common.post_json(self.url + "/tokenize", {"content": text, "with_pieces": True})
        assert [p["id"] for p in pieces["tokens"]] == tok["tokens"]
        joined = b"".join(p["piece"].encode() if isinstance(p["piece"], str) else bytes(p["piece"])
                          for p in pieces["tokens"])
        assert joined.decode("utf-8") == text, joined
        return f"{len(tok['tokens'])} tokens, round trip exact"

    def health(self):
        st, body = common.get_json(self.url + "/health")
        assert st == 200 and body == {"status": "ok"}, (st, body)

    def metrics(self):
        st, text = common.get_text(self.url + "/metrics")
        assert st == 200, st
        for n in METRIC_NAMES:
            full = "ferrolm_" + n
            assert f"# TYPE {full} " in text and f"# HELP {full} " in text, f"{full} missing"
        m = common.metrics(self.url)
        assert m["ferrolm_slots_total"] == 4, m["ferrolm_slots_total"]
        assert m["ferrolm_requests_total"] > 10 and m["ferrolm_generated_tokens_total"] > 50, m
        assert m["ferrolm_prefix_cache_hits_total"] >= 1 and m["ferrolm_cached_tokens_total"] > 0, m
        assert m["ferrolm_kv_capacity_tokens"] == 4 * N_CTX, m["ferrolm_kv_capacity_tokens"]
        return f"{len(METRIC_NAMES)} metrics; requests_total {m['ferrolm_requests_total']:.0f}"

    def slots(self):
        # /slots is published after the engine tick that ended the previous request.
        deadline = time.monotonic() + 2
        while True:
            st, slots = common.get_json(self.url + "/slots")
            if st != 200 or all(s.get("state") == "idle" for s in slots) or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        assert st == 200 and isinstance(slots, list) and len(slots) == 4, slots
        assert [s["id"] for s in slots] == [0, 1, 2, 3]
        for s in slots:
            assert set(s) == SLOT_KEYS, s
            assert s["state"] == "idle" and s["request_id"] == 0, s
        # While a request streams, one slot shows it.
        busy, usage = [], {}

        def watch():
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and not usage:
                rows = common.get_json(self.url + "/slots")[1]
                busy.extend(r for r in rows if r["state"] != "idle")
                time.sleep(0.02)

        t = threading.Thread(target=watch)
        t.start()
        for c in self.client.chat.completions.create(model=MODEL, messages=STORY, max_tokens=60, stream=True,
                                                     stream_options={"include_usage": True},
                                                     extra_body={"ignore_eos": True}):
            if c.usage:
                usage["u"] = c.usage
        t.join()
        assert busy, "no busy slot seen while a request ran"
        assert {r["state"] for r in busy} <= {"prefill", "generating"}, busy
        assert all(r["n_prompt"] == usage["u"].prompt_tokens and r["request_id"] > 0 for r in busy), busy
        assert max(r["n_generated"] for r in busy) > 0
        return f"{len(busy)} busy rows seen; idle rows have request_id 0"


def api_key_checks(checks, args):
    """A second server with --api-key: 401 without or with a wrong key, 200 with it, /health open."""
    key = "s3cret-test-key"
    with common.Server(args.binary, common.find_model(args.model),
                       ["--parallel", "1", "-c", "512", "--api-key", key]) as srv:
        def run():
            bad = openai.OpenAI(base_url=srv.url + "/v1", api_key="wrong", max_retries=0, timeout=60)
            expect_error(openai.AuthenticationError, 401, lambda: bad.models.list(), code="invalid_api_key")
            expect_error(openai.AuthenticationError, 401, lambda: bad.chat.completions.create(
                model="x", messages=STORY, max_tokens=1))
            r = common.request("GET", srv.url + "/v1/models")
            assert r.status == 401 and common.is_openai_error(r.json()), r
            assert r.headers.get("WWW-Authenticate") == "Bearer", dict(r.headers)
            assert common.request("GET", srv.url + "/metrics").status == 401
            assert common.request("GET", srv.url + "/slots").status == 401
            assert common.request("POST", srv.url + "/tokenize", {"content": "x"}).status == 401
            assert common.request("GET", srv.url + "/health").status == 200
            good = openai.OpenAI(base_url=srv.url + "/v1", api_key=key, max_retries=0, timeout=60)
            assert good.models.list().data
            r = good.chat.completions.create(model=good.models.list().data[0].id, messages=STORY, max_tokens=2)
            assert r.choices[0].message.content is not None
            hdr = {"Authorization": f"Bearer {key}"}
            assert common.request("GET", srv.url + "/metrics", headers=hdr).status == 200
            return "401 without / with a wrong key, 200 with it, /health open"

        checks.run("api_key", run)


def main():
    p = common.add_common_args(argparse.ArgumentParser(description=__doc__,
                                                       formatter_class=argparse.RawDescriptionHelpFormatter))
    args = p.parse_args()
    checks = common.Checks()

    def run():
        with common.Server(args.binary, common.find_model(args.model), SERVER_ARGS) as srv:
            s = Suite(srv.url)
            for name in ("health", "models", "chat_nonstream", "chat_stream", "completion", "n2", "seed",
                         "stop", "max_tokens", "logprobs_chat", "logprobs_completion", "echo_logprobs",
                         "embeddings", "json_object", "json_schema", "tools", "cached_tokens", "responses", "errors",
                         "tokenize", "slots", "metrics"):
                checks.run(name, getattr(s, name))
        api_key_checks(checks, args)
        return checks.summary("test_openai_client")

    return common.setup_or_exit(run)


if __name__ == "__main__":
    sys.exit(main())
