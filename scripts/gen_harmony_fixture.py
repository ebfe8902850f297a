#!/usr/bin/env python3
"""Writes crates/ferrolm-chat/testdata/gpt_oss_renders.json: the gpt-oss ("harmony") chat
template rendered by Python jinja2 the way Hugging Face transformers renders it, for the
conversations below (with the messages adjusted as llama.cpp adjusts them for gpt-oss). ferrolm-chat's tests render the same conversations and compare.

The template (crates/ferrolm-chat/testdata/openai-gpt-oss-120b.jinja) is llama.cpp's
models/templates/openai-gpt-oss-120b.jinja. `strftime_now` is pinned to TODAY (the tests pass
the same date as `RenderOptions::today`).

Run once from the repository root (needs `pip install jinja2`):
    python3 scripts/gen_harmony_fixture.py
"""

import datetime
import json
import pathlib

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = pathlib.Path(__file__).resolve().parent.parent
DATA = ROOT / "crates" / "ferrolm-chat" / "testdata"
TODAY = datetime.date(2025, 3, 7)

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city"},
                "unit": {"type": "string", "enum": ["c", "f"]},
                "days": {"type": "integer"},
            },
            "required": ["city"],
        },
    },
}

SYSTEM_USER = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is 2+2?"},
]

# (name, messages, add_generation_prompt, tools, extra variables)
CASES = [
    ("system_user_generation_prompt", SYSTEM_USER, True, None, {}),
    ("user_only_high_effort", [{"role": "user", "content": "Hi"}], True, None, {"reasoning_effort": "high"}),
    (
        "past_turn_drops_its_thinking",
        SYSTEM_USER
        + [
            {"role": "assistant", "content": "4", "reasoning_content": "2 plus 2 is 4."},
            {"role": "user", "content": "And 3+3?"},
        ],
        True,
        None,
        {},
    ),
    (
        "last_assistant_turn_with_thinking",
        SYSTEM_USER + [{"role": "assistant", "content": "4", "reasoning_content": "2 plus 2 is 4."}],
        False,
        None,
        {},
    ),
    (
        "tools_and_a_tool_call",
        [
            {"role": "user", "content": "Weather in Rome?"},
            {
                "role": "assistant",
                "content": None,
                "reasoning_content": "I should call get_weather.",
                "tool_calls": [
                    {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Rome"}}}
                ],
            },
            {"role": "tool", "content": "sunny", "tool_call_id": "call_1"},
        ],
        True,
        [WEATHER_TOOL],
        {},
    ),
]


def llama_cpp_messages(messages):
    """The messages as llama.cpp gives them to gpt-oss's template: an empty content as "",
    `reasoning_content` copied to `thinking`, and no content on a tool-call turn with reasoning
    (ferrolm's `ThinkingTags::adapt_messages` does the same, leaving such a content empty)."""
    out = []
    for m in messages:
        m = dict(m)
        if m.get("content") is None:
            m["content"] = ""
        if isinstance(m.get("reasoning_content"), str):
            m["thinking"] = m["reasoning_content"]
            if m.get("tool_calls"):
                del m["content"]
        out.append(m)
    return out


def environment():
    """jinja2 set up as transformers sets it up."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.combine(TODAY, datetime.time()).strftime(fmt)
    return env


def main():
    source = (DATA / "openai-gpt-oss-120b.jinja").read_text()
    template = environment().from_string(source)
    out = []
    for name, messages, add_generation_prompt, tools, extra in CASES:
        variables = dict(extra)
        text = template.render(
            messages=llama_cpp_messages(messages),
            tools=tools,
            documents=None,
            add_generation_prompt=add_generation_prompt,
            bos_token="<|startoftext|>",
            eos_token="<|return|>",
            **variables,
        )
        out.append(
            {
                "name": name,
                "messages": messages,
                "add_generation_prompt": add_generation_prompt,
                "tools": tools,
                "kwargs": variables,
                "today": TODAY.isoformat(),
                "expected": text,
            }
        )
    path = DATA / "gpt_oss_renders.json"
    path.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {len(out)} renders to {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
