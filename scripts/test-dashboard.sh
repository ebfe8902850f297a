#!/usr/bin/env bash
# End-to-end test of `ferrolm dashboard` in a real browser: three small `ferrolm bench -o jsonl`
# runs of the SmolLM2 test model (different thread counts, device names and a depth) plus a
# synthetic history over three older commits make a results folder; `ferrolm dashboard` turns it
# into a page, which headless Chromium renders (--dump-dom, and screenshots at a phone's and a
# desktop's window size). Fails unless every series of the inputs has its bar in each of its
# tests' plots, its line in the history plot of each test run on two builds or more, and its
# legend entry, and unless the screenshots are real PNG images of some size.
#
# Usage: bash scripts/test-dashboard.sh [KEEP_DIR]   (KEEP_DIR: keep the inputs, page and
# screenshots there)
#
# Needs the SmolLM2 test model (fetched by scripts/fetch-test-models.sh when missing), cargo (to
# build the release `ferrolm`, the same build as scripts/test.sh; FERROLM_BIN=PATH uses another
# binary) and Chromium: Debian's `chromium` is installed with apt-get when missing, as root or,
# with CI=true, through sudo. Without Chromium outside CI, only the page's HTML is checked. Under
# CI=true a missing model or browser fails the test.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

start=$SECONDS
ci=false
[[ "${CI:-}" == true || "${CI:-}" == 1 ]] && ci=true
log() { printf '[test-dashboard] %s\n' "$*"; }
die() {
    printf '[test-dashboard] error: %s\n' "$*" >&2
    exit 1
}

# Runs a command as root: directly, or through passwordless sudo.
as_root() {
    if [[ "$(id -u)" == 0 ]]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        sudo -n "$@"
    else
        return 1
    fi
}

# (a) Chromium.
chromium=${CHROMIUM:-$(command -v chromium || true)}
if [[ -z "$chromium" ]] && { [[ "$(id -u)" == 0 ]] || $ci; }; then
    log "installing Debian's chromium"
    as_root apt-get update -qq || die "apt-get update failed (root or passwordless sudo needed)"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null ||
        die "could not install chromium"
    chromium=$(command -v chromium || true)
fi
if [[ -z "$chromium" ]]; then
    $ci && die "chromium is required under CI=true"
    log "notice: no chromium (install Debian's chromium): checking the page's HTML only"
fi

# (b) The binary and (c) the model.
if [[ -z "${FERROLM_BIN:-}" ]]; then
    cargo build --release -p ferrolm-cli --features opencl
    FERROLM_BIN="${CARGO_TARGET_DIR:-target}/release/ferrolm"
fi
models_dir="${FERROLM_MODEL_DIR:-${FERROLM_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ferrolm}/models}"
model="$models_dir/SmolLM2-135M-Instruct.Q4_1.gguf"
[[ -f "$model" ]] || bash scripts/fetch-test-models.sh
[[ -f "$model" ]] || die "$model is missing after scripts/fetch-test-models.sh"

