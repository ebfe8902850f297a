#!/usr/bin/env bash
# Create or refresh the Python virtual environment of the server tests and print its python.
#
# The environment lives in ${FERROLM_PYENV:-${FERROLM_CACHE_DIR:-~/.cache/ferrolm}/pyenv-server}
# and holds the third-party packages the tests use: `openai` (test_openai_client.py),
# `anthropic` (test_anthropic_client.py), `selenium` (test_web_ui.py) and SGLang's cache-aware
# router `sglang-router` (test_router.py, pinned: its flags are the test's). pip uses its own
# configured index. Idempotent: an environment that already imports them is left alone (set
# FERROLM_PYENV_UPGRADE=1 to upgrade them).
# The last line of stdout is the path of the environment's python.
set -euo pipefail

cache="${FERROLM_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME}/.cache}/ferrolm}"
venv="${FERROLM_PYENV:-${cache}/pyenv-server}"
py="${venv}/bin/python"
packages=(openai selenium anthropic "sglang-router==0.3.2")

if [[ ! -x "$py" ]]; then
    echo "creating $venv" >&2
    mkdir -p "$(dirname "$venv")"
    python3 -m venv "$venv"
fi

if [[ "${FERROLM_PYENV_UPGRADE:-0}" != "1" ]] && "$py" -c "import openai, selenium, anthropic, sglang_router" 2>/dev/null; then
    echo "$venv is up to date ($("$py" -c 'import openai, selenium; print("openai", openai.__version__, "selenium", selenium.__version__)'))" >&2
else
    echo "installing ${packages[*]} into $venv" >&2
    "$py" -m pip install --quiet --disable-pip-version-check --upgrade "${packages[@]}" >&2
    "$py" -c "import openai, selenium, anthropic, sglang_router" >&2
fi
echo "$py"
