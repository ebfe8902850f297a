#!/usr/bin/env bash
# Install Debian's headless Chromium and its chromedriver for scripts/server_tests/test_web_ui.py.
# Idempotent: does nothing when /usr/bin/chromium and /usr/bin/chromedriver already exist.
# Uses sudo only when not running as root.
set -euo pipefail

if [[ -x /usr/bin/chromium && -x /usr/bin/chromedriver ]]; then
    echo "chromium and chromedriver already installed"
    exit 0
fi

SUDO=()
if [[ "$(id -u)" -ne 0 ]]; then
    if ! command -v sudo >/dev/null 2>&1; then
        echo "error: not root and sudo is not available; install chromium and chromium-driver manually" >&2
        exit 1
    fi
    SUDO=(sudo)
fi

export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
    chromium chromium-driver

for bin in /usr/bin/chromium /usr/bin/chromedriver; do
    if [[ ! -x "$bin" ]]; then
        echo "error: $bin is still missing after apt-get install" >&2
        exit 1
    fi
done
echo "installed: $(/usr/bin/chromium --version 2>/dev/null || echo chromium), $(/usr/bin/chromedriver --version)"
