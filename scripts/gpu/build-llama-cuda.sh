#!/usr/bin/env bash
# Build llama.cpp's llama-bench with CUDA (sm_90, H100) on the offline GPU machine from
# the tarball made by scripts/gpu/pack-llama-src.sh. Run from the repo root:
#
#   scripts/gpu/build-llama-cuda.sh [TARBALL] [BUILD_DIR]
#       TARBALL    default .gpu/llama-src.tar.xz
#       BUILD_DIR  default /root/llama-cuda
#   env LOG        log file (default BUILD_DIR/build.log); all build output goes there
#   env SRC_DIR    where the sources are unpacked (default /root/llama-src; wiped first)
#   env JOBS       parallel jobs (default 16)
#
# Prints only the llama-bench path (or FAILED) on stdout. Background use:
#   setsid scripts/gpu/build-llama-cuda.sh </dev/null >/dev/null 2>&1 &
# then watch $LOG: its last line is the llama-bench path, or "FAILED rc=N ...".
set -euo pipefail

tarball=$(realpath "${1:-.gpu/llama-src.tar.xz}")
build=${2:-/root/llama-cuda}
src=${SRC_DIR:-/root/llama-src}
mkdir -p "$build"
LOG=${LOG:-$build/build.log}
mkdir -p "$(dirname "$LOG")"
exec 3>&1 >>"$LOG" 2>&1 </dev/null       # everything to the log (fd 3 = caller's stdout)
trap 'rc=$?; if [[ $rc != 0 ]]; then echo "FAILED rc=$rc at $(date -Is)";
      echo "FAILED rc=$rc, see $LOG" >&3; fi' EXIT
echo "=== start $(date -Is) tarball=$tarball build=$build"

# nvcc may not be on PATH
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
    export PATH=/usr/local/cuda/bin:$PATH
fi
export CUDACXX=${CUDACXX:-$(command -v nvcc || true)}
[[ -x $CUDACXX ]] || { echo "nvcc not found (PATH or /usr/local/cuda/bin)"; exit 1; }
"$CUDACXX" --version | tail -2

# fresh source tree (the tarball's entries are relative)
rm -rf "$src" && mkdir -p "$src" && tar -xJf "$tarball" -C "$src"

# LLAMA_BUILD_APP / LLAMA_OPENSSL / GGML_CUDA_NCCL: app/ is not packed, and nothing
# here needs HTTPS or multi-GPU NCCL. GGML_CUDA_FA_ALL_QUANTS is deprecated upstream
# (GGML_CUDA_FA_QUANTS replaces it); OFF is the default and keeps the default FA set.
cmake -S "$src" -B "$build" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release \
    -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_CUDA_COMPILER="$CUDACXX" \
    -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_BUILD_APP=OFF -DGGML_CUDA_NCCL=OFF \
    -DGGML_CUDA_FA_ALL_QUANTS=OFF -DBUILD_SHARED_LIBS=OFF
cmake --build "$build" --target llama-bench -j"${JOBS:-16}"

[[ -x $build/bin/llama-bench ]] || { echo "no $build/bin/llama-bench after the build"; exit 1; }
echo "=== end $(date -Is)"
echo "$build/bin/llama-bench" | tee /dev/fd/3
