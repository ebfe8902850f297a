#!/usr/bin/env bash
# Pack the llama.cpp sources vendored by the llama-cpp-python sdist into a small
# tarball that can build `llama-bench` with CUDA on an offline GPU machine
# (see scripts/gpu/build-llama-cuda.sh).
#
# Usage: scripts/gpu/pack-llama-src.sh [OUTPUT]   (default: .gpu/llama-src.tar.xz)
#
# The source tree is found (or downloaded once) the way scripts/bench_compare.py
# does it: <cache>/llama_cpp_python-<ver>/vendor/llama.cpp, with
# <cache> = $FERROLM_CACHE_DIR or ${XDG_CACHE_HOME:-~/.cache}/ferrolm/llama.cpp, and the
# sdist kept in <cache>/sdist/.
#
# Only what a CMake configure + `--target llama-bench` build with GGML_CUDA=ON needs
# is kept: the configure step walks every add_subdirectory() that is on with
# LLAMA_BUILD_TESTS/EXAMPLES/SERVER/APP=OFF, so those CMake trees must be present too.
set -euo pipefail

VERSION=0.3.36
repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${1:-.gpu/llama-src.tar.xz}
case $out in /*) ;; *) out=$repo_root/$out ;; esac

base=${FERROLM_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ferrolm}
cache=$base/llama.cpp
tree=$cache/llama_cpp_python-$VERSION/vendor/llama.cpp

# --- find or fetch the source tree --------------------------------------------------
if [[ ! -f $tree/CMakeLists.txt ]]; then
    sdist=$cache/sdist/llama_cpp_python-$VERSION.tar.gz
    if [[ ! -f $sdist ]]; then
        echo "downloading the llama-cpp-python $VERSION sdist with pip" >&2
        mkdir -p "$cache/sdist"
        python3 -m pip download --no-deps --no-binary :all: \
            --dest "$cache/sdist" "llama-cpp-python==$VERSION"
    fi
    [[ -f $sdist ]] || { echo "pip download did not leave $sdist" >&2; exit 1; }
    echo "extracting $sdist" >&2
    tmp=$(mktemp -d "$cache/extract-XXXXXX")
    tar -xzf "$sdist" -C "$tmp"
    [[ -f $tmp/llama_cpp_python-$VERSION/vendor/llama.cpp/CMakeLists.txt ]] ||
        { echo "$sdist has no vendor/llama.cpp/CMakeLists.txt" >&2; exit 1; }
    rm -rf "$cache/llama_cpp_python-$VERSION"
    mv "$tmp/llama_cpp_python-$VERSION" "$cache/"
    rmdir "$tmp"
fi

# --- what to keep -------------------------------------------------------------------
# tools/ subdirectories that tools/CMakeLists.txt adds unconditionally on Linux with
# GGML_RPC=OFF, GGML_METAL=OFF, LLAMA_BUILD_SERVER=OFF (cli, server, ui, rpc, tuning
# are left out).
tools=(batched-bench gguf-split imatrix llama-bench completion perplexity quantize
       tokenize tts mtmd cvector-generator export-lora fit-params results)
paths=(CMakeLists.txt LICENSE cmake include src common vendor
       ggml/CMakeLists.txt ggml/cmake ggml/include ggml/src
       tools/CMakeLists.txt)
for t in "${tools[@]}"; do paths+=("tools/$t"); done

# Drop ggml backends other than CPU and CUDA. ggml-cuda/CMakeLists.txt globs only its
# own folder (*.cu, *.cuh, template-instances/, plus ../../include/ggml-cuda.h); its
# sources include ggml/src headers, vendors/*.h and, under GGML_USE_MUSA only,
# ggml-musa/mudnn.cuh, so the (16 KiB) ggml-musa folder is kept as well.
excludes=()
for d in "$tree"/ggml/src/ggml-*/; do
    b=$(basename "$d")
    case $b in ggml-cpu|ggml-cuda|ggml-musa) ;; *) excludes+=("--exclude=ggml/src/$b") ;; esac
done
# test media and other files no build step reads
excludes+=(--exclude=tools/mtmd/tests --exclude='tools/mtmd/*.mp3'
           --exclude='tools/mtmd/*.mp4' --exclude=.git
           --exclude=__pycache__ --exclude='*.py')

for p in "${paths[@]}"; do
    [[ -e $tree/$p ]] || { echo "missing in $tree: $p" >&2; exit 1; }
done

mkdir -p "$(dirname "$out")"
tmp_out=$out.tmp.$$
trap 'rm -f "$tmp_out"' EXIT
# Reproducible archive; entries are relative (extract with `tar -xJf ... -C DIR`).
XZ_OPT=${XZ_OPT:--9} tar -C "$tree" --sort=name --owner=0 --group=0 --numeric-owner \
    --mtime='2000-01-01 00:00:00Z' "${excludes[@]}" -cJf "$tmp_out" "${paths[@]}"
mv "$tmp_out" "$out"
trap - EXIT
echo "$out: $(du -h "$out" | cut -f1) ($(stat -c %s "$out") bytes, $(tar -tJf "$out" | wc -l) entries)"
