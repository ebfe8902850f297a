#!/usr/bin/env bash
# Prepares .gpu/ (ignored by git) for scripts/gpu/device-check.sh on a GPU machine: the release
# CLI (`--features cuda,opencl`) and the CUDA integration tests built here (the CUDA driver and
# NVRTC are loaded at run time, so nothing CUDA is needed to build), stripped and xz-compressed,
# and the llama.cpp sources for llama-bench (scripts/gpu/pack-llama-src.sh).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
mkdir -p .gpu
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >>.git/info/exclude
target="${CARGO_TARGET_DIR:-target}"

cargo build --release -q -p ferrolm-cli --features cuda,opencl
test_bin="$(cargo test --release -q -p ferrolm --features cuda --test cuda --no-run --message-format=json \
    | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "cuda":
        print(m["executable"])')"
for pair in "ferrolm:${target}/release/ferrolm" "cuda-tests:${test_bin}"; do
    name="${pair%%:*}" src="${pair#*:}"
    strip -o ".gpu/${name}" "${src}"
    xz -T2 -6 -f ".gpu/${name}"
    echo "$(du -h ".gpu/${name}.xz" | cut -f1) .gpu/${name}.xz"
done
[[ -f .gpu/llama-src.tar.xz ]] || bash scripts/gpu/pack-llama-src.sh
# The OpenCL ICD loader, for a GPU machine that has NVIDIA's OpenCL driver but no loader.
ls .gpu/ocl-icd-libopencl1_*.deb >/dev/null 2>&1 || (cd .gpu && apt-get download ocl-icd-libopencl1)
