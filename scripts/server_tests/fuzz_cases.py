"""Request cases for test_fuzz.py: explicit bad requests with their expected status, and a seeded
generator of random and mutated request bodies.

The explicit cases assume the fuzz server's setup: SmolLM2 (no BOS token, no tools in its chat
template), --ctx-size 256 and --max-body-bytes MAX_BODY.
"""

import json
from dataclasses import dataclass, field

N_CTX = 256
MAX_BODY = 256 * 1024
N_VOCAB = 49152  # SmolLM2
# Largest random body; every random body is kept below it.
MAX_RANDOM_BODY = 16 * 1024

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
EMBEDDINGS = "/v1/embeddings"
TOKENIZE = "/tokenize"
DETOKENIZE = "/detokenize"
POST_ENDPOINTS = [CHAT, COMPLETIONS, EMBEDDINGS, TOKENIZE, DETOKENIZE,
                  "/chat/completions", "/completions", "/embeddings"]

BASE = {
    CHAT: {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4},
    COMPLETIONS: {"prompt": "Hello", "max_tokens": 4},
    EMBEDDINGS: {"input": "Hello"},
    TOKENIZE: {"content": "Hello"},
    DETOKENIZE: {"tokens": [1, 2, 3]},
}

# Request fields and their JSON kind: i (integer), f (number), b (bool), s (string), o (object),
# l (array), sl (string or array of strings), x (several shapes).
COMMON_FIELDS = {
    "model": "s", "n": "i", "stream": "b", "stream_options": "o", "stop": "sl", "seed": "i",
    "temperature": "f", "top_p": "f", "top_k": "i", "min_p": "f", "typical_p": "f",
    "frequency_penalty": "f", "presence_penalty": "f", "repeat_penalty": "f", "repeat_last_n": "i",
    "dry_multiplier": "f", "dry_base": "f", "dry_allowed_length": "i", "dry_penalty_last_n": "i",
    "dry_sequence_breakers": "l", "xtc_probability": "f", "xtc_threshold": "f", "mirostat": "i",
    "mirostat_tau": "f", "mirostat_eta": "f", "top_n_sigma": "f", "dynatemp_range": "f",
    "dynatemp_exponent": "f", "min_keep": "i", "samplers": "x", "logit_bias": "x", "ignore_eos": "b",
    "grammar": "s", "json_schema": "o", "response_format": "o", "cache_prompt": "b", "timeout": "f",
}
FIELDS = {
    CHAT: {**COMMON_FIELDS, "messages": "l", "max_tokens": "i", "max_completion_tokens": "i", "logprobs": "b",
           "top_logprobs": "i", "tools": "l", "tool_choice": "x", "chat_template_kwargs": "o"},
    COMPLETIONS: {**COMMON_FIELDS, "prompt": "x", "max_tokens": "i", "logprobs": "i", "echo": "b",
                  "suffix": "s", "best_of": "i"},
    EMBEDDINGS: {"input": "x", "model": "s", "encoding_format": "s", "dimensions": "i", "normalize": "b"},
    TOKENIZE: {"content": "s", "add_special": "b", "parse_special": "b", "with_pieces": "b"},
    DETOKENIZE: {"tokens": "l"},
}
# A value of the wrong type for each kind (and for the fields with several shapes).
WRONG = {"i": "12", "f": "0.5", "b": "true", "s": 12, "o": 5, "l": "x", "sl": 5}
WRONG_X = {"samplers": 5, "logit_bias": "x", "tool_choice": 5, "prompt": 5, "input": 5}


@dataclass
class Case:
    """One request and the status it must get."""

    name: str
    method: str
    path: str
    body: object = None  # bytes are sent as they are; other values as JSON
    status: int = 400
    headers: dict = field(default_factory=dict)
    code: str = None  # the error code the body must name, when set
    param: str = None  # the field the error must name, when set
    chunked: bool = False
    timeout: float = 30.0


TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]


def with_fields(path, **kw):
    """The endpoint's valid base body with fields set. `tool_choice` comes with `tools` (the
    server ignores a tool_choice when no tools are offered)."""
    b = json.loads(json.dumps(BASE[path]))
    b.update(kw)
    if "tool_choice" in kw and "tools" not in kw:
        b["tools"] = TOOLS
    return b


