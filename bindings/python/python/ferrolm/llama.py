"""``Llama``: llama-cpp-python's high-level API over a ferrolm :class:`Session`.

Code written for ``llama_cpp.Llama`` runs by changing the import: the constructor takes the same
common arguments, and ``create_completion``/``create_chat_completion``/``create_embedding`` return
the same OpenAI-shaped dicts (streamed as the same chunks). Like llama-cpp-python, the model's KV
cache is kept between calls and the longest common prefix of the next prompt is reused."""

from __future__ import annotations

import array
import json
import random
import time
import uuid
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

from . import _ferrolm
from ._ferrolm import GenParams, Model
from .errors import InvalidInputError
from .llama_grammar import LlamaGrammar
from .llama_hooks import CompletionLogprobs, chat_logprobs, processor_hook, stopping_hook

#: llama.cpp's "no seed given" value: each generation draws a fresh random seed.
LLAMA_DEFAULT_SEED = 0xFFFFFFFF

#: GGML type numbers llama-cpp-python uses for ``type_k``/``type_v`` and their names.
_GGML_KV_TYPES = {0: "f32", 1: "f16", 2: "q4_0", 8: "q8_0"}

#: Chat formats ferrolm knows by name besides the model's own template.
_CHAT_FORMATS = {
    "chatml": (
        "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] "
        "+ '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
    ),
    "gemma": (
        "{{ bos_token }}{% for message in messages %}{% set role = 'model' if message['role'] == 'assistant' "
        "else 'user' %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}"
        "{% endfor %}{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
    ),
    "llama-2": (
        "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'system' %}"
        "{{ '<<SYS>>\n' + message['content'] + '\n<</SYS>>\n\n' }}{% elif message['role'] == 'user' %}"
        "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% else %}{{ ' ' + message['content'] + eos_token }}"
        "{% endif %}{% endfor %}"
    ),
}

#: llama-cpp-python constructor arguments that select GPU offload, memory mapping or other
#: llama.cpp internals: accepted so that existing code runs, and without effect on ferrolm's
#: CPU engine (which always memory-maps GGUF files).
_IGNORED_ARGS = frozenset({
    "n_gpu_layers", "split_mode", "main_gpu", "tensor_split", "rpc_servers", "vocab_only", "use_mmap",
    "use_mlock", "kv_overrides", "n_ubatch", "n_threads_batch", "rope_scaling_type", "pooling_type",
    "rope_freq_base", "rope_freq_scale", "yarn_ext_factor", "yarn_attn_factor", "yarn_beta_fast",
    "yarn_beta_slow", "yarn_orig_ctx", "logits_all", "offload_kqv", "flash_attn", "op_offload",
    "swa_full", "no_perf", "last_n_tokens_size", "lora_base", "lora_scale", "lora_path", "numa",
    "chat_handler", "draft_model", "tokenizer", "spm_infill", "n_seq_max",
})


def _kv_type(value: Union[int, str, None]) -> str:
    if value is None:
        return "f16"
    if isinstance(value, int):
        if value not in _GGML_KV_TYPES:
            raise InvalidInputError(f"unsupported KV cache type {value} (f32=0, f16=1, q4_0=2, q8_0=8)")
        return _GGML_KV_TYPES[value]
    return value


def _finish_reason(finish: Any) -> str:
    return "length" if finish.finish_reason == "length" else "stop"


