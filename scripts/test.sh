#!/usr/bin/env bash
# The project's test command: fetch the test models, then run every test of the workspace
# ([profile.test] is optimized, so model tests run at full speed), then the end-to-end tests of
# `ferrolm serve` (scripts/server_tests/run_all.sh: the official openai client, prefix cache,
# disconnects, fuzzing, the chat page in headless Chromium, a 16-client load test). Extra
# arguments go to `cargo test`. FERROLM_SKIP_SERVER_TESTS=1 skips the end-to-end tests.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/fetch-test-models.sh
cargo test --workspace "$@"

if [[ "${FERROLM_SKIP_SERVER_TESTS:-0}" != 1 ]]; then
    # The release binary was built by fetch-test-models.sh; rebuild in case sources changed.
    cargo build --release -p ferrolm-cli
    FERROLM_BIN="${CARGO_TARGET_DIR:-target}/release/ferrolm" FERROLM_LOAD_MIN_RATIO="${FERROLM_LOAD_MIN_RATIO:-0}" \
        bash scripts/server_tests/run_all.sh
fi