def explicit_cases():
    """Every explicit case (about 230 requests, nearly all answered without generating)."""
    cases = []

    def add(name, path, body, status=400, method="POST", **kw):
        cases.append(Case(name, method, path, body, status, **kw))

    # Bodies that are not a JSON object, on every POST route.
    bad_bodies = {
        "truncated": b'{"messages": [', "empty": b"", "spaces": b"  \n ", "null": b"null", "array": b"[1, 2]",
        "string": b'"text"', "number": b"42", "bad_utf8": b'{"content": "\xff\xfe"}', "trailing": b"{}x",
        "single_quotes": b"{'prompt': 'x'}", "nan_literal": b'{"temperature": NaN}',
        "deep_nesting": b'{"a": ' + b"[" * 5000 + b"]" * 5000 + b"}",
    }
    for path in POST_ENDPOINTS:
        for name, body in bad_bodies.items():
            add(f"body_{name}{path}", path, body)
    # A field of the wrong type, for every field of every endpoint.
    for path, fields in FIELDS.items():
        for f, kind in fields.items():
            wrong = WRONG_X[f] if kind == "x" else WRONG[kind]
            add(f"wrong_type{path}:{f}", path, with_fields(path, **{f: wrong}), param=f)
    # max_tokens and n.
    for path in (CHAT, COMPLETIONS):
        for v in (-1, 10**20, 2**63, 1.5, "16", N_CTX + 1, 2**31):
            add(f"max_tokens={v!r}{path}", path, with_fields(path, max_tokens=v))
        for v in (0, -1, 17, 10**6, 1.5, "2"):
            add(f"n={v!r}{path}", path, with_fields(path, n=v))
    add("max_tokens=0/chat", CHAT, with_fields(CHAT, max_tokens=0))
    add("max_tokens=0/completions_no_echo", COMPLETIONS, with_fields(COMPLETIONS, max_tokens=0))
    add("max_completion_tokens=-3/chat", CHAT, with_fields(CHAT, max_completion_tokens=-3))
    # Numbers that are not finite, or not finite as f32.
    raw_chat = b'{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "temperature": %s}'
    for lit in (b"NaN", b"Infinity", b"-Infinity", b"1e400", b'"NaN"', b'"inf"'):
        add(f"temperature_{lit.decode()}", CHAT, raw_chat % lit)
    for f in ("temperature", "top_p", "min_p", "frequency_penalty", "mirostat_tau", "dynatemp_range"):
        add(f"{f}=1e300", CHAT, with_fields(CHAT, **{f: 1e300}))
        add(f"{f}=-1e300", CHAT, with_fields(CHAT, **{f: -1e300}))
    # Out-of-range sampler values.
    for f, v in (("top_p", 1.5), ("top_p", -0.5), ("min_p", -1), ("min_p", 2), ("repeat_last_n", -2),
                 ("dry_penalty_last_n", -5), ("mirostat", 3), ("mirostat", -1), ("min_keep", -1),
                 ("dry_allowed_length", -1), ("repeat_penalty", 0), ("timeout", 0), ("timeout", -1),
                 ("timeout", 1e10), ("top_logprobs", 21), ("top_logprobs", -1), ("dry_sequence_breakers", [""]),
                 ("stop", ["s%d" % i for i in range(17)]), ("stop", [1]), ("samplers", ["bogus"]),
                 ("samplers", "zz"), ("logit_bias", {"": 1}), ("logit_bias", {str(N_VOCAB): 1}),
                 ("logit_bias", {"5": "x"}), ("logit_bias", {"5": 1e300}), ("logit_bias", [[5]]),
                 ("response_format", {"type": "xml"}), ("response_format", {}),
                 ("response_format", {"type": "json_schema"}), ("response_format", "json"),
                 ("response_format", {"type": "json_schema", "json_schema": {"schema": 5}}),
                 ("json_schema", {"type": "object", "properties": 5}), ("json_schema", 5),
                 ("grammar", "start: ("), ("tools", [{"type": "function"}]), ("tools", [5]),
                 ("tool_choice", "sometimes"), ("tool_choice", {"function": {}})):
        add(f"value/chat:{f}={json.dumps(v)[:40]}", CHAT, with_fields(CHAT, **{f: v}),
            param=f if f == "tool_choice" else None)
    add("top_logprobs_without_logprobs", CHAT, with_fields(CHAT, top_logprobs=5))
    add("two_constraints", CHAT, with_fields(CHAT, grammar='start: "a"', response_format={"type": "json_object"}))
    # SmolLM2's template has no tool syntax: tools take the generic format (a constrained JSON
    # answer), which cannot be combined with another constraint.
    add("tools_generic_format", CHAT, with_fields(CHAT, tools=TOOLS), status=200)
    add("tools_generic_with_response_format", CHAT,
        with_fields(CHAT, tools=TOOLS, response_format={"type": "json_object"}))
    for f, v in (("logprobs", 21), ("logprobs", -1), ("best_of", 3), ("suffix", "tail"), ("prompt", []),
                 ("prompt", ""), ("prompt", [-1]), ("prompt", [1.5]), ("prompt", [N_VOCAB]), ("prompt", [[]]),
                 ("prompt", [{}]), ("prompt", ["ok", {"x": 1}]), ("prompt", {"text": "x"}), ("prompt", None),
                 ("prompt", ["x"] * 1025)):
        add(f"value/completions:{f}={json.dumps(v)[:40]}", COMPLETIONS, with_fields(COMPLETIONS, **{f: v}))
    # Prompts longer than the context.
    long_text = "word " * (N_CTX + 40)
    add("context/chat_long_prompt", CHAT, with_fields(CHAT, messages=[{"role": "user", "content": long_text}]),
        code="context_length_exceeded")
    add("context/completions_long_prompt", COMPLETIONS, with_fields(COMPLETIONS, prompt=long_text),
        code="context_length_exceeded")
    add("context/completions_long_tokens", COMPLETIONS, with_fields(COMPLETIONS, prompt=[42] * (N_CTX + 1)),
        code="context_length_exceeded")
    add("context/completions_full_context_no_room", COMPLETIONS,
        with_fields(COMPLETIONS, prompt=[42] * N_CTX, max_tokens=1), code="context_length_exceeded")
    add("context/completions_batch_one_long", COMPLETIONS,
        with_fields(COMPLETIONS, prompt=["short", long_text]), code="context_length_exceeded")
    # Any model name is served (as llama-server); only looking one up by name can miss.
    add("model_unknown/get", "/v1/models/gpt-4", None, status=404, method="GET", code="model_not_found")
    # Messages.
    # An empty list renders the template's generation prompt alone, as llama-server does.
    add("messages/empty_is_answered", CHAT, with_fields(CHAT, messages=[]), status=200)
    for name, msgs in (("missing", None), ("string", "hi"), ("number_item", [5]),
                       ("no_role", [{"content": "hi"}]), ("role_robot", [{"role": "robot", "content": "hi"}]),
                       ("role_number", [{"role": 5, "content": "hi"}]), ("role_empty", [{"role": "", "content": "x"}]),
                       ("user_no_content", [{"role": "user"}]), ("content_number", [{"role": "user", "content": 5}]),
                       ("content_image", [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]),
                       ("content_part_no_text", [{"role": "user", "content": [{"type": "text"}]}]),
                       ("content_part_string", [{"role": "user", "content": ["hi"]}]),
                       ("user_tool_calls", [{"role": "user", "content": "x", "tool_calls": []}]),
                       ("name_number", [{"role": "user", "content": "x", "name": 5}]),
                       ("assistant_tool_calls_string", [{"role": "assistant", "tool_calls": "x"}]),
                       ("tool_call_no_name", [{"role": "assistant", "tool_calls": [{"function": {}}]}])):
        body = with_fields(CHAT)
        if msgs is None:
            del body["messages"]
        else:
            body["messages"] = msgs
        add(f"messages/{name}", CHAT, body)
    # Body size, content type, routes and methods.
    huge = json.dumps({"prompt": "x" * (MAX_BODY + 1000), "max_tokens": 1}).encode()
    for path in (CHAT, COMPLETIONS, EMBEDDINGS, TOKENIZE):
        add(f"body_too_large{path}", path, huge, status=413, code="request_too_large")
    add("body_too_large_chunked", COMPLETIONS, huge, status=413, code="request_too_large", chunked=True)
    add("content_type_form", CHAT, b"messages=hi&max_tokens=2",
        headers={"Content-Type": "application/x-www-form-urlencoded"})
    for method, path, status in (("GET", "/v1/nope", 404), ("POST", "/v2/chat/completions", 404),
                                 ("GET", "/v1/chat/completions", 405), ("GET", "/v1/embeddings", 405),
                                 ("DELETE", "/health", 405), ("PUT", "/v1/models", 405), ("POST", "/metrics", 405),
                                 ("POST", "/slots", 405), ("GET", "/tokenize", 405),
                                 ("PATCH", "/v1/completions", 405), ("POST", "/v1/nope", 404)):
        add(f"route/{method} {path}", path, None if method == "GET" else b"{}", status=status, method=method)
    # Embeddings, tokenize, detokenize.
    for name, body in (("input_empty_list", {"input": []}), ("input_empty_string", {"input": ""}),
                       ("input_mixed", {"input": ["x", {"a": 1}]}), ("input_object", {"input": {"a": 1}}),
                       ("input_bad_token", {"input": [N_VOCAB]}), ("input_missing", {}),
                       ("format_xml", {"input": "x", "encoding_format": "xml"}),
                       ("dimensions", {"input": "x", "dimensions": 8}), ("too_many", {"input": ["a"] * 2049})):
        add(f"embeddings/{name}", EMBEDDINGS, body)
    for name, body in (("content_number", {"content": 5}), ("content_null", {"content": None}),
                       ("content_list", {"content": [1]}), ("missing", {}),
                       ("with_pieces_string", {"content": "x", "with_pieces": "x"}),
                       ("add_special_number", {"content": "x", "add_special": 1})):
        add(f"tokenize/{name}", TOKENIZE, body)
    for name, body in (("string", {"tokens": "x"}), ("negative", {"tokens": [-1]}), ("float", {"tokens": [1.5]}),
                       ("out_of_vocab", {"tokens": [N_VOCAB]}), ("string_item", {"tokens": ["a"]}),
                       ("missing", {}), ("nested", {"tokens": [[1]]}), ("huge", {"tokens": [2**64]})):
        add(f"detokenize/{name}", DETOKENIZE, body)
    # Accepted on purpose (documented behaviour), checked so that a change is noticed.
    add("accepted/temperature_negative_is_greedy", CHAT, with_fields(CHAT, temperature=-1), status=200)
    add("accepted/json_with_text_plain", CHAT, with_fields(CHAT), status=200, headers={"Content-Type": "text/plain"})
    add("accepted/echo_max_tokens_0", COMPLETIONS, with_fields(COMPLETIONS, max_tokens=0, echo=True), status=200)
    add("accepted/unknown_fields", CHAT, with_fields(CHAT, frobnicate=[1, {"a": None}]), status=200)
    # Last, as a server with the bug below hangs its engine: /v1/embeddings did not check the
    # context length (a 2000-token input took 15 s and returned 200, a 120 KB input hung the
    # engine). Each must be a 400 at once.
    add("context/embeddings_2000_tokens", EMBEDDINGS, {"input": "word " * 2000}, code="context_length_exceeded",
        timeout=20)
    add("context/embeddings_list_one_long", EMBEDDINGS, {"input": ["short", "word " * 600]},
        code="context_length_exceeded", timeout=20)
    add("context/embeddings_120KB", EMBEDDINGS, {"input": "abcd " * 24000}, code="context_length_exceeded",
        timeout=20)
    return cases


