#!/usr/bin/env bash
# Tests of the Python package (bindings/python): builds and installs it with pip into a venv,
# then runs its pytest suite on the test models against the release CLI.
#
# The venv lives in ${FERROLM_PYENV_PYTHON:-${FERROLM_CACHE_DIR:-~/.cache/ferrolm}/pyenv-python}
# and holds pytest, jsonschema and numpy (the logits-processor tests run with numpy arrays, and
# with lists when numpy is hidden). `pip install ./bindings/python` builds the extension with
# maturin (pip fetches it) in the workspace's target folder (or $CARGO_TARGET_DIR), release
# profile, so the ferrolm library built for `cargo build --release -p ferrolm-cli --features
# opencl` is reused. Extra arguments go to pytest. Under CI=true a missing model fails.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

cache="${FERROLM_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME}/.cache}/ferrolm}"
venv="${FERROLM_PYENV_PYTHON:-${cache}/pyenv-python}"
py="${venv}/bin/python"

if [[ ! -x "$py" ]]; then
    echo "creating $venv" >&2
    mkdir -p "$(dirname "$venv")"
    python3 -m venv "$venv"
fi
"$py" -m pip install --quiet --disable-pip-version-check pytest jsonschema numpy

# The reference of the greedy tests.
cargo build --release -p ferrolm-cli --features opencl
export FERROLM_BIN="${FERROLM_BIN:-${CARGO_TARGET_DIR:-$PWD/target}/release/ferrolm}"

echo "building and installing bindings/python into $venv" >&2
"$py" -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps ./bindings/python

# Run from the tests folder so that `import ferrolm` is the installed package.
cd bindings/python/tests
exec "$py" -m pytest -q "$@"
