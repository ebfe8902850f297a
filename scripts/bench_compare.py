#!/usr/bin/env python3
"""ferrolm vs llama.cpp on the CPU, side by side (see docs/benchmarks.md).

Builds llama.cpp's `llama-bench` from the source llama-cpp-python ships (cached), builds
`ferrolm` (or takes --ferrolm BIN), then for every model, thread count and test runs the two
engines ALTERNATELY, one repetition each (`-r 1`, each run with its own warm-up), `--reps`
times, and prints a Markdown table of medians (min-max) and the ratio ferrolm / llama.cpp.
For text generation it also gives the share of the memory-bandwidth bound:
t/s x weight bytes read per token / measured read bandwidth.

    python3 scripts/bench_compare.py                       # test models + 0.5B, -p 512 -n 128 -t 2
    python3 scripts/bench_compare.py -m model.gguf -p 64 -n 16 -r 2 -t 1,2 --json out.json

Standard library only. Needs gcc (for the bandwidth probe) and a C++ toolchain (for llama.cpp);
cmake and ninja are installed with pip when missing.
"""
import argparse
import datetime
import hashlib
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time

LLAMA_CPP_PYTHON_VERSION = "0.3.36"
# x86 CPU features and the ggml CMake option each one turns on. The flags are named one by one
# instead of -DGGML_NATIVE=ON because the machine this project is measured on lists AMX, whose
# instructions fault there; each is ON only when /proc/cpuinfo lists every feature it needs (a
# hard-coded -DGGML_AVX_VNNI=ON build dies with SIGILL on a CPU without avx_vnni).
CPU_FEATURE_OPTIONS = [
    ("GGML_SSE42", ["sse4_2"]),
    ("GGML_AVX", ["avx"]),
    ("GGML_AVX2", ["avx2"]),
    ("GGML_BMI2", ["bmi2"]),
    ("GGML_FMA", ["fma"]),
    ("GGML_F16C", ["f16c"]),
    ("GGML_AVX_VNNI", ["avx_vnni"]),
    # GGML_AVX512 compiles with -mavx512f -mavx512cd -mavx512vl -mavx512dq -mavx512bw.
    ("GGML_AVX512", ["avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"]),
    ("GGML_AVX512_VBMI", ["avx512vbmi"]),
    ("GGML_AVX512_VNNI", ["avx512_vnni"]),
    ("GGML_AVX512_BF16", ["avx512_bf16"]),
]
NEVER_ON = ["-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF"]


def cpu_flags(path="/proc/cpuinfo"):
    """The set of CPU feature flags /proc/cpuinfo lists (x86 "flags" line), or None."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return None


def cpu_cmake_args(flags=None):
    """ggml CPU-feature CMake flags for this machine: -DGGML_NATIVE=OFF and every x86 option
    ON or OFF explicitly (with NATIVE off ggml would default AVX/AVX2/FMA/F16C/BMI2 to ON),
    AMX always OFF. Where /proc/cpuinfo has no x86 flags (e.g. aarch64): -DGGML_NATIVE=ON."""
    flags = cpu_flags() if flags is None else flags
    if not flags or "sse2" not in flags:
        return ["-DGGML_NATIVE=ON"]
    args = ["-DGGML_NATIVE=OFF"]
    for option, needs in CPU_FEATURE_OPTIONS:
        args.append(f"-D{option}={'ON' if all(n in flags for n in needs) else 'OFF'}")
    return args + NEVER_ON


DEFAULT_CMAKE_ARGS = cpu_cmake_args()

# Always passed: a static release build of llama-bench alone.
BASE_CMAKE_ARGS = [
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_CURL=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_SERVER=OFF",
    "-DLLAMA_BUILD_APP=OFF",
]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEST_MODELS = ["SmolLM2-135M-Instruct.Q4_1.gguf", "gemma-3-270m-q4_k_m.gguf"]
# Default models beyond the test models: (catalog name for `ferrolm pull`, file name). The 0.5B
# model's weights do not fit in the last-level cache, unlike the test models'.
PULLED_MODELS = [("qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-0.5b-instruct.gguf")]


def log(msg):
    print(f"[bench_compare {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Failure(Exception):
    """A step failed; the message says which and carries the tool's stderr."""


