"""Shared helpers of the `ferrolm serve` end-to-end tests (standard library only).

* Finding the binary (`--binary`, $FERROLM_BIN, else target/release/ferrolm) and the model
  ($FERROLM_MODEL_DIR, else ${FERROLM_CACHE_DIR:-~/.cache/ferrolm}/models).
* `Server`: starts `ferrolm serve` on 127.0.0.1 port 0, reads the `listening on http://ADDR` line
  it prints on stdout, waits for GET /health 200; on exit sends SIGTERM and checks that the
  server exits with status 0 within its shutdown timeout.
* Small HTTP helpers over urllib / http.client: `request`, `post_json`, `get_json`, `stream_sse`.
* `Checks`: prints one PASS/FAIL line per check and gives the exit status.
"""

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SMOLLM2 = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA3 = "gemma-3-270m-q4_k_m.gguf"
# A BERT embedding model: a Hugging Face folder (scripts/fetch-test-models.sh).
MINILM = "all-MiniLM-L6-v2"

# The server gives running requests --shutdown-timeout seconds, then closes connections within a
# final grace of 5 s (crates/ferrolm-server/src/api.rs); a little slack on top for the engine.
FINAL_GRACE_S = 5.0
EXIT_SLACK_S = 5.0


class SetupError(Exception):
    """The binary or the model is missing, or the server did not start."""


def is_ci():
    """Whether this runs under CI (then a missing model or binary is an error, never a skip)."""
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def default_binary():
    """$FERROLM_BIN, else target/release/ferrolm under the repository root."""
    return os.environ.get("FERROLM_BIN") or str(REPO_ROOT / "target" / "release" / "ferrolm")


def models_dir():
    """$FERROLM_MODEL_DIR, else ${FERROLM_CACHE_DIR:-${XDG_CACHE_HOME:-~/.cache}/ferrolm}/models."""
    if os.environ.get("FERROLM_MODEL_DIR"):
        return Path(os.environ["FERROLM_MODEL_DIR"])
    cache = os.environ.get("FERROLM_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "ferrolm"
    )
    return Path(cache) / "models"


def find_model(name=SMOLLM2):
    """The path of model file or folder `name` (or `name` itself when it is an existing path)."""
    if os.path.sep in name and os.path.exists(name):
        return str(Path(name).resolve())
    path = models_dir() / name
    if not path.exists():
        raise SetupError(
            f"model {name} not found in {models_dir()} "
            "(set FERROLM_MODEL_DIR, or run scripts/fetch-test-models.sh)"
        )
    return str(path)


def check_binary(path):
    """Raises SetupError unless `path` is an executable file."""
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise SetupError(f"ferrolm binary not found at {path} (build it with `cargo build --release` "
                         "or pass --binary / set FERROLM_BIN)")
    return path


def add_common_args(parser):
    """Adds --binary and --model to an argparse parser."""
    parser.add_argument("--binary", default=default_binary(),
                        help="ferrolm binary (default: $FERROLM_BIN or target/release/ferrolm)")
    parser.add_argument("--model", default=SMOLLM2,
                        help=f"model file name in the models folder, or a path (default: {SMOLLM2})")
    return parser


def option_value(args, name, default):
    """The value of `--name V` or `--name=V` in an argument list, else `default`."""
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return default


