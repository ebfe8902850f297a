#!/usr/bin/env bash
# `--backend opencl` where OpenCL is missing must fail with a clear message, not a crash: a
# build with the `opencl` feature on a machine without an OpenCL runtime (simulated by pointing
# the ICD loader at an empty vendor folder). Also checks that `ferrolm test-backend` passes when a
# runtime is there. A build without the feature answers `BackendError::NotBuilt`, whose message
# the library's unit tests check (crates/ferrolm/src/backend.rs); CI compiles that build in its
# first clippy run rather than spending a second release build of the CLI on it here. Leaves the
# release binary built with the feature.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
target="${CARGO_TARGET_DIR:-target}"
model="${FERROLM_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME}/.cache}/ferrolm}/models/SmolLM2-135M-Instruct.Q4_1.gguf"

expect_error() { # expect_error NAME PATTERN COMMAND...
    local name="$1" pattern="$2"
    shift 2
    local out rc=0
    out="$("$@" 2>&1)" || rc=$?
    if [[ ${rc} == 0 || ${rc} -gt 128 ]] || ! grep -q "${pattern}" <<<"${out}"; then
        echo "FAIL ${name}: exit ${rc}, expected an error matching '${pattern}':" >&2
        echo "${out}" | tail -n 5 >&2
        exit 1
    fi
    echo "ok ${name}: $(grep -m1 "${pattern}" <<<"${out}")" >&2
}

# The release build with the feature (scripts/test.sh runs the server tests on it).
cargo build --release -q -p ferrolm-cli --features opencl
bin="${target}/release/ferrolm"
empty="$(mktemp -d)"
trap 'rm -rf "${empty}"' EXIT
expect_error "no OpenCL runtime" "no OpenCL runtime found" \
    env OCL_ICD_VENDORS="${empty}" "${bin}" generate -m "${model}" -p "Hi" -n 4 --backend opencl

# With a runtime (CI installs PoCL): every operator within 1e-3 of the CPU.
rc=0
out="$("${bin}" test-backend 2>&1)" || rc=$?
if [[ ${rc} == 0 ]]; then
    tail -n 2 <<<"${out}"
elif [[ "${CI:-}" != true ]] && grep -q "no OpenCL runtime\|lists no device" <<<"${out}"; then
    echo "notice: no OpenCL runtime, test-backend not run ($(tail -n 1 <<<"${out}"))" >&2
else
    echo "FAIL test-backend (exit ${rc}):" >&2
    tail -n 20 <<<"${out}" >&2
    exit 1
fi
