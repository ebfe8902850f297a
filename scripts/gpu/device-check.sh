#!/usr/bin/env bash
# The CUDA backend's checks on a machine with an NVIDIA GPU, run from the repository root there
# after scripts/gpu/pack-device.sh filled .gpu/ here. Results go to $OUT (default gpu-out/).
#
#   STEPS   which steps, in order (default "info backend opencl tests serve bench"):
#     info     the GPU, driver and NVRTC;
#     backend  `ferrolm test-backend --backend cuda` (every operator within 1e-3 of the CPU);
#     opencl   `ferrolm test-backend --backend opencl` (and pp512/tg32 of each model) on
#              NVIDIA's OpenCL (a binary built with
#              `--features cuda,opencl`; the ICD loader from the .deb in .gpu/ when the machine
#              has none, and NVIDIA's ICD through OCL_ICD_VENDORS when its vendors folder lacks it);
#     tests    the CUDA integration tests: operators, greedy parity with the CPU on the
#              reference prompts of each test model found in MODEL_DIR (the tie rule of
#              tests/common/parity.rs), eviction;
#     serve    the server's load test (scripts/server_tests/load_test.py) on CUDA with SmolLM2:
#              32 concurrent greedy clients against 1 and 32 slots, every response equal to the
#              same request alone, aggregate tokens/s with 32 slots at least 10x one slot's;
#     bench    `ferrolm bench -p 512 -n 128` on CUDA (and the CPU) next to llama.cpp's
#              llama-bench built with CUDA (LLAMA_BENCH, from scripts/gpu/build-llama-cuda.sh),
#              for each model in MODEL_DIR, and OpenCL's pp512/tg32 once;
#     llama-build  starts scripts/gpu/build-llama-cuda.sh in the background (about 4 minutes
#              with 16 cores) unless LLAMA_BENCH is there;
#     llama-wait   waits for that build (at most LLAMA_WAIT seconds, default 300);
#     models   joins the parts that earlier calls left in PARTS (default MODEL_DIR/parts;
#              numbered 1, 2, ...) into MODEL_DIR/MODEL_NAME and checks it against MODEL_SHA256
#              when set.
#   MODEL_DIR  folder of the test models (default /root/models).
#   LLAMA_BENCH  llama-bench built for CUDA (default /root/llama-cuda/bin/llama-bench).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT="${OUT:-gpu-out}"
MODEL_DIR="${MODEL_DIR:-/root/models}"
LLAMA_BENCH="${LLAMA_BENCH:-/root/llama-cuda/bin/llama-bench}"
STEPS="${STEPS:-info backend opencl tests serve bench}"
mkdir -p "${OUT}" /root/bin
# NVRTC from the toolkit, else from the nvidia-cuda-nvrtc wheel that PyTorch brings.
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
    $(python3 -c 'import nvidia, os; print(os.path.join(nvidia.__path__[0], "cu13", "lib"))' 2>/dev/null); do
    [[ -d "${d}" ]] && export LD_LIBRARY_PATH="${d}:${LD_LIBRARY_PATH:-}"
done
for name in ferrolm cuda-tests; do
    [[ -x "/root/bin/${name}" ]] || xz -dc ".gpu/${name}.xz" >"/root/bin/${name}" && chmod +x "/root/bin/${name}"
done
bin=/root/bin/ferrolm
rc=0

