"""JSON schemas of llama-cpp-python's result dicts (the TypedDicts of its `llama_types.py`:
OpenAI's completion, chat completion, chunk and embedding shapes), to validate ours against."""

_USAGE = {
    "type": "object",
    "required": ["prompt_tokens", "completion_tokens", "total_tokens"],
    "properties": {k: {"type": "integer", "minimum": 0} for k in ("prompt_tokens", "completion_tokens", "total_tokens")},
}
_FINISH = {"enum": ["stop", "length", "tool_calls", "function_call", None]}
_HEAD = {
    "id": {"type": "string"},
    "created": {"type": "integer"},
    "model": {"type": "string"},
}

COMPLETION = {
    "type": "object",
    "required": ["id", "object", "created", "model", "choices", "usage"],
    "properties": {
        **_HEAD,
        "object": {"const": "text_completion"},
        "choices": {"type": "array", "minItems": 1, "items": {
            "type": "object",
            "required": ["text", "index", "logprobs", "finish_reason"],
            "properties": {"text": {"type": "string"}, "index": {"type": "integer"},
                           "logprobs": {"type": ["object", "null"]}, "finish_reason": _FINISH},
        }},
        "usage": _USAGE,
    },
}

COMPLETION_CHUNK = {**COMPLETION, "required": ["id", "object", "created", "model", "choices"]}

_MESSAGE = {
    "type": "object",
    "required": ["role", "content"],
    "properties": {
        "role": {"const": "assistant"},
        "content": {"type": ["string", "null"]},
        "tool_calls": {"type": "array", "items": {
            "type": "object", "required": ["id", "type", "function"],
            "properties": {"id": {"type": "string"}, "type": {"const": "function"},
                           "function": {"type": "object", "required": ["name", "arguments"],
                                        "properties": {"name": {"type": "string"}, "arguments": {"type": "string"}}}},
        }},
    },
}

CHAT_COMPLETION = {
    "type": "object",
    "required": ["id", "object", "created", "model", "choices", "usage"],
    "properties": {
        **_HEAD,
        "object": {"const": "chat.completion"},
        "choices": {"type": "array", "minItems": 1, "items": {
            "type": "object",
            "required": ["index", "message", "logprobs", "finish_reason"],
            "properties": {"index": {"type": "integer"}, "message": _MESSAGE,
                           "logprobs": {"type": ["object", "null"]}, "finish_reason": _FINISH},
        }},
        "usage": _USAGE,
    },
}

CHAT_CHUNK = {
    "type": "object",
    "required": ["id", "object", "created", "model", "choices"],
    "properties": {
        **_HEAD,
        "object": {"const": "chat.completion.chunk"},
        "choices": {"type": "array", "minItems": 1, "items": {
            "type": "object",
            "required": ["index", "delta", "finish_reason"],
            "properties": {
                "index": {"type": "integer"},
                "delta": {"type": "object", "properties": {"role": {"const": "assistant"},
                                                           "content": {"type": ["string", "null"]}}},
                "finish_reason": _FINISH,
            },
        }},
    },
}

EMBEDDING = {
    "type": "object",
    "required": ["object", "data", "model", "usage"],
    "properties": {
        "object": {"const": "list"},
        "model": {"type": "string"},
        "data": {"type": "array", "minItems": 1, "items": {
            "type": "object", "required": ["object", "embedding", "index"],
            "properties": {"object": {"const": "embedding"}, "index": {"type": "integer"},
                           "embedding": {"type": "array", "minItems": 1, "items": {"type": "number"}}},
        }},
        "usage": {"type": "object", "required": ["prompt_tokens", "total_tokens"],
                  "properties": {"prompt_tokens": {"type": "integer"}, "total_tokens": {"type": "integer"}}},
    },
}
