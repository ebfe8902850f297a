#!/usr/bin/env bash
# Run llama.cpp's own server test suite (tools/server/tests, pytest) against `ferrolm serve`.
#
#   bash scripts/server_tests/llama_suite.sh [--binary PATH] [--files "test_basic.py test_x.py"]
#        [--server ferrolm|llama] [--llama-server PATH] [-k EXPR] [--floor N] [--timeout S] [--max-minutes M] [--port P] [--junit PATH]
#
# * The llama.cpp sources come from the llama-cpp-python sdist that scripts/bench_compare.py
#   downloads and caches (its `llama_source`, cache ~/.cache/ferrolm/llama.cpp or --cache-dir).
# * The suite runs in the venv ${FERROLM_CACHE_DIR:-~/.cache/ferrolm}/pyenv-llama-suite with the
#   suite's requirements.txt and pytest-timeout (pip, its own index configuration).
# * LLAMA_SERVER_BIN_PATH points at llama_server_shim.py, which turns llama-server's flags into
#   `ferrolm serve` flags and maps the suite's Hugging Face models to the local test models
#   (see its docstring); HF_HUB_OFFLINE=1, so unmapped models fail at once.
# * pytest runs in the suite's folder with `-p no:cacheprovider`, the plugin
#   llama_suite_support.py (no model downloads at session start; records HTTP errors), a
#   per-test timeout (--timeout, default 60 s) and an overall bound (--max-minutes, default 45),
#   and writes junit XML, from which the per-file table and the ranked failure causes are printed.
# * --server llama runs the same suite against the real llama-server (--llama-server PATH, else
#   $LLAMA_SERVER; `python3 scripts/build_llama_server.py` builds it and prints its path): the shim then execs it with the suite's flags unchanged but
#   the mapped models, for a per-file comparison (llama_suite_compare.py A.xml B.xml).
# Exit status: 1 when fewer than --floor tests passed (default: no floor), 2 on a setup error
# (no binary, no model, no sources); the suite's own failures alone do not fail the script.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "${here}/../.." && pwd)"
cache="${FERROLM_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME}/.cache}/ferrolm}"

binary="${FERROLM_BIN:-${repo}/target/release/ferrolm}"
server=ferrolm
llama_server="${LLAMA_SERVER:-}"
files=""
kexpr=""
floor=""
per_test=60
max_minutes=45
port="${LLAMA_SUITE_PORT:-18080}"
junit=""
llama_cache="${cache}/llama.cpp"
causes=30

usage() { sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

while [[ $# -gt 0 ]]; do
    case "$1" in
        --binary) binary="$2"; shift 2 ;;
        --server) server="$2"; shift 2 ;;
        --llama-server) llama_server="$2"; shift 2 ;;
        --files) files="$2"; shift 2 ;;
        -k) kexpr="$2"; shift 2 ;;
        --floor) floor="$2"; shift 2 ;;
        --timeout) per_test="$2"; shift 2 ;;
        --max-minutes) max_minutes="$2"; shift 2 ;;
        --port) port="$2"; shift 2 ;;
        --junit) junit="$2"; shift 2 ;;
        --cache-dir) llama_cache="$2"; shift 2 ;;
        --causes) causes="$2"; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "unknown option: $1 (see --help)" >&2; exit 2 ;;
    esac
done

real_env=()
if [[ "$server" == llama ]]; then
    if [[ -z "$llama_server" || ! -x "$llama_server" ]]; then
        echo "ERROR: llama-server not found at ${llama_server} (scripts/build_llama_server.py, or --llama-server PATH)" >&2
        exit 2
    fi
    real_env=(LLAMA_SERVER_REAL="$llama_server")
elif [[ "$server" != ferrolm ]]; then
    echo "ERROR: --server ferrolm|llama" >&2; exit 2
fi
binary="$(cd "$(dirname "$binary")" 2>/dev/null && pwd)/$(basename "$binary")" || true
if [[ ! -x "$binary" ]]; then
    echo "ERROR: ferrolm binary not found at ${binary} (cargo build --release, or --binary PATH)" >&2
    exit 2
fi
# The shim finds the models the way the other server tests do; fail early when they are missing.
if ! python3 -c "import sys; sys.path.insert(0, '${here}'); import common; common.find_model(common.SMOLLM2); common.find_model(common.GEMMA3); common.find_model(common.MINILM)"; then
    echo "ERROR: test models missing (scripts/fetch-test-models.sh, or set FERROLM_MODEL_DIR)" >&2
    exit 2
fi

