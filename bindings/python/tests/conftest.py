"""Fixtures of the ferrolm Python tests: the two test models (found like the Rust tests find
them: $FERROLM_MODEL_DIR, else $FERROLM_CACHE_DIR/models, else ~/.cache/ferrolm/models) and the
`ferrolm` CLI binary ($FERROLM_BIN, else target/release/ferrolm of the workspace). A missing model
or binary skips a test, and fails it when CI=true."""

import os
import pathlib

import pytest

MODELS = {
    "smollm2": "SmolLM2-135M-Instruct.Q4_1.gguf",
    "gemma3": "gemma-3-270m-q4_k_m.gguf",
}

ROOT = pathlib.Path(__file__).resolve().parents[3]


def _ci() -> bool:
    return os.environ.get("CI", "").lower() in ("true", "1")


def _missing(msg: str) -> None:
    if _ci():
        pytest.fail(f"{msg}; CI=true requires it")
    pytest.skip(msg)


def model_dir() -> pathlib.Path:
    if os.environ.get("FERROLM_MODEL_DIR"):
        return pathlib.Path(os.environ["FERROLM_MODEL_DIR"])
    cache = os.environ.get("FERROLM_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "ferrolm")
    return pathlib.Path(cache) / "models"


def require_model(name: str) -> str:
    path = model_dir() / MODELS[name]
    if not path.is_file():
        _missing(f"model file {path} not found (scripts/fetch-test-models.sh downloads it)")
    return str(path)


@pytest.fixture(params=sorted(MODELS))
def model_path(request):
    """Each test model in turn."""
    return require_model(request.param)


@pytest.fixture
def smollm2_path():
    return require_model("smollm2")


@pytest.fixture(scope="session")
def smollm2_model():
    import ferrolm

    return ferrolm.Model(require_model("smollm2"))


@pytest.fixture
def ferrolm_bin():
    path = pathlib.Path(os.environ.get("FERROLM_BIN") or ROOT / "target" / "release" / "ferrolm")
    if not path.is_file():
        _missing(f"the ferrolm binary {path} is missing (cargo build --release -p ferrolm-cli, or set FERROLM_BIN)")
    return str(path)