if [[ $# -gt 0 ]]; then
    out=$1
    mkdir -p "$out"
else
    out=$(mktemp -d)
    trap 'rm -rf "$out"' EXIT
fi
results="$out/results"
rm -rf "$results"
mkdir -p "$results"

log "bench runs"
bench() { "$FERROLM_BIN" bench -m "$model" -p 16 -n 4 -r 1 -o jsonl "$@"; }
bench -t 1 --device-name ci-box-a >"$results/a.jsonl"
bench -t 2 --device-name ci-box-b >"$results/b.jsonl"
bench -t 1 -d 8 --device-name "ci box c" >"$results/c.jsonl"
# A phone's results over three older builds (llama-bench's fields), pp16 and tg4 on each.
for i in 1 2 3; do
    for t in "16 0 $((200 + 40 * i))" "0 4 $((30 + 5 * i))"; do
        read -r n_prompt n_gen ts <<<"$t"
        printf '{"build_commit":"%s","cpu_info":"Cortex-A76","device":"pixel-7","backends":"CPU","model_filename":"/data/local/tmp/ferrolm/SmolLM2-135M-Instruct.Q4_1.gguf","n_threads":4,"n_prompt":%s,"n_gen":%s,"n_depth":0,"test_time":"2026-0%s-01T12:00:00Z","avg_ts":%s,"stddev_ts":1.5}\n' \
            "${i}${i}${i}${i}${i}${i}${i}" "$n_prompt" "$n_gen" "$i" "$ts"
    done
done >"$results/history.jsonl"

# (d) The page, from the folder.
"$FERROLM_BIN" dashboard "$results" -o "$out/dashboard.html" --title "ferrolm dashboard test"

# (e) The rendered page (or, without a browser, the page itself).
dom="$out/dashboard.html"
if [[ -n "$chromium" ]]; then
    browse() {
        timeout 120 "$chromium" --headless --no-sandbox --disable-gpu --hide-scrollbars \
            --user-data-dir="$out/chromium-profile" "$@" "file://$(cd "$out" && pwd)/dashboard.html" \
            2>>"$out/chromium.log"
    }
    browse --dump-dom >"$out/dom.html" || die "chromium --dump-dom failed: $(tail -5 "$out/chromium.log")"
    dom="$out/dom.html"
    browse --screenshot="$out/phone.png" --window-size=412,2400 >/dev/null || die "phone screenshot failed"
    browse --screenshot="$out/desktop.png" --window-size=1280,1600 >/dev/null || die "desktop screenshot failed"
fi

# A flat JSON object's string or number field (our result lines hold no escaped quotes).
field() { sed -nE "s/.*\"$2\":(\"([^\"]*)\"|(-?[0-9][0-9.eE+-]*)).*/\2\3/p" <<<"$1"; }
count() { { grep -oF -- "$1" "$dom" || true; } | wc -l; }

# What the inputs say the page must show: a bar per (test, series), a history line per (test,
# series) where the test ran on two builds or more, a legend entry per series.
declare -A bars=() builds=() series_all=()
for f in "$results"/*.jsonl; do
    while IFS= read -r line; do
        [[ -n "$line" ]] || continue
        model=$(field "$line" model_filename)
        model=${model##*/}
        threads=$(field "$line" n_threads)
        word=threads
        [[ "$threads" == 1 ]] && word=thread
        series="${model%.gguf} / $(field "$line" backends) / $threads $word / $(field "$line" device)"
        n_prompt=$(field "$line" n_prompt) n_gen=$(field "$line" n_gen) depth=$(field "$line" n_depth)
        if [[ "$n_gen" == 0 ]]; then test="pp$n_prompt"; else test="tg$n_gen"; fi
        [[ "${depth:-0}" == 0 ]] || test+=" @ d$depth"
        bars["$test|$series"]=1
        builds["$test|$(field "$line" build_commit)"]=1
        series_all["$series"]=1
    done <"$f"
done

failures=0
check() {
    local want=$1 what=$2 got
    got=$(count "$what")
    if [[ "$got" != "$want" ]]; then
        log "FAIL: $got times (want $want) in the DOM: $what"
        failures=$((failures + 1))
    fi
}
n_history=0
for key in "${!bars[@]}"; do
    test=${key%%|*} series=${key#*|}
    check 1 "data-plot=\"bars\" data-test=\"$test\" data-series=\"$series\""
    n_builds=0
    for b in "${!builds[@]}"; do [[ "${b%%|*}" == "$test" ]] && n_builds=$((n_builds + 1)); done
    if [[ $n_builds -ge 2 ]]; then
        check 1 "data-plot=\"history\" data-test=\"$test\" data-series=\"$series\""
        n_history=$((n_history + 1))
    fi
done
for series in "${!series_all[@]}"; do
    [[ $(count "<li data-series=\"$series\">") -ge 1 ]] || {
        log "FAIL: no legend entry for $series"
        failures=$((failures + 1))
    }
done
# Nothing more than the inputs hold, and the inputs hold what the runs above made.
check "${#bars[@]}" 'data-plot="bars"'
check "$n_history" 'data-plot="history"'
[[ ${#bars[@]} == 8 && $n_history == 6 && ${#series_all[@]} == 4 ]] ||
    die "the inputs gave ${#bars[@]} bars, $n_history history lines, ${#series_all[@]} series (want 8, 6, 4)"

if [[ -n "$chromium" ]]; then
    for png in "$out/phone.png" "$out/desktop.png"; do
        size=$(stat -c %s "$png" 2>/dev/null || echo 0)
        magic=$(head -c 8 "$png" 2>/dev/null | od -An -tx1 | tr -d ' \n')
        if [[ "$magic" != 89504e470d0a1a0a || $size -lt 20000 ]]; then
            log "FAIL: $png is not a PNG of 20 kB or more ($size bytes)"
            failures=$((failures + 1))
        fi
    done
fi

[[ $failures == 0 ]] || die "$failures check(s) failed (to keep the page: bash $0 KEEP_DIR)"
log "ok: ${#bars[@]} bars, $n_history history lines, ${#series_all[@]} series in $([[ -n "$chromium" ]] && echo "Chromium's DOM" || echo "the HTML"), $((SECONDS - start)) s"
