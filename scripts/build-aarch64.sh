#!/usr/bin/env bash
# Builds the `ferrolm` program for 64-bit Arm Linux in one command, with tools from PyPI only:
#   target/aarch64-unknown-linux-gnu/release/ferrolm    glibc ≥ 2.17, dynamically linked, with the
#                                                        OpenCL backend (libOpenCL loaded at run time)
#   target/aarch64-unknown-linux-musl/release/ferrolm   static (musl): runs unchanged on Android
#                                                        (adb shell, Termux) and any aarch64 Linux
#
# Usage: bash scripts/build-aarch64.sh [--target gnu|musl|all] [--profile PROFILE] [CARGO ARGS...]
#
# The C compiler and linker are Zig's (`ziglang` from PyPI) driven by `cargo-zigbuild` (PyPI),
# installed into a virtual environment under FERROLM_TOOLS_DIR (default ~/.cache/ferrolm/tools)
# on first use; the Rust standard libraries come from `rustup target add`. Only one dependency
# compiles C (ring, the TLS library's cryptography: `docs/arm.md` says why), so Zig is
# needed for it alone. CARGO_TARGET_DIR is honoured. The musl build leaves out the OpenCL
# backend: a static binary cannot load a shared library (see docs/arm.md for the Android
# NDK build that can).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

CARGO_ZIGBUILD_VERSION=0.24.1
ZIGLANG_VERSION=0.17.1
TOOLS_DIR=${FERROLM_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ferrolm/tools}
VENV="$TOOLS_DIR/zig-venv-$CARGO_ZIGBUILD_VERSION-$ZIGLANG_VERSION"

log() { printf '[build-aarch64] %s\n' "$*"; }
die() {
    printf '[build-aarch64] error: %s\n' "$*" >&2
    exit 2
}
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }

which_targets=all
profile=release
while [ $# -gt 0 ]; do
    case $1 in
        --target)
            [ $# -ge 2 ] || die "--target needs gnu, musl or all"
            which_targets=$2
            shift 2
            ;;
        --profile)
            [ $# -ge 2 ] || die "--profile needs a cargo profile name"
            profile=$2
            shift 2
            ;;
        -h | --help)
            usage
            exit 0
            ;;
        *) break ;;
    esac
done
case $which_targets in
    gnu | musl | all) ;;
    *) die "--target must be gnu, musl or all (got '$which_targets')" ;;
esac

python=$(command -v python3 || command -v python || true)
[ -n "$python" ] || die "python3 is needed (to install cargo-zigbuild and ziglang with pip)"

start=$SECONDS
if [ ! -x "$VENV/bin/cargo-zigbuild" ]; then
    log "installing cargo-zigbuild $CARGO_ZIGBUILD_VERSION and ziglang $ZIGLANG_VERSION into $VENV"
    rm -rf "$VENV"
    "$python" -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check \
        "cargo-zigbuild==$CARGO_ZIGBUILD_VERSION" "ziglang==$ZIGLANG_VERSION" ||
        die "pip could not install cargo-zigbuild and ziglang"
fi
# cargo-zigbuild finds Zig through the `ziglang` package of the Python on PATH.
export PATH="$VENV/bin:$PATH"

targets=()
[ "$which_targets" = musl ] || targets+=(aarch64-unknown-linux-gnu)
[ "$which_targets" = gnu ] || targets+=(aarch64-unknown-linux-musl)
for t in "${targets[@]}"; do
    if command -v rustup >/dev/null 2>&1; then
        rustup target list --installed | grep -qx "$t" || {
            log "adding the rustup target $t"
            rustup target add "$t" || die "rustup target add $t failed"
        }
    elif [ ! -d "$(rustc --print sysroot)/lib/rustlib/$t" ]; then
        die "the Rust standard library for $t is missing and rustup is not installed"
    fi
done
log "tools ready in $((SECONDS - start)) s (zig $("$VENV/bin/python" -m ziglang version))"

# No debug line tables in binaries for devices: smaller to push, and faster to build.
export CARGO_PROFILE_RELEASE_DEBUG=${CARGO_PROFILE_RELEASE_DEBUG:-false}
out_dir="${CARGO_TARGET_DIR:-target}"
for t in "${targets[@]}"; do
    t0=$SECONDS
    if [ "$t" = aarch64-unknown-linux-gnu ]; then
        # `.2.17`: link against glibc 2.17's symbols, so that the binary runs on old systems too.
        cargo zigbuild --profile "$profile" -p ferrolm-cli --features opencl --target "$t.2.17" "$@"
    else
        cargo zigbuild --profile "$profile" -p ferrolm-cli --target "$t" "$@"
    fi
    dir=$profile
    [ "$profile" != dev ] || dir=debug
    bin="$out_dir/$t/$dir/ferrolm"
    [ -x "$bin" ] || die "the build finished but $bin is missing"
    log "$t: $bin ($(du -h "$bin" | cut -f1), $((SECONDS - t0)) s)"
    if command -v file >/dev/null 2>&1; then
        log "  $(file -b "$bin" | cut -d, -f1-5)"
    fi
done
