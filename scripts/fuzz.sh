#!/usr/bin/env bash
# Builds the cargo-fuzz targets in fuzz/ and runs each for a bounded time; fails on any crash.
#
#   bash scripts/fuzz.sh [seconds per target, default 60]
#
# Needs neither cargo-fuzz nor a nightly compiler, and shares the workspace's release build:
# - libFuzzer's coverage instrumentation goes only on the code under test and the harness
#   (ferrolm-format, ferrolm, ferrolm-server, ferrolm-fuzz): scripts/fuzz-rustc.sh, given to
#   cargo as the compiler, adds it to those crates. Per-package profile overrides turn debug assertions and
#   overflow checks on for them, which also gives their instrumented builds artifacts of their
#   own (the release build's stay as they are).
# - Every other crate (tokio, hyper, the tokenizers…) is the release build
#   `cargo build --release -p ferrolm-cli --features opencl` already made in target/release, so
#   after it this compiles only the instrumented crates and the ones above them.
# - Without ASan an out-of-bounds read in safe code is still a panic; what a nightly
#   `cargo fuzz run` with ASan adds is described in fuzz/README.md.
#
# Inputs that grow coverage go to fuzz/corpus/<target>/ (gitignored), the committed seeds are
# fuzz/seeds/<target>/, and a crashing input is written to fuzz/artifacts/<target>/ and makes
# this script exit non-zero.
set -euo pipefail

secs="${1:-60}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
targets=(gguf_parse http_request)
instrumented=(ferrolm-format ferrolm ferrolm-server ferrolm-fuzz)

# libfuzzer-sys compiles libFuzzer (C++).
if ! command -v c++ >/dev/null 2>&1; then
    echo "fuzz.sh: no C++ compiler (c++); install g++ (apt-get install g++)" >&2
    exit 1
fi

config=()
for p in "${instrumented[@]}"; do
    config+=(--config "profile.release.package.$p.debug-assertions=true")
    config+=(--config "profile.release.package.$p.overflow-checks=true")
done

cd "$root"
t0=$(date +%s)
echo "fuzz.sh: building ${targets[*]} (release; coverage instrumentation on ${instrumented[*]})"
FERROLM_FUZZ_CRATES="${instrumented[*]//-/_}" FERROLM_FUZZ_RUSTC="${RUSTC:-rustc}" RUSTC="$root/scripts/fuzz-rustc.sh" \
    cargo build --release -p ferrolm-fuzz --features opencl "${config[@]}" \
    $(printf -- '--bin %s ' "${targets[@]}")
echo "fuzz.sh: build took $(($(date +%s) - t0)) s"

cd "$root/fuzz"
for t in "${targets[@]}"; do
    mkdir -p "corpus/$t" "artifacts/$t"
    t1=$(date +%s)
    echo "fuzz.sh: $t for $secs s"
    # -rss_limit_mb / -malloc_limit_mb: an input that makes a parser allocate absurd memory is a
    # crash; -timeout: one input taking over 10 s is a crash too.
    "$root/target/release/$t" "corpus/$t" "seeds/$t" \
        -artifact_prefix="artifacts/$t/" -max_total_time="$secs" -max_len=65536 \
        -rss_limit_mb=2048 -malloc_limit_mb=1024 -timeout=10 -print_final_stats=1
    echo "fuzz.sh: $t done in $(($(date +%s) - t1)) s"
done
echo "fuzz.sh: every target ran $secs s without a crash; total $(($(date +%s) - t0)) s"
