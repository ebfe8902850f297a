#!/usr/bin/env bash
# Makes sure an OpenCL runtime is installed for the OpenCL backend's tests: when there is none
# (the ICD loader and a registered driver), installs PoCL (Debian/Ubuntu `pocl-opencl-icd`, which runs
# OpenCL kernels on the CPU) and the ICD loader with apt-get, as root or through sudo. On other
# systems it says what to install and exits 0: the tests then skip the OpenCL cases, except
# under CI=true, where they fail.
set -euo pipefail

# A runtime: the ICD loader (libOpenCL.so.1) plus a registered driver whose library is there (a
# removed package can leave its .icd file behind).
have_runtime() {
    ldconfig -p 2>/dev/null | grep -q 'libOpenCL\.so\.1' || return 1
    local icd lib
    for icd in /etc/OpenCL/vendors/*.icd; do
        [[ -f "${icd}" ]] || continue
        lib="$(head -n 1 "${icd}")"
        if [[ -e "${lib}" ]] || ldconfig -p 2>/dev/null | grep -q "${lib}"; then
            return 0
        fi
    done
    return 1
}

if have_runtime; then
    echo "OpenCL runtime: $(cat /etc/OpenCL/vendors/*.icd | tr '\n' ' ')" >&2
    exit 0
fi

packages=(ocl-icd-libopencl1 pocl-opencl-icd clinfo)
sudo=""
if [[ "$(id -u)" != 0 ]]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        sudo="sudo -n"
    else
        echo "notice: no OpenCL runtime and no root: install ${packages[*]} to test the OpenCL backend" >&2
        exit 0
    fi
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "notice: no OpenCL runtime and no apt-get: install PoCL or a GPU's OpenCL driver" >&2
    exit 0
fi
echo "==> installing ${packages[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
${sudo} apt-get update -qq
${sudo} apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
clinfo -l >&2 || true
