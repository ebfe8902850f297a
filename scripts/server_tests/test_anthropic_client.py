#!/usr/bin/env python3
"""The official `anthropic` Python SDK against `ferrolm serve`'s Messages API (/v1/messages).

Server: SmolLM2 with a ChatML template that also renders tools (SmolLM2's own template has no
tool syntax, and the Messages API's tool use goes through the template like a chat request's).
Checks, each through the SDK's own types: a plain message with a system prompt (text block,
stop_reason, usage); max_tokens and stop_sequences (stop_reason max_tokens / stop_sequence with
the matched string); a streamed message (`client.messages.stream`: text deltas that add up to the
final message's text, greedy equal to the plain call); count_tokens; a tool-use round trip in the
history (assistant tool_use, user tool_result) answered by the model; the API key through the
SDK's X-Api-Key header; errors as the SDK's exception types (400 for an image block).
Run by scripts/server_tests/run_all.sh (step `anthropic`) in the venv of setup_venv.sh.
"""

import argparse
import os
import sys
import tempfile

import common

try:
    import anthropic
except ImportError:
    print("ERROR: the anthropic package is missing (bash scripts/server_tests/setup_venv.sh)", file=sys.stderr)
    sys.exit(2)

MODEL = "ferrolm-test"
# ChatML, with the offered tools and earlier tool calls rendered into the conversation.
TEMPLATE = """{%- if tools -%}<|im_start|>system
You can call these tools: {{ tools | tojson }}
Call one as <tool_call>{"name": ..., "arguments": {...}}</tool_call>.<|im_end|>
{% endif -%}
{%- for m in messages -%}
{%- if m.role == 'tool' -%}<|im_start|>user
Tool result: {{ m.content }}<|im_end|>
{% elif m.tool_calls -%}<|im_start|>assistant
{% for c in m.tool_calls %}<tool_call>{{ c.function | tojson }}</tool_call>{% endfor %}<|im_end|>
{% else -%}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}<|im_start|>assistant
{% endif -%}"""
ASK = [{"role": "user", "content": "Write one sentence about the sea."}]


class Suite:
    def __init__(self, url, key):
        self.client = anthropic.Anthropic(base_url=url, api_key=key, max_retries=0, timeout=120)

    def plain(self):
        # Once with one token first, so that this call and the streamed one below both find the
        # prompt in the prefix cache (a prompt run whole and one resumed after a cache hit go
        # through other kernels, and a near-tie between two tokens may come out either way).
        self.client.messages.create(model=MODEL, max_tokens=1, system="You are a poet.", messages=ASK)
        m = self.client.messages.create(model=MODEL, max_tokens=32, system="You are a poet.", messages=ASK)
        assert m.type == "message" and m.role == "assistant" and m.id.startswith("msg_"), m
        assert m.model == MODEL, m.model
        assert m.content and m.content[0].type == "text" and m.content[0].text.strip(), m.content
        assert m.stop_reason in ("end_turn", "max_tokens"), m.stop_reason
        assert m.usage.input_tokens > 10 and 0 < m.usage.output_tokens <= 32, m.usage
        self.greedy = m.content[0].text
        return f"{m.usage.output_tokens} tokens: {m.content[0].text[:50]!r}"

    def limits(self):
        m = self.client.messages.create(model=MODEL, max_tokens=3, messages=ASK)
        assert m.stop_reason == "max_tokens" and m.usage.output_tokens == 3, (m.stop_reason, m.usage)
        words = self.greedy.split()
        stop = words[min(2, len(words) - 1)]
        m = self.client.messages.create(model=MODEL, max_tokens=32, system="You are a poet.", messages=ASK, stop_sequences=[stop])
        assert m.stop_reason == "stop_sequence" and m.stop_sequence == stop, (m.stop_reason, m.stop_sequence)
        assert stop not in m.content[0].text, m.content[0].text
        return f"max_tokens and stop_sequence {stop!r}"

    def stream(self):
        with self.client.messages.stream(model=MODEL, max_tokens=32, system="You are a poet.", messages=ASK) as s:
            text = "".join(s.text_stream)
            final = s.get_final_message()
        assert text == final.content[0].text, (text, final.content)
        assert text == self.greedy, (text, self.greedy)
        assert final.stop_reason in ("end_turn", "max_tokens") and final.usage.output_tokens > 0, final
        return f"{final.usage.output_tokens} tokens streamed, equal to the plain call"

    def count_tokens(self):
        n = self.client.messages.count_tokens(model=MODEL, messages=ASK, system="You are a poet.")
        m = self.client.messages.create(model=MODEL, max_tokens=1, system="You are a poet.", messages=ASK)
        assert n.input_tokens == m.usage.input_tokens, (n, m.usage)
        return f"{n.input_tokens} input tokens"

    def tool_round_trip(self):
        tools = [{"name": "get_weather", "description": "The weather in a city",
                  "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]
        history = [
            {"role": "user", "content": "What is the weather in Paris?"},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Paris"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01", "content": "Sunny, 24 degrees"}]},
        ]
        m = self.client.messages.create(model=MODEL, max_tokens=24, tools=tools, messages=history)
        assert m.content and m.stop_reason in ("end_turn", "max_tokens", "tool_use"), m
        kinds = [b.type for b in m.content]
        assert set(kinds) <= {"text", "tool_use"}, kinds
        n = self.client.messages.count_tokens(model=MODEL, messages=history, tools=tools)
        plain = self.client.messages.count_tokens(model=MODEL, messages=history[:1])
        assert n.input_tokens > plain.input_tokens + 20, (n, plain)
        return f"answered with {kinds}; the tools and the call reached the prompt ({n.input_tokens} tokens)"

    def errors(self):
        bad = [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]}]
        try:
            self.client.messages.create(model=MODEL, max_tokens=4, messages=bad)
        except anthropic.BadRequestError as e:
            assert e.status_code == 400, e
        else:
            raise AssertionError("an image block was accepted")
        return "image block: 400"


def main():
    p = common.add_common_args(argparse.ArgumentParser(description=__doc__.split("\n")[0]))
    args = p.parse_args()
    checks = common.Checks()

    def run():
        with tempfile.TemporaryDirectory() as tmp:
            tpl = os.path.join(tmp, "chatml-tools.jinja")
            with open(tpl, "w") as f:
                f.write(TEMPLATE)
            key = "anthropic-test-key"
            # Greedy (--temp 0): the plain and the streamed call must say the same.
            server_args = ["--parallel", "2", "-c", "2048", "--alias", MODEL, "--chat-template-file", tpl,
                           "--api-key", key, "--temp", "0"]
            with common.Server(args.binary, common.find_model(args.model), server_args) as srv:
                s = Suite(srv.url, key)
                for name in ("plain", "limits", "stream", "count_tokens", "tool_round_trip", "errors"):
                    checks.run(name, getattr(s, name))
                wrong = anthropic.Anthropic(base_url=srv.url, api_key="wrong", max_retries=0)
                checks.run("api_key", lambda: _refused(wrong))
        return checks.summary("test_anthropic_client")

    return common.setup_or_exit(run)


def _refused(client):
    try:
        client.messages.create(model=MODEL, max_tokens=1, messages=ASK)
    except anthropic.AuthenticationError as e:
        assert e.status_code == 401, e
        return "a wrong X-Api-Key is 401"
    raise AssertionError("a wrong key was accepted")


if __name__ == "__main__":
    sys.exit(main())
