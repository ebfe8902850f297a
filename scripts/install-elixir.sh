#!/usr/bin/env bash
# Installs Erlang/OTP and Elixir from the distribution's packages (Debian/Ubuntu: `elixir`,
# `erlang-dev`) unless `elixir`, `mix` and `erl` are already there. Idempotent. Needs root (or
# sudo) when something is missing. Exits non-zero when the toolchain cannot be installed.
set -euo pipefail

have() { command -v elixir >/dev/null 2>&1 && command -v mix >/dev/null 2>&1 && command -v erl >/dev/null 2>&1; }

if have; then
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "error: Elixir is not installed and apt-get is not available; install Elixir >= 1.14 with OTP >= 25" >&2
    exit 1
fi

SUDO=()
if [[ "$(id -u)" != 0 ]]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO=(sudo)
    else
        echo "error: installing Elixir needs root or sudo" >&2
        exit 1
    fi
fi

echo "installing Erlang/OTP and Elixir (apt-get install elixir erlang-dev)..."
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" apt-get install -y -qq elixir erlang-dev >/dev/null

if ! have; then
    echo "error: elixir/mix/erl still missing after apt-get install" >&2
    exit 1
fi
elixir --version | tail -n 1
