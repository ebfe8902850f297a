#!/usr/bin/env python3
"""A local stand-in of the Hugging Face Hub, on loopback, for ferrolm's Hub tests.

Serves the Hub's URL layout from folders on disk:

  GET  /api/models/ORG/REPO[/revision/REV]   {"sha", "siblings": [{"rfilename"}], "gated"}
  HEAD|GET /ORG/REPO/resolve/REV/PATH        small files: 200 with ETag = git blob sha1;
                                             LFS files (.gguf, .safetensors, > 1 MiB): 302 to
                                             /cdn/SHA256 with X-Linked-Etag / X-Linked-Size
  GET  /cdn/SHA256                           the bytes, with Range support

The /cdn/ answers come from a second listener on 127.0.0.2 (another host, like the Hub's blob
store). Plus X-Repo-Commit on every resolve answer, X-Error-Code on errors (RepoNotFound,
EntryNotFound, RevisionNotFound, GatedRepo). A gated repository answers 401 unless the request
carries `Authorization: Bearer hf_test_token`.

Test controls (JSON): POST /_control {"drop_after": N} makes the next CDN download close the
connection after N bytes; {"corrupt": true} flips a byte in every CDN answer until
{"corrupt": false}; {"fail": K} answers the next K API/resolve/CDN requests with 503.
GET /_stats returns request counts; POST /_reset clears counts and modes.

    standin.py REPOS_DIR PORT_FILE

REPOS_DIR/ORG/REPO/ holds each repository's files; a file named `.gated` marks a gated one.
The chosen port is written to PORT_FILE.
"""
import hashlib
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOKEN = "hf_test_token"
LFS_MIN = 1 << 20

state_lock = threading.Lock()
state = {}


def reset():
    with state_lock:
        state.clear()
        state.update(drop_after=None, corrupt=False, fail=0,
                     counts={"api": 0, "head": 0, "resolve_get": 0, "cdn": 0, "cdn_ranged": 0, "cdn_auth": 0})


