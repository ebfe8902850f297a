"""Native classes for what llama-cpp-python lacks: :class:`Session` (one conversation's KV cache,
reused across calls, with eviction policies), :class:`ChatSession` and :class:`Engine` (many
concurrent requests with continuous batching and a shared prefix cache, iterated in threads or
with ``async for``)."""

from __future__ import annotations

import asyncio
import json
from typing import Any, AsyncIterator, Dict, Iterator, List, Optional, Sequence, Union

from . import _ferrolm
from ._ferrolm import Finish, GenParams, Model, Token

Prompt = Union[str, bytes, Sequence[int]]


def _model(model: Union[Model, str]) -> Model:
    return model if isinstance(model, Model) else Model(_ferrolm.resolve_model(str(model)))


def gen_params(**kwargs: Any) -> GenParams:
    """:class:`GenParams` from keyword arguments; ``json_schema`` may be a dict."""
    schema = kwargs.get("json_schema")
    if schema is not None and not isinstance(schema, str):
        kwargs["json_schema"] = json.dumps(schema)
    return GenParams(**kwargs)


class Session:
    """One conversation with a model in the caller's thread: each call gets the whole prompt and
    reuses the longest prefix its KV cache holds. Keyword arguments of the constructor: ``n_ctx``,
    ``n_batch``, ``type_k``/``type_v`` (``f32``, ``f16``, ``q8_0``, ``q4_0``), ``policy``
    (``none``, ``sliding``, ``h2o``, ``snapkv``…), ``window``, ``protected_prefix``,
    ``kv_budget``, ``memory_threshold_mb``."""

    def __init__(self, model: Union[Model, str], **options: Any) -> None:
        self.model = _model(model)
        self._native = _ferrolm.Session(self.model, **options)
        self._cancel = self._native.cancel_handle()

    @property
    def tokens(self) -> List[int]:
        """The tokens the cache holds."""
        return self._native.tokens

    @property
    def n_ctx(self) -> int:
        return self._native.n_ctx

    @property
    def kv_len(self) -> int:
        return self._native.kv_len

    @property
    def last_finish(self) -> Optional[Finish]:
        """How the last generation ended (token counts, cached tokens, timings)."""
        return self._native.last_finish

    def reset(self) -> None:
        """Forgets the cache."""
        self._native.reset()

    def cancel(self) -> None:
        """Stops the running generation (call it from another thread)."""
        self._cancel.cancel()

    def generate(self, prompt: Prompt, **params: Any) -> str:
        """The whole reply to ``prompt`` (see :class:`GenParams` for the options)."""
        text, _tokens, _finish = self._native.generate(_prompt(prompt), gen_params(**params))
        return text

    def stream(self, prompt: Prompt, **params: Any) -> Iterator[str]:
        """The reply to ``prompt``, piece by piece. A later call on this session ends it."""
        for tok in self._native.stream(_prompt(prompt), gen_params(**params)):
            if tok.text:
                yield tok.text


class ChatSession:
    """A multi-turn conversation rendered with the model's chat template; each turn prefills only
    what was added since the last one (the KV cache follows the conversation)."""

    def __init__(self, model: Union[Model, str], system: Optional[str] = None, **options: Any) -> None:
        self.session = Session(model, **options)
        self.messages: List[Dict[str, Any]] = []
        if system is not None:
            self.messages.append({"role": "system", "content": system})

    def _prompt(self) -> List[int]:
        model = self.session.model
        return model.tokenize_chat(model.apply_chat_template(json.dumps(self.messages)))

    def send(self, user: str, **params: Any) -> str:
        """Adds a user message and returns the assistant's reply (added to ``messages``)."""
        return "".join(self.send_stream(user, **params))

    def send_stream(self, user: str, **params: Any) -> Iterator[str]:
        """Adds a user message and streams the reply; the reply (as far as it got) joins
        ``messages`` when the stream ends or is closed."""
        self.messages.append({"role": "user", "content": user})
        reply: List[str] = []
        try:
            for piece in self.session.stream(self._prompt(), **params):
                reply.append(piece)
                yield piece
        finally:
            self.messages.append({"role": "assistant", "content": "".join(reply)})

    def reset(self, keep_system: bool = True) -> None:
        """Forgets the conversation (leading system messages stay with ``keep_system``)."""
        n = 0
        while keep_system and n < len(self.messages) and self.messages[n]["role"] == "system":
            n += 1
        del self.messages[n:]
        self.session.reset()