def run_checked(cmd, what, cwd=None, env=None, capture=True):
    """Runs `cmd`; on a non-zero exit raises Failure with its stderr. Returns stdout when captured."""
    log(f"$ {shlex.join(cmd)}")
    res = subprocess.run(
        cmd, cwd=cwd, env=env, text=True,
        stdout=subprocess.PIPE if capture else None, stderr=subprocess.PIPE if capture else None,
    )
    if res.returncode != 0:
        err = (res.stderr or "").strip() if capture else "(see the output above)"
        raise Failure(f"{what} failed (exit {res.returncode}): {shlex.join(cmd)}\n{err}")
    return res.stdout if capture else ""


# ---------------------------------------------------------------------------------------------
# Tools: cmake, ninja


def pip_tool(name):
    """Path of `name` on PATH, else installed with `python3 -m pip install name` and found."""
    found = shutil.which(name)
    if found:
        return found
    log(f"{name} not on PATH: installing it with pip")
    run_checked([sys.executable, "-m", "pip", "install", "--quiet", name], f"pip install {name}")
    dirs = [sysconfig.get_path("scripts"), sysconfig.get_path("scripts", f"{os.name}_user")]
    for d in dirs:
        cand = os.path.join(d, name)
        if os.access(cand, os.X_OK):
            return cand
    found = shutil.which(name)
    if found:
        return found
    raise Failure(f"installed {name} with pip but cannot find its executable (looked in {dirs})")


# ---------------------------------------------------------------------------------------------
# llama.cpp


def llama_source(cache):
    """The llama.cpp tree vendored by the llama-cpp-python sdist, downloaded and extracted once."""
    src_root = os.path.join(cache, f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}")
    tree = os.path.join(src_root, "vendor", "llama.cpp")
    if os.path.isfile(os.path.join(tree, "CMakeLists.txt")):
        return tree
    sdist_dir = os.path.join(cache, "sdist")
    os.makedirs(sdist_dir, exist_ok=True)
    sdist = os.path.join(sdist_dir, f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}.tar.gz")
    if not os.path.isfile(sdist):
        log(f"downloading the llama-cpp-python {LLAMA_CPP_PYTHON_VERSION} sdist with pip")
        run_checked(
            # `--no-binary llama-cpp-python`, not `:all:`: the latter would also build the
            # sdist's build requirements (cmake itself) from source to read its metadata.
            [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", "llama-cpp-python",
             "--dest", sdist_dir, f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}"],
            "pip download llama-cpp-python",
        )
    if not os.path.isfile(sdist):
        raise Failure(f"pip download did not leave {sdist}")
    log(f"extracting {sdist}")
    tmp = tempfile.mkdtemp(dir=cache, prefix="extract-")
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp, filter="data") if hasattr(tarfile, "data_filter") else tar.extractall(tmp)
    extracted = os.path.join(tmp, f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}")
    if not os.path.isfile(os.path.join(extracted, "vendor", "llama.cpp", "CMakeLists.txt")):
        raise Failure(f"{sdist} has no vendor/llama.cpp/CMakeLists.txt")
    if os.path.exists(src_root):
        shutil.rmtree(src_root)
    os.replace(extracted, src_root)
    shutil.rmtree(tmp, ignore_errors=True)
    return tree


def llama_build_dir(cache, cmake_args, base_args=None):
    """The build folder for these flags: <cache>/build-<first 12 hex digits of their SHA-256>."""
    all_args = (BASE_CMAKE_ARGS if base_args is None else base_args) + cmake_args
    key = hashlib.sha256("\0".join(all_args).encode()).hexdigest()[:12]
    return os.path.join(cache, f"build-{key}")