for step in ${STEPS}; do
    echo "=== ${step} $(date -u +%T)"
    case "${step}" in
    info)
        nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 | tee "${OUT}/info.txt"
        ls /usr/local/cuda/lib64/libnvrtc* 2>/dev/null | head -3 | tee -a "${OUT}/info.txt"
        ;;
    backend)
        "${bin}" test-backend --backend cuda >"${OUT}/test-backend.md" 2>&1 || rc=1
        tail -n 3 "${OUT}/test-backend.md"
        grep FAIL "${OUT}/test-backend.md" | head -20
        ;;
    opencl)
        if ! ldconfig -p | grep -q 'libOpenCL\.so\.1'; then
            mkdir -p /tmp/ocl && dpkg -x .gpu/ocl-icd-libopencl1_*.deb /tmp/ocl
            export LD_LIBRARY_PATH="/tmp/ocl/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
        fi
        if [[ ! -f /etc/OpenCL/vendors/nvidia.icd ]]; then
            mkdir -p /tmp/icd && echo libnvidia-opencl.so.1 >/tmp/icd/nvidia.icd
            export OCL_ICD_VENDORS=/tmp/icd
        fi
        "${bin}" test-backend --backend opencl >"${OUT}/opencl-test-backend.md" 2>&1 || rc=1
        head -n 1 "${OUT}/opencl-test-backend.md"
        tail -n 1 "${OUT}/opencl-test-backend.md"
        for m in "${MODEL_DIR}"/*.gguf; do
            [[ -f "${m}" ]] || continue
            timeout 120 "${bin}" bench -m "${m}" -p 512 -n 32 -r 1 --backend opencl 2>&1 \
                | tee -a "${OUT}/bench-opencl.md" | grep -E "^\|" || rc=1
        done
        ;;
    tests)
        FERROLM_MODEL_DIR="${MODEL_DIR}" /root/bin/cuda-tests --test-threads 1 --nocapture \
            >"${OUT}/tests.txt" 2>&1 || rc=1
        grep -E "agree|perplexity cpu|test result|panicked|FAILED|skipping|CUDA is here" "${OUT}/tests.txt" | head -40
        ;;
    serve)
        python3 scripts/server_tests/load_test.py --binary "${bin}" \
            --model "${MODEL_DIR}/SmolLM2-135M-Instruct.Q4_1.gguf" --server-arg=--backend=cuda \
            --slots 1,32 --clients 32 --duration "${LOAD_SECONDS:-30}" --prompts 8 --max-tokens 48 \
            --threads 8 --min-ratio 10 --check --json "${OUT}/load.json" >"${OUT}/load.txt" 2>&1 || rc=1
        tail -n 25 "${OUT}/load.txt"
        ;;
    bench)
        for m in "${MODEL_DIR}"/*.gguf; do
            [[ -f "${m}" ]] || continue
            echo "--- $(basename "${m}")"
            "${bin}" bench -m "${m}" -p 512 -n 128 -r "${REPS:-5}" --backend cuda,cpu -t 16 2>&1 \
                | tee -a "${OUT}/bench-ferrolm.md" | grep -E "^\|" || rc=1
            if [[ -x "${LLAMA_BENCH}" ]]; then
                "${LLAMA_BENCH}" -m "${m}" -p 512 -n 128 -r "${LLAMA_REPS:-10}" -ngl 99 2>&1 \
                    | tee -a "${OUT}/bench-llama.md" | grep -E "^\|" || rc=1
            else
                echo "no ${LLAMA_BENCH}: llama.cpp not measured" | tee -a "${OUT}/bench-llama.md"
            fi
        done
        ;;
    llama-build)
        if [[ ! -x "${LLAMA_BENCH}" ]]; then
            setsid bash scripts/gpu/build-llama-cuda.sh </dev/null >/dev/null 2>&1 &
            echo "llama-bench build started"
        fi
        ;;
    llama-wait)
        for _ in $(seq 1 "${LLAMA_WAIT:-300}"); do
            [[ -x "${LLAMA_BENCH}" ]] && break
            grep -q FAILED "$(dirname "$(dirname "${LLAMA_BENCH}")")/build.log" 2>/dev/null && break
            sleep 1
        done
        tail -n 2 "$(dirname "$(dirname "${LLAMA_BENCH}")")/build.log" 2>/dev/null
        ;;
    models)
        name="${MODEL_NAME:-SmolLM2-135M-Instruct.Q4_1.gguf}"
        parts="${PARTS:-${MODEL_DIR}/parts}"
        cat $(ls "${parts}" | sort -n | sed "s|^|${parts}/|") >"${MODEL_DIR}/${name}"
        rm -rf "${parts}"
        got=$(sha256sum "${MODEL_DIR}/${name}" | cut -d' ' -f1)
        echo "${name}: ${got}"
        if [[ -n "${MODEL_SHA256:-}" && "${got}" != "${MODEL_SHA256}" ]]; then
            echo "FAIL ${name}: sha256 ${got}, want ${MODEL_SHA256}"; rc=1
        fi
        ;;
    *) echo "unknown step ${step}"; rc=1 ;;
    esac
done
exit "${rc}"