class Repos:
    def __init__(self, root):
        self.root = root
        self.meta_cache = {}
        self.blobs = {}

    def repo_dir(self, repo):
        d = os.path.join(self.root, repo)
        return d if os.path.isdir(d) else None

    def files(self, repo):
        d = self.repo_dir(repo)
        out = []
        for base, _, names in os.walk(d):
            for n in names:
                rel = os.path.relpath(os.path.join(base, n), d)
                if rel != ".gated":
                    out.append(rel.replace(os.sep, "/"))
        return sorted(out)

    def commit(self, repo):
        # A stable fake commit hash per repository and file list.
        h = hashlib.sha1(("\n".join([repo] + self.files(repo))).encode()).hexdigest()
        return h

    def gated(self, repo):
        return os.path.exists(os.path.join(self.repo_dir(repo), ".gated"))

    def meta(self, repo, path):
        full = os.path.realpath(os.path.join(self.repo_dir(repo), path))
        if full not in self.meta_cache:
            size = os.path.getsize(full)
            lfs = size > LFS_MIN or path.endswith((".gguf", ".safetensors"))
            if lfs:
                h = hashlib.sha256()
                with open(full, "rb") as f:
                    for chunk in iter(lambda: f.read(1 << 20), b""):
                        h.update(chunk)
                etag = h.hexdigest()
                self.blobs[etag] = full
            else:
                data = open(full, "rb").read()
                etag = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
            self.meta_cache[full] = (full, size, lfs, etag)
        return self.meta_cache[full]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    repos = None
    cdn_base = None

    def log_message(self, fmt, *args):
        if os.environ.get("STANDIN_VERBOSE"):
            sys.stderr.write("standin: " + fmt % args + "\n")

    def count(self, key):
        with state_lock:
            state["counts"][key] += 1

    def take_fail(self):
        with state_lock:
            if state["fail"] > 0:
                state["fail"] -= 1
                return True
        return False

    def reply(self, status, body=b"", headers=None, ctype="application/json"):
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def error(self, status, code, message, commit=None):
        headers = {"X-Error-Code": code, "X-Error-Message": message}
        if commit:
            headers["X-Repo-Commit"] = commit
        self.reply(status, json.dumps({"error": message}).encode(), headers)

    def authorized(self, repo):
        if not self.repos.gated(repo):
            return True
        return self.headers.get("Authorization", "") == f"Bearer {TOKEN}"

    def do_HEAD(self):
        self.route()

    def do_GET(self):
        self.route()

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if self.path == "/_reset":
            reset()
        elif self.path == "/_control":
            with state_lock:
                state.update(json.loads(body or b"{}"))
        else:
            return self.error(404, "NotFound", "no such control")
        self.reply(200, b"{}")

    def route(self):
        path = self.path.split("?", 1)[0]
        if path == "/_stats":
            with state_lock:
                return self.reply(200, json.dumps(state["counts"]).encode())
        if path.startswith("/api/models/"):
            return self.api(path[len("/api/models/"):])
        if path.startswith("/cdn/"):
            return self.cdn(path[len("/cdn/"):])
        parts = path.lstrip("/").split("/")
        if len(parts) >= 5 and parts[2] == "resolve":
            return self.resolve("/".join(parts[:2]), parts[3], "/".join(parts[4:]))
        self.error(404, "NotFound", f"no route for {path}")

    def check_repo(self, repo, rev):
        """The commit, or None after answering with an error."""
        if not self.repos.repo_dir(repo):
            self.error(404, "RepoNotFound", f"Repository {repo} not found")
            return None
        if not self.authorized(repo):
            self.error(401, "GatedRepo", f"Access to model {repo} is restricted: you must be authenticated")
            return None
        commit = self.repos.commit(repo)
        if rev not in ("main", commit):
            self.error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
            return None
        return commit

    def api(self, rest):
        self.count("api")
        if self.take_fail():
            return self.error(503, "ServiceUnavailable", "try again")
        parts = rest.split("/")
        repo, rev = "/".join(parts[:2]), "main"
        if len(parts) >= 4 and parts[2] == "revision":
            rev = "/".join(parts[3:]).replace("%2F", "/")
        commit = self.check_repo(repo, rev)
        if commit is None:
            return
        info = {
            "id": repo, "modelId": repo, "sha": commit, "private": False,
            "gated": "manual" if self.repos.gated(repo) else False,
            "siblings": [{"rfilename": f} for f in self.repos.files(repo)],
        }
        self.reply(200, json.dumps(info).encode())

    def resolve(self, repo, rev, path):
        self.count("head" if self.command == "HEAD" else "resolve_get")
        if self.take_fail():
            return self.error(503, "ServiceUnavailable", "try again")
        commit = self.check_repo(repo, rev)
        if commit is None:
            return
        if path not in self.repos.files(repo):
            return self.error(404, "EntryNotFound", f"{path} does not exist on {rev}", commit)
        full, size, lfs, etag = self.repos.meta(repo, path)
        if lfs:
            headers = {
                "Location": f"{self.cdn_base}/cdn/{etag}",
                "X-Repo-Commit": commit, "X-Linked-Etag": f'"{etag}"', "X-Linked-Size": str(size),
                "ETag": f'"{etag}"',
            }
            return self.reply(302, b"", headers, "text/plain")
        data = open(full, "rb").read()
        self.reply(200, data, {"X-Repo-Commit": commit, "ETag": f'"{etag}"'}, "application/octet-stream")

    def cdn(self, etag):
        self.count("cdn")
        if self.headers.get("Authorization"):
            self.count("cdn_auth")
        if self.take_fail():
            return self.error(503, "ServiceUnavailable", "try again")
        full = self.repos.blobs.get(etag)
        if not full:
            return self.error(404, "NotFound", "no such blob")
        size = os.path.getsize(full)
        start, status = 0, 200
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes="):
            self.count("cdn_ranged")
            start = int(rng[6:].split("-")[0])
            if start >= size:
                return self.reply(416, b"", {"Content-Range": f"bytes */{size}"})
            status = 206
        with state_lock:
            drop, state["drop_after"] = state["drop_after"], None
            corrupt = state["corrupt"]
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(size - start))
        self.send_header("ETag", f'"{etag}"')
        self.send_header("Accept-Ranges", "bytes")
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
        self.end_headers()
        if self.command == "HEAD":
            return
        sent, flip_at = 0, (size // 2) - start
        with open(full, "rb") as f:
            f.seek(start)
            while True:
                chunk = f.read(1 << 20)
                if not chunk:
                    break
                if corrupt and 0 <= flip_at - sent < len(chunk):
                    i = flip_at - sent
                    chunk = chunk[:i] + bytes([chunk[i] ^ 0xFF]) + chunk[i + 1:]
                if drop is not None and sent + len(chunk) > drop:
                    self.wfile.write(chunk[:max(0, drop - sent)])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                self.wfile.write(chunk)
                sent += len(chunk)


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # Clients closing keep-alive connections (and the drop mode) are normal here.
        if not isinstance(sys.exc_info()[1], (ConnectionError, BrokenPipeError)):
            super().handle_error(request, client_address)


def main():
    root, port_file = sys.argv[1], sys.argv[2]
    reset()
    Handler.repos = Repos(root)
    # Hash every LFS file up front so /cdn/ knows them before any resolve request.
    for org in sorted(os.listdir(root)):
        for name in sorted(os.listdir(os.path.join(root, org))):
            repo = f"{org}/{name}"
            for f in Handler.repos.files(repo):
                Handler.repos.meta(repo, f)
    # The blob store is another host, as on the real Hub (clients must not send it the token,
    # and must take the file's metadata from the redirect itself).
    cdn = Server(("127.0.0.2", 0), Handler)
    Handler.cdn_base = f"http://127.0.0.2:{cdn.server_address[1]}"
    threading.Thread(target=cdn.serve_forever, daemon=True).start()
    server = Server(("127.0.0.1", 0), Handler)
    with open(port_file + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.replace(port_file + ".tmp", port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