def llama_target_binary(target, cache, cmake_args, jobs, base_args=None):
    """Path of the cached llama.cpp program `target` built with `base_args` (default
    BASE_CMAKE_ARGS) + `cmake_args`; downloads the source and builds it when missing."""
    all_args = (BASE_CMAKE_ARGS if base_args is None else base_args) + cmake_args
    build = llama_build_dir(cache, cmake_args, base_args)
    binary = os.path.join(build, "bin", target)
    if os.access(binary, os.X_OK):
        return binary
    tree = llama_source(cache)
    cmake = pip_tool("cmake")
    ninja = pip_tool("ninja")
    os.makedirs(build, exist_ok=True)
    with open(os.path.join(build, "ferrolm-cmake-args.txt"), "w") as f:
        f.write("\n".join(all_args) + "\n")
    log(f"configuring llama.cpp in {build} (flags: {' '.join(all_args)})")
    run_checked(
        [cmake, "-S", tree, "-B", build, "-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}"] + all_args,
        "cmake configure", capture=False,
    )
    log(f"building {target} with -j{jobs} (about 10 minutes on 2 cores)")
    run_checked([cmake, "--build", build, "--target", target, f"-j{jobs}"], "cmake build",
                capture=False)
    if not os.access(binary, os.X_OK):
        raise Failure(f"the build finished but {binary} is missing")
    return binary


def llama_bench_binary(cache, cmake_args, jobs):
    """Path of a cached llama-bench built with `cmake_args`; builds it when missing."""
    return llama_target_binary("llama-bench", cache, cmake_args, jobs)


# ---------------------------------------------------------------------------------------------
# ferrolm


def ferrolm_binary(explicit):
    """--ferrolm BIN, or a release build of ferrolm-cli from this checkout."""
    if explicit:
        if not os.access(explicit, os.X_OK):
            raise Failure(f"--ferrolm {explicit} is not an executable")
        return os.path.abspath(explicit)
    log("building ferrolm (cargo build --release -p ferrolm-cli)")
    run_checked(["cargo", "build", "--release", "-p", "ferrolm-cli"], "cargo build", cwd=ROOT, capture=False)
    target = os.environ.get("CARGO_TARGET_DIR") or "target"
    binary = os.path.join(ROOT, target, "release", "ferrolm")  # a relative target dir is under ROOT
    if not os.access(binary, os.X_OK):
        raise Failure(f"cargo build finished but {binary} is missing")
    return binary


def checkout_dirty():
    """Whether tracked files of this checkout have uncommitted changes."""
    try:
        return bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                                   capture_output=True, text=True, check=True).stdout.strip())
    except (OSError, subprocess.CalledProcessError):
        return False


# ---------------------------------------------------------------------------------------------
# Models


