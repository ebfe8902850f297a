"""Type stubs of the native module ``ferrolm._ferrolm``."""

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

_Prompt = Union[str, bytes, Sequence[int]]

class Token:
    id: Optional[int]
    text: str
    logprob: Optional[float]
    top_logprobs: Optional[List[Tuple[int, float]]]

class Finish:
    reason: str
    finish_reason: str
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    prompt_ms: float
    decode_ms: float

class GenParams:
    def __init__(
        self,
        *,
        max_tokens: Optional[int] = None,
        temperature: float = 0.8,
        top_k: int = 40,
        top_p: float = 0.95,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        repeat_penalty: float = 1.0,
        frequency_penalty: float = 0.0,
        presence_penalty: float = 0.0,
        penalty_last_n: int = 64,
        mirostat_mode: int = 0,
        mirostat_tau: float = 5.0,
        mirostat_eta: float = 0.1,
        logit_bias: Optional[Sequence[Tuple[int, float]]] = None,
        seed: Optional[int] = None,
        stop: Optional[Sequence[str]] = None,
        ignore_eos: bool = False,
        json_schema: Optional[str] = None,
        json_object: bool = False,
        lark: Optional[str] = None,
        gbnf: Optional[str] = None,
        regex: Optional[str] = None,
        samplers: Optional[str] = None,
    ) -> None: ...
    @property
    def max_tokens(self) -> Optional[int]: ...
    @property
    def temperature(self) -> float: ...
    @property
    def seed(self) -> Optional[int]: ...

class Model:
    def __init__(self, path: str, *, n_threads: Optional[int] = None) -> None: ...
    @property
    def path(self) -> str: ...
    @property
    def arch(self) -> str: ...
    @property
    def n_vocab(self) -> int: ...
    @property
    def n_embd(self) -> int: ...
    @property
    def n_ctx_train(self) -> int: ...
    @property
    def bos(self) -> Optional[int]: ...
    @property
    def eos(self) -> Optional[int]: ...
    def is_eog(self, token: int) -> bool: ...
    def token_text(self, token: int) -> Optional[str]: ...
    def tokenize(self, text: Union[str, bytes], add_bos: bool = True, special: bool = False) -> List[int]: ...
    def detokenize(self, tokens: Sequence[int], special: bool = False) -> bytes: ...
    def chat_template(self) -> Optional[str]: ...
    def apply_chat_template(
        self,
        messages: str,
        *,
        add_generation_prompt: bool = True,
        tools: Optional[str] = None,
        template: Optional[str] = None,
        kwargs: Optional[str] = None,
    ) -> str: ...
    def tokenize_chat(self, prompt: str) -> List[int]: ...
    def embed(self, texts: Sequence[str], *, pooling: Optional[str] = None, normalize: bool = True) -> List[List[float]]: ...

class CancelHandle:
    def cancel(self) -> None: ...

class SessionStream:
    def __iter__(self) -> "SessionStream": ...
    def __next__(self) -> Token: ...
    @property
    def finish(self) -> Optional[Finish]: ...
    def close(self) -> None: ...

class Session:
    def __init__(
        self,
        model: Model,
        *,
        n_ctx: int = 4096,
        n_batch: int = 512,
        type_k: str = "f16",
        type_v: str = "f16",
        policy: str = "none",
        window: int = 256,
        protected_prefix: int = 4,
        kv_budget: Optional[int] = None,
        memory_threshold_mb: Optional[int] = None,
    ) -> None: ...
    @property
    def n_ctx(self) -> int: ...
    @property
    def tokens(self) -> List[int]: ...
    @property
    def kv_len(self) -> int: ...
    @property
    def kv_memory_bytes(self) -> int: ...
    @property
    def last_finish(self) -> Optional[Finish]: ...
    def reset(self) -> None: ...
    def cancel_handle(self) -> CancelHandle: ...
    def prefill(self, prompt: _Prompt) -> None: ...
    def stream(
        self,
        prompt: _Prompt,
        params: GenParams,
        *,
        logits_processor: Optional[Callable[[List[int], bytearray], bytes]] = None,
        stopping_criteria: Optional[Callable[[List[int], bytearray], bool]] = None,
        logprobs: Optional[int] = None,
    ) -> SessionStream: ...
    def generate(
        self,
        prompt: _Prompt,
        params: GenParams,
        *,
        logits_processor: Optional[Callable[[List[int], bytearray], bytes]] = None,
        stopping_criteria: Optional[Callable[[List[int], bytearray], bool]] = None,
    ) -> Tuple[str, List[int], Finish]: ...

class Request:
    def __iter__(self) -> "Request": ...
    def __next__(self) -> Token: ...
    def poll(self, wake: Callable[[], Any]) -> Tuple[bool, Optional[Token]]: ...
    def cancel(self) -> None: ...
    @property
    def done(self) -> bool: ...
    @property
    def finish(self) -> Optional[Finish]: ...

class Engine:
    def __init__(
        self,
        model: Model,
        *,
        n_slots: int = 4,
        n_ctx: int = 4096,
        chunk_size: int = 512,
        strategy: str = "decode-first",
        max_queue: int = 64,
        type_k: str = "f16",
        type_v: str = "f16",
        prefix_cache_mb: int = 1024,
        policy: str = "none",
        window: int = 256,
        kv_budget: Optional[int] = None,
    ) -> None: ...
    def submit(self, prompt: _Prompt, params: GenParams, *, logprobs: Optional[int] = None, timeout: Optional[float] = None) -> Request: ...
    def embed(self, texts: Sequence[str], *, pooling: Optional[str] = None, normalize: bool = True) -> List[List[float]]: ...
    def metrics(self) -> Dict[str, Any]: ...
    def in_flight(self) -> int: ...
    def wait_idle(self, timeout: float = 10.0) -> bool: ...
    def cancel_all(self) -> None: ...
    def shutdown(self) -> None: ...

def set_num_threads(n_threads: Optional[int] = None) -> None: ...
def resolve_model(name_or_path: str) -> str: ...
def catalog() -> List[Tuple[str, str, str]]: ...