class Server:
    """A `ferrolm serve` process on 127.0.0.1 and a free port, as a context manager.

    `args` are extra `ferrolm serve` arguments. `url` is set once the server answers /health.
    Leaving the context sends SIGTERM and requires exit status 0 within the shutdown timeout
    (`--shutdown-timeout` of `args`, else the server's default of 30 s, plus the final grace).
    """

    def __init__(self, binary, model, args=(), ready_timeout=120.0, quiet=False):
        self.binary = check_binary(binary)
        self.model = model
        self.args = [str(a) for a in args]
        self.ready_timeout = ready_timeout
        self.quiet = quiet
        self.proc = None
        self.url = None
        self.exit_code = None
        self._stderr = None
        self._addr_line = None
        self._stdout_thread = None

    # -- start ---------------------------------------------------------------------------------
    def command(self):
        """The command line that starts the server."""
        model = ["-m", self.model] if self.model else []  # None: the args name the models
        return [self.binary, "serve", *model, "--host", "127.0.0.1", "--port", "0", *self.args]

    def start(self):
        """Starts the process and waits until /health answers 200."""
        self._stderr = tempfile.TemporaryFile(mode="w+b")
        cmd = self.command()
        if not self.quiet:
            print("starting: " + " ".join(cmd), flush=True)
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=self._stderr)
        got_line = threading.Event()

        def read_stdout():
            # Keeps reading so the pipe never fills; the first `listening on` line is the address.
            for raw in self.proc.stdout:
                line = raw.decode("utf-8", "replace").strip()
                if self._addr_line is None and line.startswith("listening on "):
                    self._addr_line = line
                    got_line.set()
            got_line.set()

        self._stdout_thread = threading.Thread(target=read_stdout, daemon=True)
        self._stdout_thread.start()
        deadline = time.monotonic() + self.ready_timeout
        while not got_line.wait(0.1):
            if time.monotonic() > deadline:
                self._fail_start(f"no `listening on` line within {self.ready_timeout:.0f} s")
        m = re.fullmatch(r"listening on (http://\S+)", self._addr_line or "")
        if not m:
            try:
                status = self.proc.wait(5)
            except subprocess.TimeoutExpired:
                status = "none: still running, stdout closed"
            self._fail_start(f"exited before listening (status {status})")
        self.url = m.group(1).rstrip("/")
        port = urllib.parse.urlsplit(self.url).port
        if not port:
            self._fail_start(f"cannot read the port from {self._addr_line!r}")
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._fail_start(f"exited with status {self.proc.returncode}")
            try:
                if request("GET", self.url + "/health", timeout=2).status == 200:
                    if not self.quiet:
                        print(f"server ready at {self.url}", flush=True)
                    return self
            except OSError:
                pass
            time.sleep(0.05)
        self._fail_start(f"/health did not answer 200 within {self.ready_timeout:.0f} s")

    def _fail_start(self, why):
        tail = self.stderr_tail()
        self.kill()
        raise SetupError(f"ferrolm serve did not start: {why}\n--- server stderr ---\n{tail}")

    def stderr_tail(self, n_bytes=4000):
        """The last bytes of the server's stderr."""
        if self._stderr is None:
            return ""
        self._stderr.flush()
        self._stderr.seek(0, os.SEEK_END)
        size = self._stderr.tell()
        self._stderr.seek(max(0, size - n_bytes))
        return self._stderr.read().decode("utf-8", "replace")

    # -- stop ----------------------------------------------------------------------------------
    def shutdown_timeout(self):
        """Seconds the server may take to exit after SIGTERM."""
        t = float(option_value(self.args, "--shutdown-timeout", "30"))
        return t + FINAL_GRACE_S + EXIT_SLACK_S

    def alive(self):
        """Whether the process is still running."""
        return self.proc is not None and self.proc.poll() is None

    def stop(self):
        """SIGTERM, then waits; returns (exit status, seconds). Kills it after the timeout."""
        if self.proc is None:
            return None, 0.0
        t0 = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(self.shutdown_timeout())
            except subprocess.TimeoutExpired:
                self.kill()
                self.exit_code = None
                return None, time.monotonic() - t0
        self.exit_code = self.proc.returncode
        return self.exit_code, time.monotonic() - t0

    def kill(self):
        """SIGKILL (for failures)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self):
        return self.start()

    def __exit__(self, exc_type, exc, tb):
        code, secs = self.stop()
        if code == 0:
            if not self.quiet:
                print(f"server stopped (SIGTERM -> exit 0 in {secs:.2f} s)", flush=True)
            return False
        what = (f"did not exit within {self.shutdown_timeout():.0f} s of SIGTERM" if code is None
                else f"exited with status {code} after SIGTERM")
        msg = f"ferrolm serve {what}\n--- server stderr ---\n{self.stderr_tail()}"
        if exc_type is None:
            raise SetupError(msg)
        print("error: " + msg, file=sys.stderr)
        return False


# -- HTTP ------------------------------------------------------------------------------------------
class Response:
    """Status, headers and body of an HTTP response."""

    def __init__(self, status, headers, body, elapsed):
        self.status = status
        self.headers = headers
        self.body = body
        self.elapsed = elapsed

    def json(self):
        """The body parsed as JSON (raises ValueError when it is not)."""
        return json.loads(self.body.decode("utf-8"))

    def text(self):
        return self.body.decode("utf-8", "replace")

    def __repr__(self):
        return f"<{self.status} {self.body[:300]!r}>"


def request(method, url, body=None, headers=None, timeout=60.0):
    """One HTTP request; returns a Response for every status (no exception on 4xx/5xx).

    `body`: bytes, str, or any other value sent as JSON (Content-Type application/json unless
    `headers` sets one). Network errors and timeouts raise OSError.
    """
    hdrs = dict(headers or {})
    data = None
    if body is not None:
        if isinstance(body, (bytes, bytearray)):
            data = bytes(body)
        elif isinstance(body, str):
            data = body.encode("utf-8")
        else:
            data = json.dumps(body).encode("utf-8")
        if not any(k.lower() == "content-type" for k in hdrs):
            hdrs["Content-Type"] = "application/json"
    req = urllib.request.Request(url, data=data, method=method, headers=hdrs)
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return Response(r.status, r.headers, r.read(), time.monotonic() - t0)
    except urllib.error.HTTPError as e:
        return Response(e.code, e.headers, e.read(), time.monotonic() - t0)


def post_json(url, obj, headers=None, timeout=120.0):
    """POSTs `obj` as JSON; returns (status, parsed body or None when not JSON)."""
    r = request("POST", url, obj, headers=headers, timeout=timeout)
    try:
        return r.status, r.json()
    except ValueError:
        return r.status, None


def get_json(url, headers=None, timeout=30.0):
    """GETs `url`; returns (status, parsed body or None when not JSON)."""
    r = request("GET", url, headers=headers, timeout=timeout)
    try:
        return r.status, r.json()
    except ValueError:
        return r.status, None


def get_text(url, headers=None, timeout=30.0):
    """GETs `url`; returns (status, body text)."""
    r = request("GET", url, headers=headers, timeout=timeout)
    return r.status, r.text()


def stream_sse(url, body, headers=None, timeout=120.0):
    """POSTs `body` (JSON) and yields (seconds since the request was sent, data) per SSE event.

    `data` is the parsed JSON of the event, or the string "[DONE]". Raises RuntimeError when
    the status is not 200 (with the body), OSError on network errors or a read timeout.
    """
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    hdrs = {"Content-Type": "application/json", "Accept": "text/event-stream", **(headers or {})}
    t0 = time.monotonic()
    try:
        conn.request("POST", parts.path or "/", body=json.dumps(body).encode("utf-8"), headers=hdrs)
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:500]!r}")
        data_lines = []
        while True:
            raw = resp.readline()
            if not raw:
                return
            line = raw.decode("utf-8").rstrip("\r\n")
            if line.startswith("data:"):
                data_lines.append(line[5:].lstrip(" ") if line[5:6] == " " else line[5:])
            elif line == "" and data_lines:
                data = "\n".join(data_lines)
                data_lines = []
                yield time.monotonic() - t0, (data if data == "[DONE]" else json.loads(data))
    finally:
        conn.close()


def metrics(url, timeout=10.0):
    """GET /metrics parsed into {name: value} (samples without labels)."""
    status, text = get_text(url + "/metrics", timeout=timeout)
    if status != 200:
        raise RuntimeError(f"/metrics answered {status}")
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.partition(" ")
            out[name] = float(value)
    return out


def is_openai_error(body):
    """Whether `body` is {"error": {"message": str, "type": str, ...}}."""
    if not isinstance(body, dict) or not isinstance(body.get("error"), dict):
        return False
    err = body["error"]
    return isinstance(err.get("message"), str) and bool(err["message"]) and isinstance(err.get("type"), str)


# -- reporting -------------------------------------------------------------------------------------
class Checks:
    """Runs named checks; prints `PASS name` or `FAIL name: why` for each."""

    def __init__(self):
        self.passed = []
        self.failed = []

    def run(self, name, fn, *args, **kwargs):
        """Calls fn(*args, **kwargs); an exception (AssertionError or other) fails the check.
        Returns fn's result, or None when it failed."""
        t0 = time.monotonic()
        try:
            result = fn(*args, **kwargs)
        except Exception as e:  # every failure is reported the same way, and the run goes on
            kind = "" if isinstance(e, AssertionError) else f"{type(e).__name__}: "
            self.fail(name, f"{kind}{e}", time.monotonic() - t0)
            return None
        detail = result if isinstance(result, str) else ""
        self.ok(name, detail, time.monotonic() - t0)
        return result

    def ok(self, name, detail="", secs=None):
        self.passed.append(name)
        timing = f" ({secs:.2f} s)" if secs is not None else ""
        print(f"PASS {name}{timing}" + (f": {detail}" if detail else ""), flush=True)

    def fail(self, name, why, secs=None):
        self.failed.append(name)
        timing = f" ({secs:.2f} s)" if secs is not None else ""
        print(f"FAIL {name}{timing}: {why}", flush=True)

    def check(self, name, cond, why=""):
        """A check from a condition."""
        if cond:
            self.ok(name)
        else:
            self.fail(name, why or "condition is false")
        return bool(cond)

    def summary(self, title):
        """Prints the totals; returns the exit status (1 when any check failed)."""
        total = len(self.passed) + len(self.failed)
        if self.failed:
            print(f"{title}: {len(self.failed)} of {total} checks FAILED: {', '.join(self.failed)}")
            return 1
        print(f"{title}: all {total} checks passed")
        return 0


def setup_or_exit(fn):
    """Runs fn() (which starts servers and returns an exit status); a SetupError prints its
    message and gives status 2 (under CI and everywhere: a missing model is never a pass)."""
    try:
        return fn()
    except SetupError as e:
        print(f"ERROR: {e}", file=sys.stderr)
        return 2
