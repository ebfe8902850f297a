#!/usr/bin/env bash
# The Elixir package's tests (bindings/elixir, ExUnit, real models): installs Erlang/Elixir
# (scripts/install-elixir.sh), builds the `ferrolm` CLI (the reference for greedy output) and
# the NIF library (`mix compile` runs cargo; both share the workspace's target dir and the
# release `ferrolm` library built with feature `opencl`), then runs `mix test`.
#
# Under CI=true a missing toolchain or model fails; otherwise a missing toolchain skips with a
# notice. Extra arguments go to `mix test`.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ci=false
[[ "${CI:-}" == true || "${CI:-}" == 1 ]] && ci=true

if ! bash scripts/install-elixir.sh; then
    if $ci; then
        echo "error: the Elixir toolchain is required under CI=true" >&2
        exit 1
    fi
    echo "notice: skipping the Elixir tests: no Elixir toolchain" >&2
    exit 0
fi

# scripts/test.sh has fetched them already; fetch only what is missing (the fetch script builds
# the plain CLI, which would replace the OpenCL one built next).
models_dir="${FERROLM_MODEL_DIR:-${FERROLM_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME}/.cache}/ferrolm}/models}"
for f in SmolLM2-135M-Instruct.Q4_1.gguf gemma-3-270m-q4_k_m.gguf; do
    [[ -f "${models_dir}/${f}" ]] || { bash scripts/fetch-test-models.sh; break; }
done
cargo build --release -p ferrolm-cli --features opencl
target="${CARGO_TARGET_DIR:-target}"
export FERROLM_BIN="${FERROLM_BIN:-$(cd "$target/release" && pwd)/ferrolm}"

cd bindings/elixir
export MIX_ENV=test
mix compile --force --warnings-as-errors
mix test "$@"