def default_models(ferrolm):
    """The two test models (fetched with scripts/fetch-test-models.sh when missing) and the
    DRAM-sized Qwen2.5-Coder 0.5B (fetched with `ferrolm pull` when missing)."""
    cache = os.environ.get("FERROLM_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "ferrolm")
    models_dir = os.environ.get("FERROLM_MODEL_DIR") or os.path.join(cache, "models")
    paths = [os.path.join(models_dir, name) for name in TEST_MODELS]
    if not all(os.path.isfile(p) for p in paths):
        log(f"test models missing in {models_dir}: running scripts/fetch-test-models.sh")
        run_checked(["bash", os.path.join(ROOT, "scripts", "fetch-test-models.sh")], "fetch-test-models.sh",
                    cwd=ROOT, capture=False)
        # The script pulls into the ferrolm cache, which is FERROLM_MODEL_DIR when that is set.
        missing = [p for p in paths if not os.path.isfile(p)]
        if missing:
            raise Failure(f"fetch-test-models.sh did not provide {missing}")
    for name, file_name in PULLED_MODELS:
        path = os.path.join(models_dir, file_name)
        if not os.path.isfile(path):
            # `ferrolm pull` downloads into <cache>/models (and only checks a file already there).
            log(f"{file_name} missing in {models_dir}: ferrolm pull {name}")
            run_checked([ferrolm, "pull", name], f"ferrolm pull {name}", capture=False,
                        env=dict(os.environ, FERROLM_CACHE_DIR=cache))
            path = os.path.join(cache, "models", file_name)
        paths.append(path)
    return paths


def weight_bytes_per_token(ferrolm, model):
    """Bytes of weights one generated token reads, from `ferrolm inspect --json`.

    Every tensor is read once per token, except the token-embedding table when the model has a
    separate output matrix (then only one embedding row is read, counted here), and the experts
    of a mixture-of-experts model: a token reads `expert_used_count` of `expert_count` experts,
    so each 3-D `*_exps` tensor counts for that share of its size. With tied embeddings the
    table is the output matrix and is read in full.
    """
    info = json.loads(run_checked([ferrolm, "inspect", "--json", model], "ferrolm inspect"))
    sizes = {t["name"]: int(t["size"]) for t in info["tensors"]}
    meta = {m["key"]: m["value"] for m in info["metadata"]}
    arch = meta.get("general.architecture", "")
    n_expert, n_used = meta.get(f"{arch}.expert_count", 0), meta.get(f"{arch}.expert_used_count", 0)
    if n_expert and n_used:
        for name in sizes:
            if "_exps." in name:
                sizes[name] = sizes[name] * n_used // n_expert
    total = sum(sizes.values())
    if "output.weight" in sizes and "token_embd.weight" in sizes:
        embd = next(t for t in info["tensors"] if t["name"] == "token_embd.weight")
        rows = int(embd["shape"][1]) if len(embd["shape"]) > 1 else 1
        total -= sizes["token_embd.weight"] - sizes["token_embd.weight"] // max(rows, 1)
    return total


# ---------------------------------------------------------------------------------------------
# Memory bandwidth

BANDWIDTH_C = r"""
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* Reads a buffer of argv[1] bytes with argv[2] threads argv[3] times; prints the best
   bytes/second. The sum keeps the reads from being optimised away. */
int main(int argc, char **argv) {
    if (argc != 4) return 2;
    size_t n = (size_t)strtoull(argv[1], 0, 10) / sizeof(uint64_t);
    int threads = atoi(argv[2]), reps = atoi(argv[3]);
    omp_set_num_threads(threads);
    uint64_t *a = aligned_alloc(64, n * sizeof(uint64_t));
    if (!a) return 3;
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) a[i] = i * 2654435761u;
    double best = 0;
    uint64_t check = 0;
    for (int r = 0; r < reps; r++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        uint64_t s = 0;
        #pragma omp parallel for schedule(static) reduction(+:s)
        for (size_t i = 0; i < n; i++) s += a[i];
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double sec = (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec);
        double bw = n * sizeof(uint64_t) / sec;
        if (bw > best) best = bw;
        check += s;
    }
    printf("%.0f %llu\n", best, (unsigned long long)check);
    free(a);
    return 0;
}
"""


def read_bandwidth(cache, threads, size=1 << 30, reps=5):
    """Best-of-`reps` read bandwidth (bytes/s) of a `size`-byte buffer with `threads` threads."""
    src = os.path.join(cache, "read_bandwidth.c")
    binary = os.path.join(cache, "read_bandwidth")
    current = os.access(binary, os.X_OK) and os.path.isfile(src) and open(src).read() == BANDWIDTH_C
    if not current:
        with open(src, "w") as f:
            f.write(BANDWIDTH_C)
        run_checked(["gcc", "-O3", "-fopenmp", "-march=native", src, "-o", binary], "gcc (bandwidth probe)")
    out = run_checked([binary, str(size), str(threads), str(reps)], "bandwidth probe")
    return float(out.split()[0])


# ---------------------------------------------------------------------------------------------
# Runs


def one_run(cmd, engine):
    """Runs one engine for one repetition of one test; returns its t/s and its JSON object."""
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise Failure(f"{engine} failed (exit {res.returncode}): {shlex.join(cmd)}\n{res.stderr.strip()}")
    try:
        objs = json.loads(res.stdout)
        (obj,) = objs
        (ts,) = obj["samples_ts"]
    except (ValueError, KeyError, TypeError) as e:
        raise Failure(f"{engine} printed unexpected output ({e}): {shlex.join(cmd)}\n"
                      f"stdout: {res.stdout[-2000:]}\nstderr: {res.stderr[-4000:]}")
    return float(ts), obj


class CpuMeter:
    """How much CPU time processes other than this script's children use while it runs.

    Both engines spin worker threads; on a machine where something else runs they lose far more
    than their share, so every result carries this figure and is flagged when it is not small.
    Measures the intervals between `start()` and `stop()` only.
    """

    def __init__(self):
        self.hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self.known = True
        self.others = 0.0  # CPU seconds used by other processes in the measured intervals
        self.wall = 0.0  # seconds measured
        self.begin = None

    def _busy_seconds(self):
        try:
            with open("/proc/stat") as f:
                fields = f.readline().split()
        except OSError:
            return None
        # user nice system idle iowait irq softirq steal ...: everything but idle and iowait.
        v = [int(x) for x in fields[1:9]]
        return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / self.hz

    def _snapshot(self):
        t = os.times()
        return time.monotonic(), self._busy_seconds(), t.children_user + t.children_system

    def start(self):
        self.begin = self._snapshot()

    def stop(self):
        (w0, b0, o0), (w1, b1, o1) = self.begin, self._snapshot()
        if b0 is None or b1 is None:
            self.known = False
        else:
            self.others += max(0.0, (b1 - b0) - (o1 - o0))
        self.wall += w1 - w0

    def add(self, other):
        """Adds another meter's measured intervals to this one's."""
        self.known = self.known and other.known
        self.others += other.others
        self.wall += other.wall

    def share(self):
        """Share (0-1) of all CPUs used by other processes in the measured intervals; None if unknown."""
        if not self.known or self.wall <= 0:
            return None
        return self.others / (self.wall * (os.cpu_count() or 1))


def wait_for_quiet(max_wait, limit):
    """Waits, up to `max_wait` seconds, until other processes use at most `limit` (0-1) of the CPUs
    over a 2-second window."""
    t0 = time.monotonic()
    last_log = None
    while True:
        meter = CpuMeter()
        meter.start()
        time.sleep(2)
        meter.stop()
        share = meter.share()
        now = time.monotonic()
        if share is None or share <= limit:
            if last_log is not None:
                log(f"quiet after {now - t0:.0f} s")
            return
        if now - t0 >= max_wait:
            log(f"still busy after {max_wait:.0f} s (other processes: {100 * share:.0f}% of the CPUs); going on")
            return
        if last_log is None or now - last_log >= 30:
            log(f"waiting for a quiet machine: other processes use {100 * share:.0f}% of the CPUs")
            last_log = now


def measured_run(cmd, engine, args):
    """One run of one engine, with the other processes' CPU use measured around it. With
    --wait-idle it starts on a quiet machine and is run again (up to MAX_RETRIES times) when other
    processes used more than --max-other-load of the CPUs meanwhile.
    Returns (t/s, JSON object, meter, runs discarded)."""
    limit = args.max_other_load / 100
    discarded = 0
    while True:
        if args.wait_idle > 0:
            wait_for_quiet(args.wait_idle, limit)
        meter = CpuMeter()
        meter.start()
        ts, obj = one_run(cmd, engine)
        meter.stop()
        share = meter.share()
        if args.wait_idle > 0 and share is not None and share > limit and discarded < MAX_RETRIES:
            log(f"  {engine}: {ts:.2f} t/s discarded (other processes used {100 * share:.0f}% of the CPUs)")
            discarded += 1
            continue
        return ts, obj, meter, discarded


def test_args(n_prompt, n_gen, n_depth, threads, batch):
    return ["-p", str(n_prompt), "-n", str(n_gen), "-d", str(n_depth), "-t", str(threads), "-b", str(batch),
            "-r", "1", "-o", "json"]


def summary(samples):
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples)}


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def fmt_ts(s):
    return f"{s['median']:.2f} ({s['min']:.2f}–{s['max']:.2f})"