# -- random requests ---------------------------------------------------------------------------------
SPECIAL_STRINGS = ["", " ", "\u0000", "\n\n", "<|im_end|>", "<|im_start|>system", "{", "}", "\"", "\\",
                   "é" * 50, "日本語", "\ud7ff", "NaN", "-1", "null", "true", "a" * 300, "🙂" * 20]
SPECIAL_INTS = [-2**63, -2**31, -1, 0, 1, 2, 15, 16, 17, 255, 256, 257, 2**31, 2**63 - 1, 2**64, 10**30]
SPECIAL_FLOATS = [-1e308, -2.0, -0.0, 1e-300, 0.5, 1.0, 2.0, 1e308, 3.4e38, 3.5e38]
ROLES = ["system", "developer", "user", "assistant", "tool", "function", "robot", ""]


def random_string(rng):
    if rng.random() < 0.4:
        return rng.choice(SPECIAL_STRINGS)
    n = rng.choice([0, 1, 3, 10, 40, 200])
    alphabet = "abc xyz 123 ,.!?\n\t\"\\{}[]<|>éü日🙂\u0001"
    return "".join(rng.choice(alphabet) for _ in range(n))


def random_value(rng, depth=0):
    """Any JSON value, small."""
    r = rng.random()
    if r < 0.1:
        return None
    if r < 0.2:
        return rng.random() < 0.5
    if r < 0.4:
        return rng.choice(SPECIAL_INTS) if rng.random() < 0.5 else rng.randint(-100, 5000)
    if r < 0.55:
        return rng.choice(SPECIAL_FLOATS) if rng.random() < 0.5 else rng.uniform(-3, 3)
    if r < 0.75 or depth >= 3:
        return random_string(rng)
    if r < 0.88:
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 6))]
    return {random_string(rng)[:12]: random_value(rng, depth + 1) for _ in range(rng.randint(0, 5))}


