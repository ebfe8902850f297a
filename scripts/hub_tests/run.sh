#!/usr/bin/env bash
# Runs the Hugging Face Hub tests (test_hub.py) against a local stand-in of the Hub, with the
# ferrolm binary given (default: the release build). Needs the test models in the ferrolm cache
# (scripts/fetch-test-models.sh) and the huggingface_hub Python package, taken from python3, the
# test models' virtual environment (which has transformers), or installed with pip into
# <cache>/pyenv-hub.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
bin="${1:-${CARGO_TARGET_DIR:-${root}/target}/release/ferrolm}"
cache="${FERROLM_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME}/.cache}/ferrolm}"
models="${FERROLM_MODEL_DIR:-${cache}/models}"

py=""
for candidate in python3 "${cache}/pyenv/bin/python" "${cache}/pyenv-hub/bin/python"; do
    if command -v "${candidate}" >/dev/null 2>&1 && "${candidate}" -c "import huggingface_hub" 2>/dev/null; then
        py="${candidate}"
        break
    fi
done
if [[ -z "${py}" ]]; then
    echo "==> installing huggingface_hub into ${cache}/pyenv-hub" >&2
    python3 -m venv "${cache}/pyenv-hub"
    "${cache}/pyenv-hub/bin/python" -m pip install --quiet --disable-pip-version-check huggingface_hub
    py="${cache}/pyenv-hub/bin/python"
fi
for f in SmolLM2-135M-Instruct.Q4_1.gguf gemma-3-270m-q4_k_m.gguf SmolLM2-135M-Instruct-hf/config.json; do
    if [[ ! -e "${models}/${f}" ]]; then
        echo "missing test model ${models}/${f}: run scripts/fetch-test-models.sh" >&2
        exit 1
    fi
done
exec "${py}" "${here}/test_hub.py" "${bin}" "${models}"