class Llama:
    """A model and its KV cache, with llama-cpp-python's ``Llama`` API."""

    def __init__(
        self,
        model_path: str,
        *,
        n_ctx: int = 512,
        n_batch: int = 512,
        n_threads: Optional[int] = None,
        seed: int = LLAMA_DEFAULT_SEED,
        chat_format: Optional[str] = None,
        chat_template: Optional[str] = None,
        embedding: bool = False,
        verbose: bool = True,
        type_k: Union[int, str, None] = None,
        type_v: Union[int, str, None] = None,
        **kwargs: Any,
    ) -> None:
        unknown = sorted(set(kwargs) - _IGNORED_ARGS)
        if unknown:
            raise TypeError(f"Llama() got unexpected keyword arguments: {', '.join(unknown)}")
        self.model_path = model_path
        self.verbose = verbose
        self._model = Model(model_path, n_threads=n_threads)
        self._n_ctx = n_ctx if n_ctx > 0 else self._model.n_ctx_train
        self.n_batch = n_batch
        self._session = _ferrolm.Session(
            self._model, n_ctx=self._n_ctx, n_batch=n_batch, type_k=_kv_type(type_k), type_v=_kv_type(type_v)
        )
        self._embedding = embedding
        if chat_format is not None and chat_template is None and chat_format not in _CHAT_FORMATS:
            raise InvalidInputError(
                f"unknown chat_format '{chat_format}': ferrolm knows {sorted(_CHAT_FORMATS)}; by default "
                "the model's own template is used (or give chat_template=)"
            )
        if chat_template is None and chat_format is None and self._model.chat_template() is None:
            # As llama-cpp-python: a model without a template gets a format guessed from its
            # architecture, else llama-2's.
            chat_format = "gemma" if self._model.arch.startswith("gemma") else "llama-2"
        self._chat_template = chat_template or _CHAT_FORMATS.get(chat_format or "")
        self.chat_format = chat_format
        self.set_seed(seed)
        if verbose:
            import sys

            print(f"ferrolm: loaded {self._model!r}, n_ctx={self._n_ctx}", file=sys.stderr)

    # -- loading -----------------------------------------------------------------------------

    @classmethod
    def from_pretrained(cls, repo_id: str, filename: Optional[str] = None, **kwargs: Any) -> "Llama":
        """Loads a model by name, downloading it on first use: a Hugging Face Hub name
        (``org/repo:Q4_K_M``, ``hf://org/repo/file.gguf``, kept in the Hub's cache with
        ``HF_TOKEN``/``HF_ENDPOINT``/``HF_HUB_OFFLINE`` honoured) or a ``ferrolm pull`` catalog
        name (``smollm2-135m``). ``filename`` is accepted for compatibility but not used: name
        the file in ``repo_id`` (``hf://org/repo/FILE``) or choose it by quant tag."""
        return cls(_ferrolm.resolve_model(repo_id), **kwargs)

    def close(self) -> None:
        """Frees the KV cache (the object is unusable afterwards)."""
        self._session = None  # type: ignore[assignment]

    def __enter__(self) -> "Llama":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- model facts and tokens --------------------------------------------------------------

    def n_ctx(self) -> int:
        return self._n_ctx

    def n_vocab(self) -> int:
        return self._model.n_vocab

    def n_embd(self) -> int:
        return self._model.n_embd

    def token_bos(self) -> int:
        return -1 if self._model.bos is None else self._model.bos

    def token_eos(self) -> int:
        return -1 if self._model.eos is None else self._model.eos

    @property
    def metadata(self) -> Dict[str, str]:
        return {"general.architecture": self._model.arch}

    @property
    def n_tokens(self) -> int:
        """Tokens the KV cache holds."""
        return len(self._session.tokens)

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> List[int]:
        return self._model.tokenize(text, add_bos, special)

    def detokenize(self, tokens: Sequence[int], prev_tokens: Optional[Sequence[int]] = None,
                   special: bool = False) -> bytes:
        return self._model.detokenize(list(tokens), special)

    def reset(self) -> None:
        """Forgets the KV cache: the next prompt is prefilled from scratch."""
        self._session.reset()

    def save_state(self) -> "LlamaState":
        """The state of the context: the tokens the KV cache holds and the seed generator.
        :meth:`load_state` rebuilds the cache from these tokens (ferrolm does not serialise KV
        memory), so a later generation continues exactly as it would have without the detour."""
        ids = list(self._session.tokens)
        raw = array.array("I", ids).tobytes()
        return LlamaState(ids, None, len(ids), raw, len(raw), self._seed, self._rng.getstate())

    def load_state(self, state: "LlamaState") -> None:
        """Restores a :meth:`save_state`: prefills its tokens (reusing the longest prefix
        already cached) and restores the seed generator."""
        ids = [int(t) for t in state.input_ids][: state.n_tokens]
        if ids:
            self._session.prefill(ids)
        else:
            self._session.reset()
        self._seed = state.seed
        if state.rng_state is not None:
            self._rng.setstate(state.rng_state)

    def set_seed(self, seed: int) -> None:
        """Seeds the sampling of the following calls (``LLAMA_DEFAULT_SEED``: random)."""
        self._seed = seed
        self._rng = random.Random() if seed in (LLAMA_DEFAULT_SEED, -1) else random.Random(seed)

    def _call_seed(self, seed: Optional[int]) -> int:
        return self._rng.getrandbits(63) if seed is None else seed & 0xFFFFFFFFFFFFFFFF

    # -- completions -------------------------------------------------------------------------

    def _detokenize_one(self, ids: List[int]) -> bytes:
        return self._model.detokenize(ids, False)

    def _collect(self, tokens: List[int], params: GenParams, hooks: Dict[str, Any],
                 logprobs: Optional[int]) -> Any:
        """Runs a whole generation: ``(text, Tokens, Finish)``."""
        stream = self._session.stream(tokens, params, logprobs=logprobs, **hooks)
        try:
            toks = list(stream)
        finally:
            stream.close()
        finish = stream.finish
        if finish is None:
            raise RuntimeError("the generation ended without a result")
        return "".join(t.text for t in toks), toks, finish

    def _prompt_tokens(self, prompt: Union[str, bytes, Sequence[int]]) -> List[int]:
        if isinstance(prompt, (str, bytes)):
            text = prompt.decode("utf-8") if isinstance(prompt, bytes) else prompt
            tokens = self._model.tokenize(text, True, True)
        else:
            tokens = list(prompt)
        if not tokens:
            raise InvalidInputError("the prompt is empty")
        if len(tokens) >= self._n_ctx:
            raise InvalidInputError(f"Requested tokens ({len(tokens)}) exceed context window of {self._n_ctx}")
        return tokens

    def _params(self, n_prompt: int, max_tokens: Optional[int], seed: Optional[int], stop: Any,
                grammar: Optional[LlamaGrammar], response_format: Optional[Dict[str, Any]],
                unsupported: Dict[str, Any], **sampling: Any) -> GenParams:
        for name, value in unsupported.items():
            if value is not None and value is not False:
                raise InvalidInputError(f"{name} is not supported by ferrolm.Llama")
        room = self._n_ctx - n_prompt
        limit = room if max_tokens is None or max_tokens <= 0 else min(max_tokens, room)
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        constraint: Dict[str, Any] = grammar.params() if grammar is not None else {}
        if response_format and response_format.get("type") == "json_object":
            schema = response_format.get("schema")
            constraint = {"json_schema": json.dumps(schema)} if schema else {"json_object": True}
        elif response_format and response_format.get("type") == "json_schema":
            spec = response_format.get("json_schema") or {}
            constraint = {"json_schema": json.dumps(spec.get("schema", spec))}
        return GenParams(max_tokens=limit, stop=stops, seed=self._call_seed(seed), **constraint, **sampling)

    def create_completion(
        self,
        prompt: Union[str, bytes, List[int]],
        suffix: Optional[str] = None,
        max_tokens: Optional[int] = 16,
        temperature: float = 0.8,
        top_p: float = 0.95,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        logprobs: Optional[int] = None,
        echo: bool = False,
        stop: Optional[Union[str, List[str]]] = None,
        frequency_penalty: float = 0.0,
        presence_penalty: float = 0.0,
        repeat_penalty: float = 1.0,
        top_k: int = 40,
        stream: bool = False,
        seed: Optional[int] = None,
        tfs_z: float = 1.0,
        mirostat_mode: int = 0,
        mirostat_tau: float = 5.0,
        mirostat_eta: float = 0.1,
        model: Optional[str] = None,
        stopping_criteria: Any = None,
        logits_processor: Any = None,
        grammar: Optional[LlamaGrammar] = None,
        logit_bias: Optional[Dict[int, float]] = None,
    ) -> Union[Dict[str, Any], Iterator[Dict[str, Any]]]:
        """Completes ``prompt`` (text or token ids). Returns a ``text_completion`` dict, or with
        ``stream=True`` an iterator of chunks (the last one carries ``finish_reason``)."""
        tokens = self._prompt_tokens(prompt)
        params = self._params(
            len(tokens), max_tokens, seed, stop, grammar, None,
            {"suffix": suffix},
            temperature=temperature, top_p=top_p, min_p=min_p, typical_p=typical_p, top_k=top_k,
            frequency_penalty=frequency_penalty, presence_penalty=presence_penalty,
            repeat_penalty=repeat_penalty, mirostat_mode=mirostat_mode, mirostat_tau=mirostat_tau,
            mirostat_eta=mirostat_eta, logit_bias=list((logit_bias or {}).items()),
        )
        head = {
            "id": f"cmpl-{uuid.uuid4()}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": model or self.model_path,
        }
        if echo and logprobs is not None:
            raise InvalidInputError("logprobs with echo=True (the prompt's log-probabilities) is not supported by ferrolm.Llama")
        hooks = {"logits_processor": processor_hook(logits_processor),
                 "stopping_criteria": stopping_hook(stopping_criteria)}
        prefix = ""
        if echo:
            prefix = prompt if isinstance(prompt, str) else self._model.detokenize(tokens, False).decode("utf-8", "replace")
        if stream:
            return self._stream_completion(tokens, params, head, prefix, hooks, logprobs)
        report = None
        if logprobs is None:
            text, _ids, finish = self._session.generate(tokens, params, **hooks)
        else:
            text, toks, finish = self._collect(tokens, params, hooks, logprobs)
            report = CompletionLogprobs(self._detokenize_one, len(prefix)).report(toks)
        return {
            **head,
            "choices": [{"text": prefix + text, "index": 0, "logprobs": report,
                         "finish_reason": _finish_reason(finish)}],
            "usage": {"prompt_tokens": finish.prompt_tokens, "completion_tokens": finish.completion_tokens,
                      "total_tokens": finish.prompt_tokens + finish.completion_tokens},
        }

    def _stream_completion(self, tokens: List[int], params: GenParams, head: Dict[str, Any],
                           prefix: str, hooks: Dict[str, Any], logprobs: Optional[int]) -> Iterator[Dict[str, Any]]:
        def chunk(text: str, finish_reason: Optional[str], report: Any = None) -> Dict[str, Any]:
            return {**head, "choices": [{"text": text, "index": 0, "logprobs": report, "finish_reason": finish_reason}]}

        stream = self._session.stream(tokens, params, logprobs=logprobs, **hooks)
        reports = CompletionLogprobs(self._detokenize_one, len(prefix)) if logprobs is not None else None
        if prefix:
            yield chunk(prefix, None)
        try:
            for tok in stream:
                if reports is not None and tok.logprob is not None:
                    yield chunk(tok.text, None, reports.report([tok]))
                elif tok.text:
                    yield chunk(tok.text, None)
            finish = stream.finish
            yield chunk("", _finish_reason(finish) if finish is not None else "stop")
        finally:
            stream.close()

    def __call__(self, prompt: Union[str, bytes, List[int]], *args: Any, **kwargs: Any) -> Any:
        """Same as :meth:`create_completion`."""
        return self.create_completion(prompt, *args, **kwargs)

    # -- chat ----------------------------------------------------------------------------------

    def _chat_prompt(self, messages: List[Dict[str, Any]], tools: Optional[List[Dict[str, Any]]]) -> List[int]:
        rendered = self._model.apply_chat_template(
            json.dumps(messages), tools=json.dumps(tools) if tools else None, template=self._chat_template
        )
        return self._model.tokenize_chat(rendered)

    def create_chat_completion(
        self,
        messages: List[Dict[str, Any]],
        functions: Optional[List[Dict[str, Any]]] = None,
        function_call: Any = None,
        tools: Optional[List[Dict[str, Any]]] = None,
        tool_choice: Any = None,
        temperature: float = 0.2,
        top_p: float = 0.95,
        top_k: int = 40,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        stream: bool = False,
        stop: Optional[Union[str, List[str]]] = None,
        seed: Optional[int] = None,
        response_format: Optional[Dict[str, Any]] = None,
        max_tokens: Optional[int] = None,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        repeat_penalty: float = 1.0,
        tfs_z: float = 1.0,
        mirostat_mode: int = 0,
        mirostat_tau: float = 5.0,
        mirostat_eta: float = 0.1,
        model: Optional[str] = None,
        logits_processor: Any = None,
        grammar: Optional[LlamaGrammar] = None,
        logit_bias: Optional[Dict[int, float]] = None,
        logprobs: Optional[bool] = None,
        top_logprobs: Optional[int] = None,
        stopping_criteria: Any = None,
    ) -> Union[Dict[str, Any], Iterator[Dict[str, Any]]]:
        """Replies to ``messages`` with the model's chat template (or ``chat_format``). Returns a
        ``chat.completion`` dict, or with ``stream=True`` ``chat.completion.chunk`` dicts.
        ``tools`` are given to the template; a ``tool_choice`` naming a function makes the reply
        a call of it (its arguments constrained to the function's parameter schema)."""
        tools = tools or ([{"type": "function", "function": f} for f in functions] if functions else None)
        forced = _forced_tool(tool_choice if tool_choice is not None else function_call, tools)
        if forced is not None:
            grammar = LlamaGrammar.from_json_schema(forced.get("parameters") or {"type": "object"})
            response_format = None
        tokens = self._chat_prompt(messages, tools)
        if len(tokens) >= self._n_ctx:
            raise InvalidInputError(f"Requested tokens ({len(tokens)}) exceed context window of {self._n_ctx}")
        params = self._params(
            len(tokens), max_tokens, seed, stop, grammar, response_format,
            {},
            temperature=temperature, top_p=top_p, min_p=min_p, typical_p=typical_p, top_k=top_k,
            frequency_penalty=frequency_penalty, presence_penalty=presence_penalty,
            repeat_penalty=repeat_penalty, mirostat_mode=mirostat_mode, mirostat_tau=mirostat_tau,
            mirostat_eta=mirostat_eta, logit_bias=list((logit_bias or {}).items()),
        )
        head = {"id": f"chatcmpl-{uuid.uuid4()}", "created": int(time.time()), "model": model or self.model_path}
        hooks = {"logits_processor": processor_hook(logits_processor),
                 "stopping_criteria": stopping_hook(stopping_criteria)}
        k = (top_logprobs or 0) if logprobs else None
        if stream:
            return self._stream_chat(tokens, params, head, forced, hooks, k)
        report = None
        if k is None:
            text, _ids, finish = self._session.generate(tokens, params, **hooks)
        else:
            text, toks, finish = self._collect(tokens, params, hooks, k)
            report = chat_logprobs(self._detokenize_one, toks)
        message: Dict[str, Any] = {"role": "assistant", "content": text}
        reason = _finish_reason(finish)
        if forced is not None:
            message = {"role": "assistant", "content": None, "tool_calls": [_tool_call(forced["name"], text)]}
            reason = "tool_calls"
        return {
            **head,
            "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "logprobs": report, "finish_reason": reason}],
            "usage": {"prompt_tokens": finish.prompt_tokens, "completion_tokens": finish.completion_tokens,
                      "total_tokens": finish.prompt_tokens + finish.completion_tokens},
        }

    def _stream_chat(self, tokens: List[int], params: GenParams, head: Dict[str, Any],
                     forced: Optional[Dict[str, Any]], hooks: Dict[str, Any],
                     logprobs: Optional[int]) -> Iterator[Dict[str, Any]]:
        def chunk(delta: Dict[str, Any], finish_reason: Optional[str], tok: Any = None) -> Dict[str, Any]:
            report = chat_logprobs(self._detokenize_one, [tok]) if tok is not None and logprobs is not None else None
            return {**head, "object": "chat.completion.chunk",
                    "choices": [{"index": 0, "delta": delta, "logprobs": report, "finish_reason": finish_reason}]}

        stream = self._session.stream(tokens, params, logprobs=logprobs, **hooks)
        try:
            yield chunk({"role": "assistant"}, None)
            if forced is not None:
                call_id = f"call_{uuid.uuid4().hex[:24]}"
                yield chunk({"tool_calls": [{"index": 0, "id": call_id, "type": "function",
                                             "function": {"name": forced["name"], "arguments": ""}}]}, None)
            for tok in stream:
                if not tok.text and (logprobs is None or tok.logprob is None):
                    continue
                if forced is not None:
                    yield chunk({"tool_calls": [{"index": 0, "function": {"arguments": tok.text}}]}, None, tok)
                else:
                    yield chunk({"content": tok.text}, None, tok)
            finish = stream.finish
            reason = "tool_calls" if forced is not None else (_finish_reason(finish) if finish else "stop")
            yield chunk({}, reason)
        finally:
            stream.close()

    # -- embeddings ------------------------------------------------------------------------------

    def embed(self, input: Union[str, List[str]], normalize: bool = False, truncate: bool = True,
              return_count: bool = False) -> Any:
        """One mean-pooled vector per text (a single vector for a single string); with
        ``return_count`` also the number of tokens embedded."""
        if not self._embedding:
            raise RuntimeError("Llama model must be created with embedding=True to call this method")
        texts = [input] if isinstance(input, str) else list(input)
        if truncate:
            texts = [self._truncate(t) for t in texts]
        vectors = self._model.embed(texts, normalize=normalize)
        count = sum(len(self._model.tokenize(t, True, False)) for t in texts)
        out = vectors[0] if isinstance(input, str) else vectors
        return (out, count) if return_count else out

    def _truncate(self, text: str) -> str:
        tokens = self._model.tokenize(text, True, False)
        if len(tokens) <= self._n_ctx:
            return text
        return self._model.detokenize(tokens[: self._n_ctx], False).decode("utf-8", "ignore")

    def create_embedding(self, input: Union[str, List[str]], model: Optional[str] = None) -> Dict[str, Any]:
        """OpenAI's embeddings response: ``{"object": "list", "data": [...], "model", "usage"}``."""
        texts = [input] if isinstance(input, str) else list(input)
        vectors, count = self.embed(texts, return_count=True)
        return {
            "object": "list",
            "data": [{"object": "embedding", "embedding": v, "index": i} for i, v in enumerate(vectors)],
            "model": model or self.model_path,
            "usage": {"prompt_tokens": count, "total_tokens": count},
        }


