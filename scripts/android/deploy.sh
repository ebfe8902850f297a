#!/usr/bin/env bash
# Runs ferrolm on an Android phone over adb: pushes the static aarch64 `ferrolm` binary and a
# model to the phone, runs a ferrolm command there (by default `ferrolm bench` on the model with
# `-o jsonl`), and pulls its output back, appended to RESULTS/<device>.jsonl: ready for
# `ferrolm dashboard RESULTS/`. See docs/android.md ("Deploying to a phone").
#
# Usage: scripts/android/deploy.sh [OPTIONS] [-- ARGS...]
#
#   --serial SERIAL     the phone (adb -s SERIAL; default: adb's choice, e.g. $ANDROID_SERIAL)
#   --binary PATH       the aarch64 binary (default: target/aarch64-unknown-linux-musl/release/ferrolm,
#                       made by `bash scripts/build-aarch64.sh --target musl`)
#   --model PATH        the GGUF model to push (default: SmolLM2-135M-Instruct.Q4_1.gguf in
#                       $FERROLM_MODEL_DIR or ~/.cache/ferrolm/models)
#   --remote-dir DIR    where both go on the phone (default: /data/local/tmp/ferrolm)
#   --results DIR       the local folder for the results (default: bench-results)
#   --device-name NAME  the name results are filed under (default: the phone's ro.product.model)
#   --dry-run           print every adb command instead of running it (needs no adb, no phone)
#   -h, --help          this text
#
# ARGS after `--`: options (first word starting with `-`) are added to the default command,
# `ferrolm bench -m MODEL -o jsonl --device-name NAME`, e.g. `-- -p 512 -n 128 -t 4,8 -r 3`.
# A command line starting with a subcommand replaces it, e.g. `-- generate -m MODEL -p Hi`
# (the model file name, as the command runs in --remote-dir); its output is appended to
# RESULTS/<device>.<subcommand>.txt.
#
# Needs adb: Debian's android-sdk-platform-tools (or its `adb` package), or Google's
# platform-tools; ADB=PATH picks a particular one. The phone needs USB debugging on.
# Exit status: 0 on success, 2 for bad arguments, 1 for anything else.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."

log() { printf '[deploy] %s\n' "$*" >&2; }
die() {
    printf '[deploy] error: %s\n' "$*" >&2
    exit 1
}
usage_error() {
    printf '[deploy] error: %s (see --help)\n' "$*" >&2
    exit 2
}
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }

# Each word quoted for a POSIX shell (the phone's mksh, or this one) where it needs quoting.
quote() {
    local out=() w
    for w in "$@"; do
        if [[ -n "$w" && "$w" != *[!A-Za-z0-9_./:=@%+,-]* ]]; then
            out+=("$w")
        else
            out+=("'${w//\'/\'\\\'\'}'")
        fi
    done
    printf '%s\n' "${out[*]}"
}

serial=""
binary=target/aarch64-unknown-linux-musl/release/ferrolm
model="${FERROLM_MODEL_DIR:-${FERROLM_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ferrolm}/models}/SmolLM2-135M-Instruct.Q4_1.gguf"
remote_dir=/data/local/tmp/ferrolm
results=bench-results
device_name=""
dry_run=false
extra=()
while [[ $# -gt 0 ]]; do
    case $1 in
        --serial | --binary | --model | --remote-dir | --results | --device-name)
            [[ $# -ge 2 && -n "$2" && "$2" != --* ]] || usage_error "$1 needs a value"
            case $1 in
                --serial) serial=$2 ;;
                --binary) binary=$2 ;;
                --model) model=$2 ;;
                --remote-dir) remote_dir=${2%/} ;;
                --results) results=$2 ;;
                --device-name) device_name=$2 ;;
            esac
            shift 2
            ;;
        --dry-run)
            dry_run=true
            shift
            ;;
        -h | --help)
            usage
            exit 0
            ;;
        --)
            shift
            extra=("$@")
            break
            ;;
        *) usage_error "unknown argument '$1'" ;;
    esac
done
[[ "$remote_dir" == /* ]] || usage_error "--remote-dir must be an absolute path on the phone (got '$remote_dir')"

[[ -f "$binary" ]] || die "no ferrolm binary at $binary: build the static one with
    bash scripts/build-aarch64.sh --target musl
or name another with --binary"
# An ELF file (7f 45 4c 46) whose e_machine (bytes 18-19, little-endian) is 0xb7: aarch64.
header=$(od -An -tx1 -N20 "$binary" | tr -d ' \n')
[[ "$header" == 7f454c46* && "${header:36:4}" == b700 ]] ||
    die "$binary is not an aarch64 Linux program: build it with bash scripts/build-aarch64.sh --target musl"
[[ -f "$model" ]] || die "no model at $model: give one with --model (or fetch the test models with bash scripts/fetch-test-models.sh)"

adb=("${ADB:-adb}")
[[ -n "$serial" ]] && adb+=(-s "$serial")
if ! $dry_run && ! command -v "${adb[0]}" >/dev/null 2>&1; then
    die "adb not found: install Debian's android-sdk-platform-tools (sudo apt-get install android-sdk-platform-tools) or Google's platform-tools, or set ADB=PATH"
fi

# Runs an adb command (logged), or with --dry-run prints it.
run_adb() {
    if $dry_run; then
        quote "${adb[@]}" "$@"
    else
        log "$(quote "${adb[@]}" "$@")"
        "${adb[@]}" "$@"
    fi
}

if [[ -z "$device_name" ]]; then
    if $dry_run; then
        run_adb shell getprop ro.product.model
        device_name='<ro.product.model>'
    else
        device_name=$(run_adb shell getprop ro.product.model | tr -d '\r')
        [[ -n "$device_name" ]] || die "the phone did not tell its model name: give --device-name"
    fi
fi
# The results' file name: the device name with anything unusual turned into `-`.
file_name=$(printf '%s' "$device_name" | tr -c 'A-Za-z0-9._-' '-')
[[ "$device_name" == '<ro.product.model>' ]] && file_name=$device_name
model_file=$(basename "$model")

if [[ ${#extra[@]} -gt 0 && "${extra[0]}" != -* ]]; then
    command=("${extra[@]}")
    remote_out=output.txt
    local_out="$results/$file_name.${extra[0]}.txt"
else
    command=(bench -m "$model_file" -o jsonl --device-name "$device_name" ${extra[@]+"${extra[@]}"})
    remote_out=results.jsonl
    local_out="$results/$file_name.jsonl"
fi

run_adb shell mkdir -p "$remote_dir"
run_adb push --sync "$binary" "$remote_dir/ferrolm"
run_adb push --sync "$model" "$remote_dir/$model_file"
run_adb shell chmod 755 "$remote_dir/ferrolm"
remote_command="cd $(quote "$remote_dir") && ./ferrolm $(quote "${command[@]}") > $remote_out"
part="$results/.$file_name.part"
if $dry_run; then
    run_adb shell "$remote_command"
    run_adb pull "$remote_dir/$remote_out" "$part"
    echo "# then: append $part to $local_out"
    exit 0
fi
run_adb shell "$remote_command" || die "ferrolm failed on the phone (exit status $?)"
mkdir -p "$results"
run_adb pull "$remote_dir/$remote_out" "$part" >&2
if [[ "$remote_out" == output.txt ]]; then
    cat "$part"
fi
n=$(wc -l <"$part")
cat "$part" >>"$local_out"
rm -f "$part"
log "appended ${n// /} lines to $local_out"
