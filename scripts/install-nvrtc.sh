#!/usr/bin/env bash
# Prints a folder holding libnvrtc.so.* for the tests that compile the GPU kernels as CUDA
# (NVRTC needs no GPU): one already on the library path prints nothing; else the
# `nvidia-cuda-nvrtc` wheel is fetched with pip (the user's index, proxy and certificates) into
# the ferrolm cache once, and its lib folder is printed for LD_LIBRARY_PATH. Exits 0 with a
# notice when pip cannot fetch it (the test then skips, except under CI=true).
set -euo pipefail

if ldconfig -p 2>/dev/null | grep -q 'libnvrtc\.so'; then
    exit 0
fi
cache="${FERROLM_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME}/.cache}/ferrolm}/nvrtc"
lib="$(find "${cache}" -name 'libnvrtc.so.*' -printf '%h\n' 2>/dev/null | head -n 1 || true)"
if [[ -z "${lib}" ]]; then
    mkdir -p "${cache}"
    if ! python3 -m pip download -q --no-deps --only-binary=:all: -d "${cache}/wheel" 'nvidia-cuda-nvrtc>=13,<14' >&2; then
        echo "notice: pip could not fetch nvidia-cuda-nvrtc: the NVRTC kernel test will skip" >&2
        exit 0
    fi
    python3 -m zipfile -e "${cache}"/wheel/nvidia_cuda_nvrtc-*.whl "${cache}/unpacked" >&2
    rm -rf "${cache}/wheel"
    lib="$(find "${cache}" -name 'libnvrtc.so.*' -printf '%h\n' | head -n 1)"
fi
echo "${lib}"