# llama.cpp sources (bench_compare.py's download + cache).
mkdir -p "$llama_cache"
tree="$(python3 -c "
import sys
sys.path.insert(0, '${repo}/scripts')
import bench_compare
print(bench_compare.llama_source(sys.argv[1]))
" "$llama_cache")"
suite="${tree}/tools/server/tests"
if [[ ! -f "${suite}/utils.py" || ! -f "${suite}/requirements.txt" ]]; then
    echo "ERROR: no server test suite at ${suite}" >&2
    exit 2
fi

# llama-server reads GGUF files only: the embedding model, a Hugging Face folder here, is
# converted once by llama.cpp's own converter, with the conformance venv's torch and
# transformers (scripts/gen_conformance.py's, or $FERROLM_CONVERT_PYTHON).
if [[ "$server" == llama ]]; then
    gguf_dir="${cache}/llama-suite-gguf"
    minilm="$(python3 -c "import sys; sys.path.insert(0, '${here}'); import common; print(common.find_model(common.MINILM))")"
    out="${gguf_dir}/$(basename "$minilm").gguf"
    if [[ -d "$minilm" && ! -s "$out" ]]; then
        conv_py="${FERROLM_CONVERT_PYTHON:-${cache}/pyenv/bin/python}"
        mkdir -p "$gguf_dir"
        if ! PYTHONPATH="${tree}/gguf-py" "$conv_py" "${tree}/convert_hf_to_gguf.py" "$minilm" \
                --outfile "${out}.tmp" --outtype f16 > "${gguf_dir}/convert.log" 2>&1; then
            echo "ERROR: converting ${minilm} for llama-server failed (${gguf_dir}/convert.log)" >&2
            exit 2
        fi
        mv "${out}.tmp" "$out"
    fi
    real_env+=(LLAMA_SUITE_GGUF_DIR="$gguf_dir")
fi

# The suite's Python environment.
venv="${LLAMA_SUITE_PYENV:-${cache}/pyenv-llama-suite}"
py="${venv}/bin/python"
if [[ ! -x "$py" ]]; then
    echo "creating $venv" >&2
    python3 -m venv "$venv"
fi
if ! "$py" -c "import pytest, pytest_timeout, requests, wget, openai, filelock, numpy, aiohttp, prometheus_client" 2>/dev/null; then
    echo "installing the suite's requirements.txt and pytest-timeout into $venv" >&2
    "$py" -m pip install --quiet --disable-pip-version-check -r "${suite}/requirements.txt" pytest-timeout >&2
fi

# Which test files.
targets=()
if [[ -n "$files" ]]; then
    for f in $files; do
        f="$(basename "$f")"; [[ "$f" == *.py ]] || f="${f}.py"
        [[ -f "${suite}/unit/${f}" ]] || { echo "ERROR: no ${suite}/unit/${f}" >&2; exit 2; }
        targets+=("unit/${f}")
    done
else
    targets=("unit")
fi

out_dir="$(mktemp -d "${TMPDIR:-/tmp}/llama-suite.XXXXXX")"
[[ -n "$junit" ]] || junit="${out_dir}/junit.xml"
log="${out_dir}/pytest.log"
chmod +x "${here}/llama_server_shim.py" 2>/dev/null || true

pytest_args=(-p no:cacheprovider -p llama_suite_support -o junit_logging=all
             --timeout "$per_test" --junitxml "$junit" -q -rN)
[[ -n "$kexpr" ]] && pytest_args+=(-k "$kexpr")

echo "ferrolm: ${binary}" >&2
echo "suite:   ${suite} (${targets[*]})" >&2
echo "log:     ${log}" >&2
start=$(date +%s)
set +e
# timeout signals its whole process group, servers included, when the overall bound is hit.
(cd "$suite" && env "${real_env[@]}" LLAMA_SERVER_BIN_PATH="${here}/llama_server_shim.py" FERROLM_BIN="$binary" \
     PYTHONPATH="${here}${PYTHONPATH:+:${PYTHONPATH}}" HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}" \
     PORT="$port" \
     timeout -k 30 "$((max_minutes * 60))" "$py" -m pytest "${pytest_args[@]}" "${targets[@]}") \
     >"$log" 2>&1
rc=$?
set -e
secs=$(( $(date +%s) - start ))
tail -n 3 "$log"
echo "pytest exit status ${rc} after ${secs} s"
if [[ $rc -eq 124 || $rc -eq 137 ]]; then
    echo "WARNING: the suite ran past --max-minutes ${max_minutes}; the counts are partial" >&2
fi
if [[ ! -s "$junit" ]]; then
    echo "ERROR: pytest wrote no junit XML (see ${log})" >&2
    exit 2
fi
echo
report_args=(report "$junit" --causes "$causes")
[[ -n "$floor" ]] && report_args+=(--floor "$floor")
python3 "${here}/llama_suite_support.py" "${report_args[@]}"
