#!/usr/bin/env bash
# Run every end-to-end test of `ferrolm serve` and print a summary (time and PASS/FAIL per step).
#
#   bash scripts/server_tests/run_all.sh [STEP...]
#
# Steps (default: all, in this order): openai anthropic prefix disconnect slowloris fuzz webui load soak
# models (--models-dir: load on first use, LRU unloading, parallel models)
# router (two replicas behind sglang-router: prefix affinity, failover, throughput)
# llama (llama.cpp's own server test suite through llama_suite.sh, which fails below
# FERROLM_LLAMA_SUITE_FLOOR passes, default LLAMA_SUITE_FLOOR below).
# Builds nothing: the binary is $FERROLM_BIN, else target/release/ferrolm. The model is SmolLM2 in
# $FERROLM_MODEL_DIR or ${FERROLM_CACHE_DIR:-~/.cache/ferrolm}/models. When either is missing the
# run is skipped with a message, except under CI=true, where that is an error.
# Environment: FERROLM_FUZZ_SECONDS (random fuzz phase, default 45), FERROLM_LOAD_SECONDS (load
# window, default 60), FERROLM_LOAD_MIN_RATIO (tokens/s of 8 slots over 1 slot that the load test
# requires, default 3.0; scripts/test.sh sets 0: speed is measured by benchmarks, not gated in CI),
# FERROLM_FUZZ_SEED (fuzz seed, default time-based), FERROLM_SOAK_SECONDS (memory soak with
# --cache-ram 256, default 120; the 10-minute soak is test_soak.py --seconds 600),
# FERROLM_ROUTER_SECONDS (each throughput window of the router test, default 10).
# Exits 1 when any step failed.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root"

BIN="${FERROLM_BIN:-target/release/ferrolm}"
export FERROLM_BIN="$BIN"
cache="${FERROLM_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME}/.cache}/ferrolm}"
model="${FERROLM_MODEL_DIR:-${cache}/models}/SmolLM2-135M-Instruct.Q4_1.gguf"
ci=false
case "${CI:-}" in 1 | true | TRUE | yes) ci=true ;; esac

missing=""
[[ -x "$BIN" ]] || missing="the ferrolm binary $BIN (build it with cargo build --release, or set FERROLM_BIN)"
[[ -f "$model" ]] || missing="${missing:+$missing; }the model $model (run scripts/fetch-test-models.sh)"
if [[ -n "$missing" ]]; then
    if $ci; then
        echo "ERROR: missing $missing" >&2
        exit 1
    fi
    echo "SKIPPED server tests: missing $missing" >&2
    exit 0
fi

all_steps=(openai anthropic prefix disconnect slowloris fuzz webui load soak models router llama)
# Passes of llama.cpp's server suite required: some below the 307 of 590 measured when it was
# set (llama-server itself: 290, docs/server.md), for its timing-sensitive tests. Raise it as
# ferrolm passes more.
LLAMA_SUITE_FLOOR=306
steps=("$@")
[[ ${#steps[@]} -gt 0 ]] || steps=("${all_steps[@]}")
for s in "${steps[@]}"; do
    [[ " ${all_steps[*]} " == *" $s "* ]] || { echo "unknown step '$s' (steps: ${all_steps[*]})" >&2; exit 2; }
done

names=()
results=()
times=()

# run_step NAME CMD...: runs CMD, records its time and result.
run_step() {
    local name="$1"
    shift
    echo
    echo "=== $name: $*"
    local t0 t1 rc
    t0=$(date +%s.%N)
    "$@"
    rc=$?
    t1=$(date +%s.%N)
    names+=("$name")
    times+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')")
    if [[ $rc -eq 0 ]]; then results+=("PASS"); else results+=("FAIL (exit $rc)"); fi
}

# Records a step that could not run.
skip_step() {
    names+=("$1")
    times+=("0.0")
    results+=("FAIL ($2)")
}

t_start=$(date +%s)
PY=""
want() { [[ " ${steps[*]} " == *" $1 "* ]]; }
if want openai || want anthropic || want webui || want router; then
    echo "=== setup_venv.sh"
    if out="$(bash "$here/setup_venv.sh")"; then
        PY="$(tail -n 1 <<<"$out")"
        echo "python: $PY"
    else
        echo "setup_venv.sh failed" >&2
    fi
fi

for step in "${steps[@]}"; do
    case "$step" in
        openai)
            if [[ -n "$PY" ]]; then
                run_step openai "$PY" "$here/test_openai_client.py" --binary "$BIN"
            else
                skip_step openai "no venv"
            fi
            ;;
        anthropic)
            if [[ -n "$PY" ]]; then
                run_step anthropic "$PY" "$here/test_anthropic_client.py" --binary "$BIN"
            else
                skip_step anthropic "no venv"
            fi
            ;;
        prefix) run_step prefix python3 "$here/test_prefix_cache.py" --binary "$BIN" ;;
        disconnect) run_step disconnect python3 "$here/test_disconnect.py" --binary "$BIN" ;;
        slowloris) run_step slowloris python3 "$here/test_slowloris.py" --binary "$BIN" ;;
        fuzz)
            run_step fuzz python3 "$here/test_fuzz.py" --binary "$BIN" --seconds "${FERROLM_FUZZ_SECONDS:-45}" \
                ${FERROLM_FUZZ_SEED:+--seed "$FERROLM_FUZZ_SEED"}
            ;;
        webui)
            run_step install_chromium bash "$here/install_chromium.sh"
            if [[ -n "$PY" ]]; then
                run_step webui python3 "$here/with_server.py" --binary "$BIN" -- \
                    "$PY" "$here/test_web_ui.py" --base-url "{url}"
            else
                skip_step webui "no venv"
            fi
            ;;
        load)
            run_step load python3 scripts/server_tests/load_test.py --server ferrolm --binary "$BIN" \
                --duration "${FERROLM_LOAD_SECONDS:-60}" --slots "${FERROLM_LOAD_SLOTS:-1,8}" \
                --check --min-ratio "${FERROLM_LOAD_MIN_RATIO:-3.0}"
            ;;
        soak)
            run_step soak python3 "$here/test_soak.py" --binary "$BIN" --seconds "${FERROLM_SOAK_SECONDS:-120}"
            ;;
        models) run_step models python3 "$here/test_models_dir.py" --binary "$BIN" ;;
        router)
            if [[ -n "$PY" ]]; then
                run_step router python3 "$here/test_router.py" --binary "$BIN" \
                    --router "$(dirname "$PY")/sglang-router" --seconds "${FERROLM_ROUTER_SECONDS:-10}"
            else
                skip_step router "no venv"
            fi
            ;;
        llama)
            run_step llama bash "$here/llama_suite.sh" --binary "$BIN" --max-minutes 15 \
                --floor "${FERROLM_LLAMA_SUITE_FLOOR:-$LLAMA_SUITE_FLOOR}"
            ;;
    esac
done

echo
echo "=== summary (binary $BIN)"
failed=0
for i in "${!names[@]}"; do
    printf '%-18s %8ss  %s\n' "${names[$i]}" "${times[$i]}" "${results[$i]}"
    [[ "${results[$i]}" == PASS ]] || failed=1
done
echo "total $(($(date +%s) - t_start)) s"
if [[ $failed -ne 0 ]]; then
    echo "SERVER TESTS FAILED"
    exit 1
fi
echo "all server tests passed"