# With --wait-idle, a run (or a bandwidth probe) disturbed by other processes is discarded and
# run again, at most this many times.
MAX_RETRIES = 5


def fmt_share(row):
    share = row["other_cpu_share"]
    return "?" if share is None else f"{100 * share:.0f}%"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", action="append", help="GGUF model (repeatable; default: the two test models)")
    ap.add_argument("-t", "--threads", default="2", help="thread counts, comma list (default 2)")
    ap.add_argument("-p", "--n-prompt", default="512", help="prompt lengths, comma list (0: none; default 512)")
    ap.add_argument("-n", "--n-gen", default="128", help="generation lengths, comma list (0: none; default 128)")
    ap.add_argument("-d", "--n-depth", default="0",
                    help="tokens already in the cache when each test starts, comma list (llama-bench's -d; "
                    "default 0)")
    ap.add_argument("-r", "--reps", type=int, default=5, help="alternating runs per engine and test (default 5)")
    ap.add_argument("-b", "--batch-size", type=int, default=512, help="prompt tokens per forward pass (default 512)")
    ap.add_argument("--ferrolm", help="ferrolm binary to use instead of building this checkout")
    ap.add_argument("--llama-bench", help="llama-bench binary to use instead of building it")
    ap.add_argument("--cmake-args", help="llama.cpp CMake flags replacing the default CPU-feature flags "
                    f"(default: {' '.join(DEFAULT_CMAKE_ARGS)})")
    ap.add_argument("--cache-dir", default=os.path.expanduser("~/.cache/ferrolm/llama.cpp"),
                    help="where the llama.cpp source and build are cached (default ~/.cache/ferrolm/llama.cpp)")
    ap.add_argument("-j", "--jobs", type=int, default=2, help="parallel jobs for the llama.cpp build (default 2)")
    ap.add_argument("--no-bandwidth", action="store_true", help="skip the memory-bandwidth probe")
    ap.add_argument("--wait-idle", type=float, default=0, metavar="SECONDS",
                    help="before each run, wait up to SECONDS for other processes to use at most "
                    f"--max-other-load of the CPUs, and run it again (up to {MAX_RETRIES} times) when they "
                    "used more during it (default 0: neither)")
    ap.add_argument("--max-other-load", type=float, default=5, metavar="PCT",
                    help="share of all CPUs other processes may use during a run before its row is flagged "
                    "(and, with --wait-idle, the run is repeated); default 5")
    ap.add_argument("--build-only", action="store_true", help="build (or find) both binaries and stop")
    ap.add_argument("--json", metavar="FILE", help="write every sample and the summary to FILE")
    args = ap.parse_args()

    def int_list(s, name, minimum):
        try:
            v = [int(x) for x in s.split(",")]
        except ValueError:
            ap.error(f"{name}: not a comma list of integers: {s!r}")
        if any(x < minimum for x in v):
            ap.error(f"{name}: values must be at least {minimum}")
        return v

    threads = int_list(args.threads, "--threads", 1)
    depths = int_list(args.n_depth, "--n-depth", 0)
    tests = [(p, 0, d) for p in int_list(args.n_prompt, "--n-prompt", 0) if p > 0 for d in depths]
    tests += [(0, n, d) for n in int_list(args.n_gen, "--n-gen", 0) if n > 0 for d in depths]
    if not tests:
        ap.error("nothing to run: every --n-prompt and --n-gen value is 0")
    if args.reps < 1 or args.batch_size < 1 or args.jobs < 1:
        ap.error("--reps, --batch-size and --jobs must be at least 1")
    cmake_args = shlex.split(args.cmake_args) if args.cmake_args is not None else DEFAULT_CMAKE_ARGS
    os.makedirs(args.cache_dir, exist_ok=True)

    try:
        llama = os.path.abspath(args.llama_bench) if args.llama_bench else llama_bench_binary(
            args.cache_dir, cmake_args, args.jobs)
        ferrolm = ferrolm_binary(args.ferrolm)
        log(f"llama-bench: {llama}")
        log(f"ferrolm:     {ferrolm}")
        if args.build_only:
            return 0
        models = [os.path.abspath(m) for m in args.model] if args.model else default_models(ferrolm)
        for m in models:
            if not os.path.isfile(m):
                raise Failure(f"model {m} not found")
        bandwidth, bandwidth_load = {}, {}
        if not args.no_bandwidth and any(n and not d for _, n, d in tests):
            for t in threads:
                limit = args.max_other_load / 100
                for attempt in range(1 + (MAX_RETRIES if args.wait_idle > 0 else 0)):
                    if args.wait_idle > 0:
                        wait_for_quiet(args.wait_idle, limit)
                    meter = CpuMeter()
                    meter.start()
                    bandwidth[t] = read_bandwidth(args.cache_dir, t)
                    meter.stop()
                    share = meter.share()
                    if args.wait_idle > 0 and share is not None and share > limit and attempt < MAX_RETRIES:
                        log(f"bandwidth probe disturbed (other processes: {100 * share:.0f}% of the CPUs); again")
                        continue
                    break
                bandwidth_load[t] = share
                log(f"read bandwidth with {t} thread(s): {bandwidth[t] / 1e9:.2f} GB/s"
                    f" (other processes: {'?' if share is None else f'{100 * share:.0f}%'} of the CPUs)")
        rows = []
        llama_info = ferrolm_info = None
        for model in models:
            bytes_tok = weight_bytes_per_token(ferrolm, model)
            for t in threads:
                for n_prompt, n_gen, n_depth in tests:
                    name = f"pp{n_prompt}" if n_prompt else f"tg{n_gen}"
                    if n_depth:
                        name += f" @ d{n_depth}"
                    a = test_args(n_prompt, n_gen, n_depth, t, args.batch_size)
                    lcmd = [llama, "-m", model, "-ub", str(args.batch_size)] + a
                    fcmd = [ferrolm, "bench", "-m", model] + a
                    samples = {"llama.cpp": [], "ferrolm": []}
                    meter = CpuMeter()
                    discarded = 0
                    for i in range(args.reps):
                        log(f"{os.path.basename(model)} {name} t={t}: run {i + 1}/{args.reps}")
                        for engine, cmd in (("llama.cpp", lcmd), ("ferrolm", fcmd)):
                            ts, obj, run_meter, retried = measured_run(cmd, engine, args)
                            meter.add(run_meter)
                            discarded += retried
                            samples[engine].append(ts)
                            if engine == "llama.cpp":
                                llama_info = llama_info or obj
                            else:
                                ferrolm_info = ferrolm_info or obj
                    row = {
                        "model": os.path.basename(model), "path": model, "test": name, "threads": t,
                        "n_prompt": n_prompt, "n_gen": n_gen, "n_depth": n_depth, "samples_ts": samples,
                        "llama.cpp": summary(samples["llama.cpp"]), "ferrolm": summary(samples["ferrolm"]),
                        "commands": {"llama.cpp": lcmd, "ferrolm": fcmd},
                        "other_cpu_share": meter.share(),
                        "discarded_pairs": discarded,
                    }
                    row["ratio"] = row["ferrolm"]["median"] / row["llama.cpp"]["median"]
                    if n_gen and not n_depth and t in bandwidth:
                        bound = bandwidth[t] / bytes_tok
                        row["bandwidth"] = {
                            "bytes_per_token": bytes_tok, "read_bytes_per_s": bandwidth[t], "bound_ts": bound,
                            "other_cpu_share": bandwidth_load[t],
                            "llama.cpp_pct": 100 * row["llama.cpp"]["median"] / bound,
                            "ferrolm_pct": 100 * row["ferrolm"]["median"] / bound,
                        }
                    rows.append(row)
                    log(f"  llama.cpp {fmt_ts(row['llama.cpp'])}  ferrolm {fmt_ts(row['ferrolm'])}  "
                        f"ratio {row['ratio']:.3f}  other processes' CPU share {fmt_share(row)}")
    except Failure as e:
        print(f"error: {e}", file=sys.stderr)
        return 1

    machine = {"cpu": cpu_model(), "logical_cpus": os.cpu_count(),
               "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
               "kernel": platform.release()}
    llama_version = (f"llama-cpp-python {LLAMA_CPP_PYTHON_VERSION} vendor/llama.cpp "
                     f"(build_commit {llama_info.get('build_commit')}, build_number {llama_info.get('build_number')})"
                     if not args.llama_bench else
                     f"{llama} (build_commit {llama_info.get('build_commit')}, "
                     f"build_number {llama_info.get('build_number')})")
    report = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": shlex.join([sys.executable] + sys.argv),
        "machine": machine,
        # The commit the binary reports (build.rs); a build of this checkout with uncommitted
        # changes is marked +dirty.
        "ferrolm_commit": ferrolm_info["build_commit"] + ("+dirty" if not args.ferrolm and checkout_dirty() else ""),
        "llama_cpp": llama_version,
        "llama_cpp_cmake_args": None if args.llama_bench else BASE_CMAKE_ARGS + cmake_args,
        "reps": args.reps, "batch_size": args.batch_size, "max_other_load": args.max_other_load / 100,
        "results": rows,
    }
    print_report(report)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
        log(f"wrote {args.json}")
    return 0


