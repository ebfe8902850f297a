#!/usr/bin/env bash
# The compiler scripts/fuzz.sh gives cargo (RUSTC): runs FERROLM_FUZZ_RUSTC, adding libFuzzer's
# coverage instrumentation (the `-C` flags `cargo fuzz build --sanitizer none` passes) and
# `--cfg fuzzing` to the crates named in FERROLM_FUZZ_CRATES, and every other call unchanged.
# (Not RUSTC_WRAPPER: the build scripts that use the cc crate rerun when that variable changes,
# which would rebuild ring, the tokenizers and what depends on them.)
set -euo pipefail

rustc="${FERROLM_FUZZ_RUSTC:-rustc}"
name=""
prev=""
for a in "$@"; do
    if [[ "$prev" == --crate-name ]]; then
        name="$a"
    fi
    prev="$a"
done
if [[ -n "$name" && " ${FERROLM_FUZZ_CRATES:-} " == *" $name "* ]]; then
    exec "$rustc" "$@" \
        -Cpasses=sancov-module \
        -Cllvm-args=-sanitizer-coverage-level=4 \
        -Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
        -Cllvm-args=-sanitizer-coverage-pc-table \
        -Cllvm-args=-sanitizer-coverage-trace-compares \
        -Cllvm-args=-simplifycfg-branch-fold-threshold=0 \
        -Cllvm-args=-sanitizer-coverage-stack-depth \
        --cfg fuzzing
fi
exec "$rustc" "$@"
