#!/usr/bin/env bash
# The project's test command: fetch the test models, then run every test of the workspace
# ([profile.test] is optimized, so model tests run at full speed). Extra arguments go to
# `cargo test`.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/fetch-test-models.sh
cargo test --workspace "$@"
