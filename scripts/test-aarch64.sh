#!/usr/bin/env bash
# Cross-compiles ferrolm-kernels for aarch64 Linux and runs its tests under QEMU user-mode
# emulation, twice, so that both NEON kernel levels really run:
#   - CPU model cortex-a57: NEON without dotprod (the `neon` kernels);
#   - CPU model max: NEON with dotprod and i8mm (the `neon` and `neon-dotprod` kernels).
# Each run sets FERROLM_EXPECT_ISA, which makes a test fail unless the emulated CPU's best
# detected level is the one that run is for. Also lints the crate for aarch64 when clippy is
# installed (the NEON code is compiled for aarch64 only).
#
# Needs the rustup target aarch64-unknown-linux-gnu (added when missing), an aarch64 cross linker
# and C library (Debian: gcc-aarch64-linux-gnu, libc6-dev-arm64-cross) and qemu-aarch64
# (Debian: qemu-user). Missing Debian packages are installed with apt-get when run as root or
# with CI=true (through sudo if not root); otherwise the script stops and says what to install.
# The linker and runner are set for this script's cargo commands only, through
# CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_{LINKER,RUNNER}: x86 builds are unaffected.
# Extra arguments go to both `cargo test` runs.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

TARGET=aarch64-unknown-linux-gnu
LINKER=aarch64-linux-gnu-gcc
LOG_TAG=test-aarch64
# shellcheck source=scripts/lib/aarch64-env.sh
source scripts/lib/aarch64-env.sh

start=$SECONDS

# Debian packages: QEMU, the C library, and a cross linker.
extra=()
command -v "$LINKER" >/dev/null 2>&1 || extra+=(gcc-aarch64-linux-gnu)
ensure_qemu_and_sysroot "${extra[@]}"
command -v "$LINKER" >/dev/null 2>&1 || die "$LINKER not found after installing gcc-aarch64-linux-gnu"

# Rust standard library for the target (per user, no root needed).
if command -v rustup >/dev/null 2>&1; then
    if ! rustup target list --installed | grep -qx "$TARGET"; then
        log "adding the rustup target $TARGET"
        rustup target add "$TARGET" || die "rustup target add $TARGET failed"
    fi
elif [ ! -d "$(rustc --print sysroot)/lib/rustlib/$TARGET" ]; then
    die "the Rust standard library for $TARGET is missing and rustup is not installed"
fi
log "setup took $((SECONDS - start)) s ($("$QEMU" --version | head -n 1))"

export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=$LINKER

if cargo clippy --version >/dev/null 2>&1; then
    log "clippy for $TARGET"
    cargo clippy -p ferrolm-kernels --target "$TARGET" --all-targets -- -D warnings
else
    log "notice: clippy is not installed; skipping the aarch64 lints"
fi

# Runs the tests on the QEMU CPU model $1, which must detect $2 as its best level.
run_on() {
    local cpu=$1 expect=$2 t0=$SECONDS
    shift 2
    log "tests on QEMU CPU model $cpu (expected best level: $expect)"
    export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="$QEMU -L $SYSROOT -cpu $cpu"
    export FERROLM_EXPECT_ISA=$expect
    # The detection test alone first, with its output shown: which levels this run exercises.
    cargo test -p ferrolm-kernels --target "$TARGET" --lib detected_levels_match_the_expected_best \
        -- --nocapture
    cargo test -p ferrolm-kernels --target "$TARGET" "$@"
    log "cpu $cpu: $((SECONDS - t0)) s"
}

run_on cortex-a57 neon "$@"
run_on max neon-dotprod "$@"
log "all aarch64 runs passed in $((SECONDS - start)) s"