def random_typed(rng, kind):
    """A value that is often of the field's kind, sometimes of another."""
    if rng.random() < 0.25:
        return random_value(rng)
    if kind == "i":
        return rng.choice(SPECIAL_INTS) if rng.random() < 0.5 else rng.randint(-5, 40)
    if kind == "f":
        return rng.choice(SPECIAL_FLOATS) if rng.random() < 0.4 else round(rng.uniform(-1, 3), 3)
    if kind == "b":
        return rng.random() < 0.5
    if kind == "s":
        return random_string(rng)
    if kind in ("l", "sl", "x"):
        return [random_value(rng, 1) if rng.random() < 0.3 else random_string(rng) for _ in range(rng.randint(0, 5))]
    return random_value(rng)


def random_messages(rng):
    msgs = []
    for _ in range(rng.randint(0, 4)):
        m = {"role": rng.choice(ROLES)}
        if rng.random() < 0.85:
            m["content"] = (random_string(rng) if rng.random() < 0.7
                            else [{"type": rng.choice(["text", "image_url"]), "text": random_string(rng)}])
        if rng.random() < 0.1:
            m["tool_calls"] = [{"function": {"name": random_string(rng), "arguments": random_string(rng)}}]
        if rng.random() < 0.1:
            m[rng.choice(["name", "tool_call_id"])] = random_value(rng)
        msgs.append(m)
    return msgs


