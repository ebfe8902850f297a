#!/usr/bin/env python3
"""Run a command against a freshly started `ferrolm serve`.

Usage: with_server.py [--binary B] [--model M] [SERVER ARGS...] -- CMD [ARGS...]

Starts `ferrolm serve -m MODEL --host 127.0.0.1 --port 0 SERVER ARGS...`, waits for GET /health,
runs CMD with FERROLM_SERVER_URL=http://127.0.0.1:PORT in its environment (and every `{url}` in
CMD's arguments replaced by that URL), then stops the server with SIGTERM. Exits with CMD's
status; when CMD passed but the server did not exit with status 0 after SIGTERM, exits 1; when
the server cannot start, exits 2.

--binary defaults to $FERROLM_BIN or target/release/ferrolm; --model (-m) is a file name in the
models folder ($FERROLM_MODEL_DIR or ~/.cache/ferrolm/models) or a path; default SmolLM2.

Example:
  with_server.py --parallel 2 -- python3 scripts/server_tests/test_web_ui.py --base-url {url}
"""

import os
import subprocess
import sys

import common

USAGE = "usage: with_server.py [--binary B] [--model M] [SERVER ARGS...] -- CMD [ARGS...]"


def parse(argv):
    """Splits argv into (binary, model, server args, command); exits on bad usage."""
    if "--" not in argv:
        if any(a in ("-h", "--help") for a in argv):
            print(__doc__)
            sys.exit(0)
        sys.exit(f"{USAGE}\n(missing `--` before the command)")
    cut = argv.index("--")
    before, cmd = argv[:cut], argv[cut + 1:]
    if not cmd:
        sys.exit(f"{USAGE}\n(no command after `--`)")
    binary, model, server_args = common.default_binary(), common.SMOLLM2, []
    i = 0
    while i < len(before):
        a = before[i]
        if a in ("-h", "--help"):
            print(__doc__)
            sys.exit(0)
        if a in ("--binary", "--model", "-m"):
            if i + 1 >= len(before):
                sys.exit(f"{USAGE}\n({a} needs a value)")
            if a == "--binary":
                binary = before[i + 1]
            else:
                model = before[i + 1]
            i += 2
            continue
        if a.startswith("--binary="):
            binary = a.split("=", 1)[1]
        elif a.startswith("--model="):
            model = a.split("=", 1)[1]
        elif a in ("--host", "--port") or a.startswith(("--host=", "--port=")):
            sys.exit(f"{USAGE}\n({a} is chosen by with_server.py: 127.0.0.1 and a free port)")
        else:
            server_args.append(a)
        i += 1
    return binary, model, server_args, cmd


def main():
    binary, model, server_args, cmd = parse(sys.argv[1:])
    try:
        server = common.Server(binary, common.find_model(model), server_args)
        server.start()
    except common.SetupError as e:
        print(f"with_server.py: {e}", file=sys.stderr)
        return 2
    rc = 1
    try:
        argv = [a.replace("{url}", server.url) for a in cmd]
        env = dict(os.environ, FERROLM_SERVER_URL=server.url)
        print(f"running: {' '.join(argv)}", flush=True)
        try:
            rc = subprocess.call(argv, env=env)
        except OSError as e:
            print(f"with_server.py: cannot run {argv[0]}: {e}", file=sys.stderr)
            rc = 127
    finally:
        code, secs = server.stop()
    if code != 0:
        what = "did not exit in time" if code is None else f"exited with status {code}"
        print(f"with_server.py: the server {what} after SIGTERM\n{server.stderr_tail()}", file=sys.stderr)
        return rc or 1
    print(f"server stopped (exit 0 in {secs:.2f} s); command exited with {rc}", flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
