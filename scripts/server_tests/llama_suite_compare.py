#!/usr/bin/env python3
"""Per-file side-by-side of two runs of llama.cpp's server suite (junit XML from llama_suite.sh).

    python3 scripts/server_tests/llama_suite_compare.py ferrolm.xml llama.xml [--names A B]

Prints, per test file: tests, passes in each run; then, per file, the tests the second run
passes and the first does not, with the first run's failure message (the work list).
"""

import argparse
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import llama_suite_support as support  # noqa: E402


def load(path):
    """{(file, test name): (outcome, message)}."""
    return {(r[0], r[1]): (r[2], r[3]) for r in support.read_junit(path)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--names", nargs=2, default=["ferrolm", "llama-server"])
    opts = ap.parse_args()
    a, b = load(opts.a), load(opts.b)
    files = sorted({f for f, _ in a} | {f for f, _ in b})
    na, nb = opts.names
    print(f"| file | tests | {na} passes | {nb} passes |")
    print("|---|---:|---:|---:|")
    tot = [0, 0, 0]
    for f in files:
        names = {t for ff, t in a if ff == f} | {t for ff, t in b if ff == f}
        pa = sum(1 for t in names if a.get((f, t), ("",))[0] == "passed")
        pb = sum(1 for t in names if b.get((f, t), ("",))[0] == "passed")
        tot = [tot[0] + len(names), tot[1] + pa, tot[2] + pb]
        print(f"| {f} | {len(names)} | {pa} | {pb} |")
    print(f"| **total** | {tot[0]} | {tot[1]} | {tot[2]} |")
    gap = defaultdict(list)
    for (f, t), (outcome, _) in b.items():
        if outcome == "passed" and a.get((f, t), ("missing",))[0] != "passed":
            oa, msg = a.get((f, t), ("missing", ""))
            gap[f].append((t, oa, msg.splitlines()[0][:160] if msg else ""))
    if gap:
        print(f"\nTests {nb} passes and {na} does not:")
        for f in sorted(gap):
            print(f"\n{f} ({len(gap[f])})")
            for t, oa, msg in sorted(gap[f]):
                print(f"  {t}: {oa}: {msg}")


if __name__ == "__main__":
    main()
