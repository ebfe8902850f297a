#!/usr/bin/env python3
"""Builds llama.cpp's `llama-server` (the reference for ferrolm's server load test) and prints its path.

The source is the llama.cpp tree vendored by the llama-cpp-python sdist that
scripts/bench_compare.py uses (downloaded with pip, cached); cmake and ninja come from pip when
missing. The build is cached under <cache-dir>/build-<hash of the CMake flags>/, so a second run
prints the path at once.

CPU-feature flags: -DGGML_NATIVE=OFF and each AVX/AVX2/FMA/F16C/AVX-VNNI/AVX512* option ON only
when /proc/cpuinfo lists the feature; AMX is never enabled (the measurement machine lists AMX but
its instructions fault there). The server is built without curl, OpenSSL or the web UI assets
(no network access during the build).

    python3 scripts/build_llama_server.py            # build (about 10+ minutes on 2 cores), print the path
    python3 scripts/build_llama_server.py --print-flags

Standard library only; needs a C++ toolchain.
"""
import argparse
import os
import shlex
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_compare  # noqa: E402  (shares the llama.cpp download/build code)

# Always passed: a static release build of the tools with the server, nothing fetched at build time.
SERVER_BASE_CMAKE_ARGS = [
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_CURL=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_APP=OFF",
    # The web UI is either built with npm or downloaded from a Hugging Face bucket: neither here.
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
]
DEFAULT_CACHE = os.path.expanduser("~/.cache/ferrolm/llama.cpp")


def llama_server_binary(cache=DEFAULT_CACHE, cmake_args=None, jobs=2):
    """Path of the cached llama-server built with `cmake_args` (default: this CPU's feature
    flags); builds it when missing. Raises bench_compare.Failure when a step fails."""
    cmake_args = bench_compare.cpu_cmake_args() if cmake_args is None else cmake_args
    os.makedirs(cache, exist_ok=True)
    return bench_compare.llama_target_binary("llama-server", cache, cmake_args, jobs,
                                             base_args=SERVER_BASE_CMAKE_ARGS)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--cmake-args", help="llama.cpp CMake flags replacing the detected CPU-feature flags")
    ap.add_argument("--cache-dir", default=DEFAULT_CACHE,
                    help="where the llama.cpp source and builds are cached (default ~/.cache/ferrolm/llama.cpp)")
    ap.add_argument("-j", "--jobs", type=int, default=2, help="parallel build jobs (default 2)")
    ap.add_argument("--print-flags", action="store_true",
                    help="print the full CMake flags and the build folder, build nothing")
    args = ap.parse_args()
    if args.jobs < 1:
        ap.error("--jobs must be at least 1")
    cmake_args = shlex.split(args.cmake_args) if args.cmake_args is not None else bench_compare.cpu_cmake_args()
    if args.print_flags:
        print(" ".join(SERVER_BASE_CMAKE_ARGS + cmake_args))
        print(bench_compare.llama_build_dir(args.cache_dir, cmake_args, SERVER_BASE_CMAKE_ARGS))
        return 0
    try:
        binary = llama_server_binary(args.cache_dir, cmake_args, args.jobs)
    except bench_compare.Failure as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(binary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