def print_report(r):
    m = r["machine"]
    print(f"- machine: {m['cpu']}, {m['usable_cpus'] or m['logical_cpus']} usable CPUs, Linux {m['kernel']}")
    print(f"- ferrolm: commit {r['ferrolm_commit']}")
    print(f"- llama.cpp: {r['llama_cpp']}")
    if r["llama_cpp_cmake_args"]:
        print(f"- llama.cpp CMake flags: `{' '.join(r['llama_cpp_cmake_args'])}`")
    print(f"- {r['reps']} alternating single-repetition runs per engine and test, batch size {r['batch_size']}; "
          f"median t/s (min–max)")
    print(f"- command: `{r['command']}`")
    print(f"- date: {r['date']}")
    print()
    print("| model | test | threads | llama.cpp t/s | ferrolm t/s | ferrolm / llama.cpp | other load |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    busy = False
    limit = r["max_other_load"]
    for row in r["results"]:
        share = row["other_cpu_share"]
        flag = " (!)" if share is not None and share > limit else ""
        busy = busy or bool(flag)
        print(f"| {row['model']} | {row['test']} | {row['threads']} | {fmt_ts(row['llama.cpp'])} | "
              f"{fmt_ts(row['ferrolm'])} | {row['ratio']:.3f} | {fmt_share(row)}{flag} |")
    print()
    print("other load: the share of all CPUs used by other processes during that row's runs.")
    discarded = sum(row["discarded_pairs"] for row in r["results"])
    if discarded:
        print(f"{discarded} run(s) disturbed by other processes were discarded and run again.")
    if busy:
        print(f"(!) above {100 * limit:.0f}%: the machine was not quiet; these numbers are not reliable.")
    bw = [row for row in r["results"] if "bandwidth" in row]
    if bw:
        print()
        print("Text generation against the memory-bandwidth bound (weight bytes per token / read bandwidth):")
        print()
        print("| model | test | threads | weight MiB/token | read GB/s (other load) | bound t/s "
              "| llama.cpp % of bound | ferrolm % of bound |")
        print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for row in bw:
            b = row["bandwidth"]
            load = "?" if b["other_cpu_share"] is None else f"{100 * b['other_cpu_share']:.0f}%"
            flag = " (!)" if b["other_cpu_share"] is not None and b["other_cpu_share"] > limit else ""
            print(f"| {row['model']} | {row['test']} | {row['threads']} | {b['bytes_per_token'] / 2**20:.1f} | "
                  f"{b['read_bytes_per_s'] / 1e9:.2f} ({load}{flag}) | {b['bound_ts']:.1f} | "
                  f"{b['llama.cpp_pct']:.1f} | {b['ferrolm_pct']:.1f} |")


if __name__ == "__main__":
    sys.exit(main())
