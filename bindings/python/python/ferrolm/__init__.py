"""ferrolm: an LLM inference engine in Rust, from Python.

* :class:`Llama` — llama-cpp-python's high-level API (change ``from llama_cpp import Llama`` to
  ``from ferrolm import Llama``).
* :class:`Model`, :class:`Session`, :class:`ChatSession` — a model and conversations that keep
  their KV cache between calls.
* :class:`Engine` — many concurrent requests with continuous batching and a shared prefix cache,
  iterated in threads or with ``async for``.
"""

from . import _ferrolm
from ._ferrolm import Finish, GenParams, Model, Token, catalog, resolve_model, set_num_threads
from .engine import ChatSession, Engine, Request, Session, gen_params
from .errors import EngineBusyError, Error, InvalidInputError, ModelNotFoundError
from .llama import LLAMA_DEFAULT_SEED, Llama, LlamaState
from .llama_hooks import LogitsProcessorList, StoppingCriteriaList
from .llama_grammar import LlamaGrammar

__all__ = [
    "Llama", "LlamaGrammar", "LlamaState", "LogitsProcessorList", "StoppingCriteriaList", "LLAMA_DEFAULT_SEED",
    "Model", "Session", "ChatSession", "Engine", "Request", "Token", "Finish", "GenParams", "gen_params",
    "Error", "InvalidInputError", "ModelNotFoundError", "EngineBusyError",
    "catalog", "resolve_model", "set_num_threads",
]