def _prompt(prompt: Prompt) -> Union[str, bytes, List[int]]:
    return prompt if isinstance(prompt, (str, bytes)) else list(prompt)


def _wake(loop: asyncio.AbstractEventLoop, fut: "asyncio.Future[None]") -> None:
    def resolve() -> None:
        if not fut.done():
            fut.set_result(None)

    try:
        loop.call_soon_threadsafe(resolve)
    except RuntimeError:
        pass  # the loop is closed: nobody is waiting any more


class Request:
    """A request submitted to an :class:`Engine`. Iterate it (``for``, blocking with the GIL
    released) or ``async for`` it for :class:`Token` s; ``finish`` tells how it ended.
    Cancelling it (``cancel()``, cancelling the asyncio task that awaits it, or dropping it)
    frees its slot on the engine's next tick."""

    def __init__(self, native: "_ferrolm.Request") -> None:
        self._native = native

    def __iter__(self) -> Iterator[Token]:
        return self

    def __next__(self) -> Token:
        tok = self._native.__next__()
        if tok is None:
            raise StopIteration
        return tok

    def __aiter__(self) -> AsyncIterator[Token]:
        return self

    async def __anext__(self) -> Token:
        loop = asyncio.get_running_loop()
        while True:
            fut: asyncio.Future[None] = loop.create_future()
            ready, tok = self._native.poll(lambda: _wake(loop, fut))
            if ready:
                if tok is None:
                    raise StopAsyncIteration
                return tok
            try:
                await fut
            except asyncio.CancelledError:
                self._native.cancel()
                raise

    def text(self) -> str:
        """Waits for the end and returns the whole text (blocking)."""
        return "".join(t.text for t in self)

    async def atext(self) -> str:
        """Awaits the end and returns the whole text."""
        return "".join([t.text async for t in self])

    def cancel(self) -> None:
        self._native.cancel()

    @property
    def done(self) -> bool:
        return self._native.done

    @property
    def finish(self) -> Optional[Finish]:
        return self._native.finish


class Engine:
    """Many concurrent requests on one model: continuous batching over ``n_slots`` sequences and
    a prefix cache shared by all. Constructor options: ``n_slots``, ``n_ctx`` (per slot),
    ``chunk_size``, ``strategy`` (``decode-first``, ``prefill-first``, ``balanced``),
    ``max_queue``, ``type_k``/``type_v``, ``prefix_cache_mb``, ``policy``, ``window``,
    ``kv_budget``."""

    def __init__(self, model: Union[Model, str], **config: Any) -> None:
        self.model = _model(model)
        self._native = _ferrolm.Engine(self.model, **config)

    def submit(
        self,
        prompt: Prompt,
        *,
        logprobs: Optional[int] = None,
        timeout: Optional[float] = None,
        **params: Any,
    ) -> Request:
        """Queues a request (``params``: see :class:`GenParams`; ``json_schema`` may be a dict)."""
        native = self._native.submit(_prompt(prompt), gen_params(**params), logprobs=logprobs, timeout=timeout)
        return Request(native)

    def generate(self, prompt: Prompt, **params: Any) -> str:
        """The whole reply (blocking; other threads may submit meanwhile)."""
        return self.submit(prompt, **params).text()

    async def agenerate(self, prompt: Prompt, **params: Any) -> str:
        """The whole reply, awaited."""
        return await self.submit(prompt, **params).atext()

    def stream(self, prompt: Prompt, **params: Any) -> Request:
        """Same as :meth:`submit`: iterate or ``async for`` the result."""
        return self.submit(prompt, **params)

    def embed(self, texts: Sequence[str], *, pooling: Optional[str] = None, normalize: bool = True) -> List[List[float]]:
        return self._native.embed(list(texts), pooling=pooling, normalize=normalize)

    def metrics(self) -> Dict[str, Any]:
        return self._native.metrics()

    def in_flight(self) -> int:
        return self._native.in_flight()

    def wait_idle(self, timeout: float = 10.0) -> bool:
        return self._native.wait_idle(timeout)

    def cancel_all(self) -> None:
        self._native.cancel_all()

    def shutdown(self) -> None:
        self._native.shutdown()
