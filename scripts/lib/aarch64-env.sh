# shellcheck shell=bash
# Shared by scripts/test-aarch64.sh and scripts/test-aarch64-e2e.sh (sourced, not run): logging
# under the caller's $LOG_TAG, and the Debian packages that running aarch64 code under QEMU
# needs. Missing packages are installed with apt-get as root, or through passwordless sudo
# when CI=true; otherwise the caller stops with what to install.

SYSROOT=/usr/aarch64-linux-gnu

log() { printf '[%s] %s\n' "$LOG_TAG" "$*"; }
die() {
    printf '[%s] error: %s\n' "$LOG_TAG" "$*" >&2
    exit 1
}

# Runs a command as root: directly, or through passwordless sudo.
as_root() {
    if [ "$(id -u)" = 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        sudo "$@"
    else
        return 1
    fi
}

qemu_bin() { command -v qemu-aarch64 || command -v qemu-aarch64-static || true; }

# Installs the Debian packages named in "$@" (those found missing by the caller).
install_packages() {
    [ $# -gt 0 ] || return 0
    if [ "$(id -u)" = 0 ] || [ "${CI:-}" = true ]; then
        log "installing $*"
        as_root apt-get update -qq || die "apt-get update failed (root or passwordless sudo needed)"
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            "$@" >/dev/null || die "could not install $*"
    else
        die "missing $*: install them (sudo apt-get install $*) or run as root"
    fi
}

# Makes sure qemu-aarch64 (qemu-user) and the aarch64 C library (libc6-dev-arm64-cross, for
# dynamically linked test binaries) are there, plus any packages named in "$@"; sets $QEMU.
ensure_qemu_and_sysroot() {
    local missing=("$@")
    [ -n "$(qemu_bin)" ] || missing+=(qemu-user)
    [ -e "$SYSROOT/lib/crt1.o" ] || missing+=(libc6-dev-arm64-cross)
    install_packages "${missing[@]}"
    QEMU=$(qemu_bin)
    [ -n "$QEMU" ] || die "qemu-aarch64 not found after installing qemu-user"
}