class LlamaState:
    """A saved context (:meth:`Llama.save_state`), with llama-cpp-python's fields: ``input_ids``
    (the cached tokens), ``n_tokens``, ``llama_state`` (those tokens as native uint32
    bytes; ferrolm keeps no KV memory in a state, :meth:`Llama.load_state` recomputes it),
    ``llama_state_size`` and ``seed``. ``scores`` is ``None``: per-token logits are not kept.
    ``rng_state`` is the state of the generator that draws each call's seed."""

    def __init__(self, input_ids: Sequence[int], scores: Any, n_tokens: int, llama_state: bytes,
                 llama_state_size: int, seed: int, rng_state: Any = None) -> None:
        self.input_ids = input_ids
        self.scores = scores
        self.n_tokens = n_tokens
        self.llama_state = llama_state
        self.llama_state_size = llama_state_size
        self.seed = seed
        self.rng_state = rng_state

    def __repr__(self) -> str:
        return f"LlamaState(n_tokens={self.n_tokens}, seed={self.seed})"


def _forced_tool(choice: Any, tools: Optional[List[Dict[str, Any]]]) -> Optional[Dict[str, Any]]:
    """The function a ``tool_choice`` names, or None (``auto``/``none``: the model answers)."""
    if not isinstance(choice, dict):
        return None
    name = (choice.get("function") or {}).get("name") or choice.get("name")
    for tool in tools or []:
        fn = tool.get("function") or {}
        if fn.get("name") == name:
            return fn
    raise InvalidInputError(f"tool_choice names '{name}', which is not among the tools")


def _tool_call(name: str, arguments: str) -> Dict[str, Any]:
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
            "function": {"name": name, "arguments": arguments}}
