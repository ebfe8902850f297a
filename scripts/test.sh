#!/usr/bin/env bash
# The project's test command: fetch the test models, then run every test of the workspace
# ([profile.test] is optimized, so model tests run at full speed) and the AVX-VNNI kernels (with
# AVX-512's form of their instruction where the CPU lacks AVX-VNNI), then the end-to-end tests of
# `ferrolm serve` (scripts/server_tests/run_all.sh: the official openai and anthropic clients,
# prefix cache, disconnects, fuzzing, the chat page in headless Chromium, a 16-client load test,
# a memory soak, llama.cpp's own server test suite with a floor of passes), the tests of
# the Python package (scripts/test-python.sh), the Hugging Face Hub tests against a local
# stand-in of the Hub (scripts/hub_tests/run.sh), the cargo-fuzz targets for a bounded time
# (scripts/fuzz.sh), and the Elixir package's tests
# (scripts/test-elixir.sh: installs Erlang/Elixir from Debian packages, `mix test` in
# bindings/elixir). Extra arguments go to `cargo test`. FERROLM_SKIP_SERVER_TESTS=1 skips the
# server's end-to-end tests, FERROLM_SKIP_PYTHON_TESTS=1 the Python ones,
# FERROLM_SKIP_ELIXIR_TESTS=1 the Elixir ones.
#
# The tests are built with the OpenCL backend (feature `opencl`, loaded at run time: the build
# needs no OpenCL files) and run it on PoCL, which scripts/install-opencl.sh installs when no
# OpenCL runtime is there; then both the plain build (from fetch-test-models.sh) and the OpenCL
# build are checked for a clear message where OpenCL is missing.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/fetch-test-models.sh
bash scripts/install-opencl.sh
# NVRTC for the test that compiles the kernels as CUDA (no GPU needed; the CUDA backend itself
# runs on a GPU machine: scripts/gpu/device-check.sh).
nvrtc_lib="$(bash scripts/install-nvrtc.sh)"
export LD_LIBRARY_PATH="${nvrtc_lib:+${nvrtc_lib}:}${LD_LIBRARY_PATH:-}"
cargo test --workspace --features ferrolm/opencl,ferrolm-cli/opencl "$@"
# The AVX-VNNI kernels against the portable ones: on a CPU with AVX-512 VNNI/VL but no AVX-VNNI
# (as the CI machines) the test-only feature runs them with the EVEX form of `vpdpbusd`.
if grep -qw avx_vnni /proc/cpuinfo 2>/dev/null || grep -qw avx512_vnni /proc/cpuinfo 2>/dev/null; then
    cargo test -p ferrolm-kernels --lib --features avx-vnni-as-avx512
else
    echo "notice: this CPU has neither AVX-VNNI nor AVX-512 VNNI: the AVX-VNNI kernels are not tested"
fi
bash scripts/check-opencl-messages.sh

if [[ "${FERROLM_SKIP_PYTHON_TESTS:-0}" != 1 ]]; then
    # The Python package (bindings/python) built with pip into a venv, and its pytest suite.
    bash scripts/test-python.sh
fi

if [[ "${FERROLM_SKIP_SERVER_TESTS:-0}" != 1 ]]; then
    # The release binary was built by check-opencl-messages.sh; rebuild in case sources changed.
    cargo build --release -p ferrolm-cli --features opencl
    # The load test checks behaviour here (outputs, no failures), not speed: a 30 s window on an
    # 8-slot server alone (the 1-slot run is only the baseline of the speed ratio). The random
    # phase of the HTTP fuzz step is 20 s (the cargo-fuzz target below covers the bodies).
    FERROLM_BIN="${CARGO_TARGET_DIR:-target}/release/ferrolm" FERROLM_LOAD_MIN_RATIO="${FERROLM_LOAD_MIN_RATIO:-0}" \
        FERROLM_LOAD_SECONDS="${FERROLM_LOAD_SECONDS:-30}" FERROLM_LOAD_SLOTS="${FERROLM_LOAD_SLOTS:-8}" \
        FERROLM_FUZZ_SECONDS="${FERROLM_FUZZ_SECONDS:-20}" bash scripts/server_tests/run_all.sh
fi

cargo build --release -p ferrolm-cli --features opencl
bash scripts/hub_tests/run.sh "${CARGO_TARGET_DIR:-target}/release/ferrolm"

# The cargo-fuzz targets (fuzz/: the GGUF reader, the HTTP API's request handling), built on the
# release build above, FERROLM_CARGO_FUZZ_SECONDS (20) each.
bash scripts/fuzz.sh "${FERROLM_CARGO_FUZZ_SECONDS:-20}"

if [[ "${FERROLM_SKIP_ELIXIR_TESTS:-0}" != 1 ]]; then
    bash scripts/test-elixir.sh
fi