def random_request(rng):
    """(path, body bytes, description) of a random or mutated request; the body is at most
    MAX_RANDOM_BODY bytes."""
    while True:
        path = rng.choice(POST_ENDPOINTS)
        canon = {"/chat/completions": CHAT, "/completions": COMPLETIONS, "/embeddings": EMBEDDINGS}.get(path, path)
        fields = FIELDS[canon]
        if rng.random() < 0.05:
            body = random_value(rng)
        else:
            body = json.loads(json.dumps(BASE[canon]))
            for _ in range(rng.randint(1, 5)):
                op = rng.random()
                f = rng.choice(list(fields) + ["unknown_field"])
                if op < 0.15:
                    body.pop(rng.choice(list(body)) if body else f, None)
                elif f == "messages" and rng.random() < 0.7:
                    body[f] = random_messages(rng)
                elif f in ("prompt", "input") and rng.random() < 0.5:
                    body[f] = ([rng.randint(-2, N_VOCAB + 2) for _ in range(rng.randint(0, 20))]
                               if rng.random() < 0.5 else random_string(rng))
                else:
                    body[f] = random_typed(rng, fields.get(f, "x"))
            if canon in (CHAT, COMPLETIONS):
                # Keep generation short most of the time (the server's --timeout bounds the rest).
                if "max_tokens" not in body and rng.random() < 0.7:
                    body["max_tokens"] = rng.randint(1, 24)
                # Streams, several choices and log-probabilities often, to reach those paths.
                if rng.random() < 0.25:
                    body["stream"] = True
                    if rng.random() < 0.5:
                        body["stream_options"] = {"include_usage": rng.random() < 0.8}
                if rng.random() < 0.1:
                    body["n"] = rng.randint(1, 4)
                if rng.random() < 0.1:
                    body.update({"logprobs": True, "top_logprobs": rng.randint(0, 5)} if canon == CHAT
                                else {"logprobs": rng.randint(0, 5), "echo": rng.random() < 0.5})
        data = json.dumps(body, ensure_ascii=rng.random() < 0.5).encode("utf-8", "surrogatepass")
        r = rng.random()
        how = "json"
        if r < 0.06 and len(data) > 2:
            data = data[:rng.randrange(1, len(data))]
            how = "truncated"
        elif r < 0.1 and data:
            i = rng.randrange(len(data))
            data = data[:i] + bytes([rng.randrange(256)]) + data[i + 1:]
            how = "byte-flipped"
        if len(data) <= MAX_RANDOM_BODY:
            return path, data, how
