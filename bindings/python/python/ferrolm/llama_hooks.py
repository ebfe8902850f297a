"""llama-cpp-python's per-token hooks for :class:`ferrolm.Llama`: logits processors, stopping
criteria and the ``logprobs`` reports, adapted to the hooks of :class:`ferrolm.Session`.

As in llama-cpp-python, a logits processor is ``fn(input_ids, scores) -> scores`` and a stopping
criterion ``fn(input_ids, logits) -> bool``, where ``input_ids`` are the token ids of the context
(``numpy.intc``) and ``scores``/``logits`` the model's logits (``numpy.single``, ``[n_vocab]``).
numpy is optional: without it they are a ``list`` of ints and a ``list`` of floats, and a
processor may return any sequence of floats."""

from __future__ import annotations

import array
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

try:  # numpy is optional: llama-cpp-python's arrays when it is there, lists when not.
    import numpy as _np
except ImportError:  # pragma: no cover - depends on the environment
    _np = None

LogitsProcessor = Callable[[Any, Any], Any]
StoppingCriteria = Callable[[Any, Any], bool]


class LogitsProcessorList(List[LogitsProcessor]):
    """Logits processors applied in turn, each to the scores the previous one returned."""

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        for processor in self:
            scores = processor(input_ids, scores)
        return scores


class StoppingCriteriaList(List[StoppingCriteria]):
    """Stopping criteria: generation stops when any of them returns true."""

    def __call__(self, input_ids: Any, logits: Any) -> bool:
        return any(criterion(input_ids, logits) for criterion in self)


def _arrays(ids: List[int], raw: bytearray) -> Tuple[Any, Any]:
    """The context ids and the logits (native float32 bytes) as the hooks receive them."""
    if _np is not None:
        return _np.asarray(ids, dtype=_np.intc), _np.frombuffer(raw, dtype=_np.single)
    scores = array.array("f")
    scores.frombytes(bytes(raw))
    return list(ids), scores.tolist()


def _chain(hooks: Any) -> Callable[[Any, Any], Any]:
    """One callable from a callable or a sequence of them (a ``*List`` is itself callable)."""
    if callable(hooks):
        return hooks
    if isinstance(hooks, (list, tuple)) and all(callable(h) for h in hooks):
        return LogitsProcessorList(hooks)
    raise TypeError("expected a callable or a list of callables")


def processor_hook(logits_processor: Any) -> Optional[Callable[[List[int], bytearray], Any]]:
    """The :meth:`ferrolm.Session.stream` hook of ``logits_processor`` (``None``: none)."""
    if logits_processor is None:
        return None
    process = _chain(logits_processor)

    def hook(ids: List[int], raw: bytearray) -> Any:
        scores = process(*_arrays(ids, raw))
        if _np is not None:
            return _np.ascontiguousarray(scores, dtype=_np.single).tobytes()
        return array.array("f", scores).tobytes()

    return hook


def stopping_hook(stopping_criteria: Any) -> Optional[Callable[[List[int], bytearray], bool]]:
    """The :meth:`ferrolm.Session.stream` hook of ``stopping_criteria`` (``None``: none)."""
    if stopping_criteria is None:
        return None
    if isinstance(stopping_criteria, (list, tuple)) and not callable(stopping_criteria):
        stopping_criteria = StoppingCriteriaList(stopping_criteria)
    criteria = _chain(stopping_criteria)
    return lambda ids, raw: bool(criteria(*_arrays(ids, raw)))


class CompletionLogprobs:
    """Builds llama-cpp-python's ``logprobs`` of a completion (``tokens``, ``text_offset``,
    ``token_logprobs``, ``top_logprobs``) from streamed :class:`ferrolm.Token`\\ s."""

    def __init__(self, detokenize: Callable[[List[int]], bytes], offset: int) -> None:
        self._detokenize = detokenize
        self._offset = offset

    def _piece(self, token_id: int) -> str:
        return self._detokenize([token_id]).decode("utf-8", errors="ignore")

    def report(self, tokens: Sequence[Any]) -> Dict[str, List[Any]]:
        """The ``logprobs`` dict of ``tokens`` (those without an id, held-back text, skipped);
        offsets continue from the previous report."""
        out: Dict[str, List[Any]] = {"tokens": [], "text_offset": [], "token_logprobs": [], "top_logprobs": []}
        for tok in tokens:
            if tok.id is None or tok.logprob is None:
                continue
            piece = self._piece(tok.id)
            top = {self._piece(i): lp for i, lp in tok.top_logprobs or []}
            top[piece] = tok.logprob
            out["tokens"].append(piece)
            out["text_offset"].append(self._offset)
            out["token_logprobs"].append(tok.logprob)
            out["top_logprobs"].append(top)
            self._offset += len(piece)
        return out


def chat_logprobs(detokenize: Callable[[List[int]], bytes], tokens: Sequence[Any]) -> Dict[str, Any]:
    """OpenAI's chat ``logprobs``: ``{"content": [{token, logprob, bytes, top_logprobs}]}``."""

    def entry(token_id: int, logprob: float) -> Dict[str, Any]:
        raw = detokenize([token_id])
        return {"token": raw.decode("utf-8", errors="replace"), "logprob": logprob, "bytes": list(raw)}

    content = []
    for tok in tokens:
        if tok.id is None or tok.logprob is None:
            continue
        item = entry(tok.id, tok.logprob)
        item["top_logprobs"] = [entry(i, lp) for i, lp in tok.top_logprobs or []]
        content.append(item)
    return {"content": content}
