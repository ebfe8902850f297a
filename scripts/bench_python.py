#!/usr/bin/env python3
"""Generation speed through the Python package (`ferrolm.Llama`) vs the `ferrolm` CLI vs
llama-cpp-python, on the same GGUF files and thread count, in one run.

    python3 scripts/bench_python.py                  # both test models, -n 128 -t 2 -r 3
    python3 scripts/bench_python.py -m model.gguf -n 64 -r 5 -t 4 --json out.json

Sets up a venv (${FERROLM_CACHE_DIR:-~/.cache/ferrolm}/pyenv-bench) with this checkout's
`ferrolm` package (pip install ./bindings/python) and llama-cpp-python 0.3.36, built from its
sdist with the same CPU flags as scripts/bench_compare.py builds llama.cpp (every x86 feature this
CPU has, AVX-512/VNNI included, AMX off). Then, per model, alternating the three engines, `--reps`
times each:

* ferrolm.Llama and llama_cpp.Llama: one greedy completion of 1 token and one of N tokens (the
  end-of-sequence token banned) in the same process; decode tokens/s = (N - 1) / (t_N - t_1),
  which leaves out the prompt and the per-call cost shared by both lengths;
* the CLI: `ferrolm generate --temp 0 --ignore-eos -n N`, its own decode tokens/s;
* the binding's own overhead: wall-clock time of the N-token call through `ferrolm.Llama` over
  the time the engine itself reports for it (prompt + decode), minus one.

Prints a Markdown table of medians. Standard library only (outside the venv).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_compare as bc  # noqa: E402

LLAMA_CPP_PYTHON = f"llama-cpp-python=={bc.LLAMA_CPP_PYTHON_VERSION}"
PROMPT = "Once upon a time, in a small village by the sea,"

# Runs inside the venv: loads one engine, prints one JSON line per repetition.
WORKER = r"""
import json, sys, time
engine, path, n, threads, reps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
prompt = sys.argv[6]
if engine == "ferrolm":
    from ferrolm import Llama
else:
    from llama_cpp import Llama
llm = Llama(model_path=path, n_ctx=1024, n_threads=threads, n_batch=512, verbose=False)
ban = {llm.token_eos(): float("-inf")}
def run(k):
    llm.reset()
    t = time.perf_counter()
    out = llm.create_completion(prompt, max_tokens=k, temperature=0.0, logit_bias=ban)
    return time.perf_counter() - t, out["usage"]["completion_tokens"]
run(8)  # warm-up
for _ in range(reps):
    t1, _ = run(1)
    tn, got = run(n)
    row = {"decode_tps": (got - 1) / (tn - t1), "tokens": got, "wall_s": tn}
    if engine == "ferrolm":
        f = llm._session.last_finish
        row["engine_s"] = (f.prompt_ms + f.decode_ms) / 1e3
    print(json.dumps(row), flush=True)
"""


def venv_python(cache):
    venv = os.path.join(cache, "pyenv-bench")
    py = os.path.join(venv, "bin", "python")
    if not os.path.exists(py):
        bc.run_checked([sys.executable, "-m", "venv", venv], "python3 -m venv")
    return py


def setup(py, jobs, install_ferrolm):
    """Installs this checkout's ferrolm and llama-cpp-python (when missing) into the venv."""
    if install_ferrolm:
        bc.run_checked([py, "-m", "pip", "install", "--quiet", "--force-reinstall", "--no-deps",
                        os.path.join(bc.ROOT, "bindings", "python")], "pip install ./bindings/python",
                       capture=False)
    have = subprocess.run([py, "-c", "import llama_cpp; print(llama_cpp.__version__)"],
                          capture_output=True, text=True)
    if have.returncode == 0 and have.stdout.strip() == bc.LLAMA_CPP_PYTHON_VERSION:
        return
    env = dict(os.environ)
    env["CMAKE_ARGS"] = " ".join(bc.cpu_cmake_args() + ["-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF"])
    env["CMAKE_BUILD_PARALLEL_LEVEL"] = str(jobs)
    bc.log(f"building {LLAMA_CPP_PYTHON} from source with CMAKE_ARGS={env['CMAKE_ARGS']}")
    bc.run_checked([py, "-m", "pip", "install", "--no-binary", "llama-cpp-python", "--no-cache-dir",
                    LLAMA_CPP_PYTHON], "pip install llama-cpp-python", env=env, capture=False)


def python_engine(py, engine, model, n, threads, reps):
    out = bc.run_checked([py, "-c", WORKER, engine, model, str(n), str(threads), str(reps), PROMPT],
                         f"{engine} worker")
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def cli_engine(binary, model, n, threads):
    out = subprocess.run([binary, "generate", "-m", model, "-p", PROMPT, "-n", str(n), "--temp", "0",
                          "--ignore-eos", "--no-display-prompt", "-t", str(threads)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise bc.Failure(f"ferrolm generate failed: {out.stderr}")
    m = re.search(r"eval time =\s*[\d.]+ ms /\s*(\d+) runs.*?([\d.]+) tokens per second", out.stderr.split("prompt eval")[1])
    return {"decode_tps": float(m.group(2)), "tokens": int(m.group(1)) + 1}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", action="append", help="GGUF file (repeatable; default: both test models)")
    ap.add_argument("-n", type=int, default=128, help="tokens to generate")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-r", "--reps", type=int, default=3)
    ap.add_argument("--ferrolm", help="the ferrolm binary (default: built with cargo)")
    ap.add_argument("--json", help="write the results here too")
    ap.add_argument("--no-install", action="store_true",
                    help="use the ferrolm package already in the venv (do not pip install ./bindings/python)")
    args = ap.parse_args()
    cache = os.environ.get("FERROLM_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "ferrolm")
    binary = bc.ferrolm_binary(args.ferrolm)
    py = venv_python(cache)
    setup(py, os.cpu_count() or 2, not args.no_install)
    models = args.model or bc.default_models()
    results = []
    for model in models:
        rows = {"ferrolm.Llama": [], "ferrolm CLI": [], "llama_cpp.Llama": []}
        for _ in range(args.reps):  # alternate the engines, one process each per round
            rows["ferrolm.Llama"] += python_engine(py, "ferrolm", model, args.n, args.threads, 1)
            rows["ferrolm CLI"].append(cli_engine(binary, model, args.n, args.threads))
            rows["llama_cpp.Llama"] += python_engine(py, "llama_cpp", model, args.n, args.threads, 1)
        med = {k: statistics.median(r["decode_tps"] for r in v) for k, v in rows.items()}
        overhead = statistics.median(r["wall_s"] / r["engine_s"] - 1 for r in rows["ferrolm.Llama"])
        results.append({"model": os.path.basename(model), "median_decode_tps": med,
                        "binding_overhead": overhead, "runs": rows})
    print(f"\ndecode tokens/s, median of {args.reps}, -n {args.n}, {args.threads} threads, {bc.cpu_model()}\n")
    print("| model | ferrolm.Llama | ferrolm CLI | llama_cpp.Llama | Llama / CLI | Llama / llama_cpp | binding overhead |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        m = r["median_decode_tps"]
        print(f"| {r['model']} | {m['ferrolm.Llama']:.1f} | {m['ferrolm CLI']:.1f} | {m['llama_cpp.Llama']:.1f} | "
              f"{m['ferrolm.Llama'] / m['ferrolm CLI']:.3f} | {m['ferrolm.Llama'] / m['llama_cpp.Llama']:.3f} | "
              f"{100 * r['binding_overhead']:.2f}% |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    try:
        main()
    except bc.Failure as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
