#!/usr/bin/env python3
"""Cross-check the conformance fixtures' greedy tokens against llama.cpp's llama-server.

A lighter stand-in for scripts/check_conformance_llamacpp.py where llama-cpp-python is not
installed but a llama-server binary of the same llama.cpp is (scripts/server_tests build one into
~/.cache/ferrolm/llama.cpp/build-*/bin). For each model it serves `<name>/model.gguf` (CPU, one
thread, context 256), sends every prompt of `<name>/expected.json` as token ids with greedy
sampling, and compares the generated tokens with the reference that applies to the GGUF
(`gguf_reference` when present, else `prompts`).

Usage: python3 scripts/check_conformance_llama_server.py [--server PATH] [NAME ...]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "crates" / "ferrolm" / "tests" / "fixtures" / "conformance"
PORT = 8391


def post(path: str, body: dict) -> dict:
    req = urllib.request.Request(f"http://127.0.0.1:{PORT}{path}", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=60))


def check_model(server: str, name: str) -> bool:
    exp = json.loads((FIX / name / "expected.json").read_text())
    ref = exp.get("gguf_reference", {}).get("prompts") or exp["prompts"]
    log = open(f"/tmp/llama-server-{name}.log", "w")
    srv = subprocess.Popen([server, "-m", str(FIX / name / "model.gguf"), "--port", str(PORT),
                            "-c", "256", "-t", "1", "-np", "1", "--no-warmup"],
                           stdout=log, stderr=subprocess.STDOUT)
    try:
        for _ in range(200):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{PORT}/health", timeout=1)
                break
            except Exception:
                time.sleep(0.2)
        ok = True
        for i, (p, r) in enumerate(zip(exp["prompts"], ref)):
            got = post("/completion", {"prompt": p["tokens"], "n_predict": len(r["greedy"]),
                                       "temperature": 0, "top_k": 1, "cache_prompt": False,
                                       "return_tokens": True})["tokens"]
            same = got == r["greedy"]
            ok &= same
            status = "identical" if same else f"llama.cpp {got} != reference {r['greedy']}"
            print(f"{name} prompt {i} ({len(p['tokens'])} tokens): {status}")
        return ok
    finally:
        srv.terminate()
        srv.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    found = sorted(glob.glob(os.path.expanduser("~/.cache/ferrolm/llama.cpp/build-*/bin/llama-server")))
    ap.add_argument("--server", default=found[-1] if found else None, help="llama-server binary")
    ap.add_argument("names", nargs="*", help="fixtures (default: every one in the manifest)")
    args = ap.parse_args()
    if not args.server:
        sys.exit("no llama-server found: pass --server PATH")
    names = args.names or [m["name"] for m in json.loads((FIX / "manifest.json").read_text())["models"]]
    bad = [n for n in names if not check_model(args.server, n)]
    print("all greedy tokens identical" if not bad else f"greedy tokens differ: {', '.join(bad)}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
