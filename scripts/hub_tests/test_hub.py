#!/usr/bin/env python3
"""End-to-end tests of ferrolm's Hugging Face Hub support against a local stand-in of the Hub
(standin.py), on loopback: names and quant tags, hf:// paths, split GGUF, safetensors folders,
resume after a dropped connection, corruption, retries, gated repositories and tokens, 404s,
offline mode, the cache shared with huggingface_hub (checked with huggingface_hub itself),
`serve --hf-repo`, `list`/`rm`, and the pip catalog.

    test_hub.py FERROLM_BIN MODELS_DIR

MODELS_DIR is ferrolm's model cache (the SmolLM2 and Gemma 3 GGUF files and the
SmolLM2-135M-Instruct-hf folder that scripts/fetch-test-models.sh makes). Needs the
huggingface_hub package in this Python.
"""
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.path.abspath(sys.argv[1])
MODELS = os.path.abspath(sys.argv[2])
SMOL = os.path.join(MODELS, "SmolLM2-135M-Instruct.Q4_1.gguf")
GEMMA = os.path.join(MODELS, "gemma-3-270m-q4_k_m.gguf")
HF_DIR = os.path.join(MODELS, "SmolLM2-135M-Instruct-hf")
SMOL_FILE = "smollm2-135m-instruct-Q4_1.gguf"
PROMPT = "The capital of France is"

WORK = tempfile.mkdtemp(prefix="ferrolm-hub-tests-")
REPOS = os.path.join(WORK, "repos")
HF_HOME = os.path.join(WORK, "hf-home")
CACHE = os.path.join(HF_HOME, "hub")
ENDPOINT = None


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def env(**extra):
    e = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    e.update(HF_HOME=HF_HOME, HF_HUB_CACHE=CACHE, HF_ENDPOINT=ENDPOINT, NO_PROXY="127.0.0.1,127.0.0.2,localhost")
    e.update({k: v for k, v in extra.items() if v is not None})
    return e


def ferrolm(*args, ok=True, **extra):
    p = subprocess.run([BIN, *args], env=env(**extra), capture_output=True, text=True, timeout=600)
    if ok and p.returncode != 0:
        raise AssertionError(f"ferrolm {' '.join(args)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    if not ok and p.returncode == 0:
        raise AssertionError(f"ferrolm {' '.join(args)} should have failed:\n{p.stdout[-2000:]}")
    return p


def greedy(model_args, **extra):
    p = ferrolm("generate", *model_args, "-p", PROMPT, "-n", "16", "--temp", "0", **extra)
    return p.stdout


def control(path, body=None):
    data = json.dumps(body or {}).encode() if body is not None or path != "/_stats" else None
    req = urllib.request.Request(ENDPOINT + path, data=data, method="POST" if data is not None else "GET")
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read() or b"{}")


def stats():
    return control("/_stats")


def repo_dir(repo):
    return os.path.join(CACHE, "models--" + repo.replace("/", "--"))


def rm(repo):
    shutil.rmtree(repo_dir(repo), ignore_errors=True)


def make_repos():
    def link(repo, name, target):
        d = os.path.join(REPOS, repo, os.path.dirname(name))
        os.makedirs(d, exist_ok=True)
        os.symlink(target, os.path.join(REPOS, repo, name))

    def text(repo, name, body):
        os.makedirs(os.path.join(REPOS, repo), exist_ok=True)
        with open(os.path.join(REPOS, repo, name), "w") as f:
            f.write(body)

    for repo in ["test-org/SmolLM2-GGUF", "test-org/Gated-GGUF"]:
        link(repo, SMOL_FILE, SMOL)
        text(repo, "README.md", f"# {repo}\n")
    text("test-org/Gated-GGUF", ".gated", "")
    link("test-org/Mixed-GGUF", SMOL_FILE, SMOL)
    link("test-org/Mixed-GGUF", "gemma-3-270m-it-Q4_K_M.gguf", GEMMA)
    link("test-org/Mixed-GGUF", "mmproj-gemma-3-270m-f16.gguf", SMOL)
    split_dir = os.path.join(REPOS, "test-org/SmolLM2-split")
    subprocess.run([sys.executable, os.path.join(HERE, "gguf_split.py"), SMOL, split_dir, "smollm2-135m-instruct-Q4_1", "3"],
                   check=True)
    for name in os.listdir(HF_DIR):
        if name.endswith((".json", ".safetensors", ".model", ".jinja")) and name != "ferrolm_expected.json":
            link("test-org/SmolLM2-hf", name, os.path.join(HF_DIR, name))
    text("test-org/SmolLM2-hf", "README.md", "# safetensors\n")
    link("test-org/SmolLM2-hf", "onnx/model.onnx", SMOL)


# --------------------------------------------------------------------------------------------

def test_pull_by_tag_into_the_hub_cache_layout():
    p = ferrolm("pull", "test-org/Mixed-GGUF:q4_1")
    path = p.stdout.strip().splitlines()[-1]
    assert os.path.basename(path) == SMOL_FILE, path
    assert path.startswith(os.path.join(repo_dir("test-org/Mixed-GGUF"), "snapshots")), path
    assert os.path.islink(path) and not os.path.isabs(os.readlink(path)), os.readlink(path)
    assert sha256(path) == sha256(SMOL)
    blob = os.path.realpath(path)
    assert os.path.basename(blob) == sha256(SMOL) and "/blobs/" in blob, blob
    commit = open(os.path.join(repo_dir("test-org/Mixed-GGUF"), "refs", "main")).read()
    assert len(commit) == 40 and f"/snapshots/{commit}/" in path
    assert not os.path.exists(os.path.join(os.path.dirname(path), "gemma-3-270m-it-Q4_K_M.gguf"))


def test_auto_picks_q4_k_m_and_skips_mmproj():
    path = ferrolm("pull", "hf.co/test-org/Mixed-GGUF").stdout.strip().splitlines()[-1]
    assert os.path.basename(path) == "gemma-3-270m-it-Q4_K_M.gguf", path
    assert sha256(path) == sha256(GEMMA)
    snap = os.path.dirname(path)
    assert not any("mmproj" in f for f in os.listdir(snap)), os.listdir(snap)


def test_huggingface_hub_finds_our_files_without_downloading():
    code = (
        "import json, sys, huggingface_hub as h\n"
        f"p = h.hf_hub_download('test-org/Mixed-GGUF', '{SMOL_FILE}', local_files_only=True)\n"
        "info = h.scan_cache_dir()\n"
        "print(json.dumps({'path': p, 'repos': sorted(r.repo_id for r in info.repos),"
        " 'warnings': [str(w) for w in info.warnings]}))\n"
    )
    before = stats()
    p = subprocess.run([sys.executable, "-c", code], env=env(HF_HUB_OFFLINE="1"), capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    ours = ferrolm("pull", "test-org/Mixed-GGUF:Q4_1").stdout.strip().splitlines()[-1]
    assert out["path"] == ours, (out["path"], ours)
    assert "test-org/Mixed-GGUF" in out["repos"] and not out["warnings"], out
    assert stats()["cdn"] == before["cdn"], "nothing should have been downloaded"


def test_we_reuse_what_huggingface_hub_downloaded():
    rm("test-org/SmolLM2-GGUF")
    code = f"import huggingface_hub as h; print(h.hf_hub_download('test-org/SmolLM2-GGUF', '{SMOL_FILE}'))"
    p = subprocess.run([sys.executable, "-c", code], env=env(), capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-3000:]
    theirs = p.stdout.strip().splitlines()[-1]
    before = stats()
    ours = ferrolm("pull", "test-org/SmolLM2-GGUF:Q4_1").stdout.strip().splitlines()[-1]
    assert ours == theirs, (ours, theirs)
    assert stats()["cdn"] == before["cdn"], "the blob huggingface_hub downloaded should be reused"


def test_hf_path_and_second_pull_is_cached():
    rm("test-org/SmolLM2-GGUF")
    path = ferrolm("pull", f"hf://test-org/SmolLM2-GGUF/{SMOL_FILE}").stdout.strip().splitlines()[-1]
    assert sha256(path) == sha256(SMOL)
    before = stats()
    again = ferrolm("pull", f"hf://test-org/SmolLM2-GGUF/{SMOL_FILE}").stdout.strip().splitlines()[-1]
    assert again == path
    after = stats()
    assert after["cdn"] == before["cdn"] and after["head"] == before["head"], (before, after)


def test_generate_from_hub_names_equals_the_local_file():
    want = greedy(["-m", SMOL])
    assert want.strip(), "empty reference output"
    assert greedy(["-m", "test-org/SmolLM2-GGUF:Q4_1"]) == want
    assert greedy(["--hf-repo", "test-org/SmolLM2-GGUF", "--hf-file", SMOL_FILE]) == want


def test_split_gguf_is_fetched_and_loaded_as_one_model():
    want = greedy(["-m", SMOL])
    assert greedy(["-m", "test-org/SmolLM2-split:Q4_1"]) == want
    snaps = os.path.join(repo_dir("test-org/SmolLM2-split"), "snapshots")
    (commit,) = os.listdir(snaps)
    shards = sorted(os.listdir(os.path.join(snaps, commit)))
    assert shards == [f"smollm2-135m-instruct-Q4_1-0000{i}-of-00003.gguf" for i in (1, 2, 3)], shards


def test_safetensors_folder():
    path = ferrolm("pull", "test-org/SmolLM2-hf").stdout.strip().splitlines()[-1]
    assert os.path.isdir(path) and os.path.isfile(os.path.join(path, "config.json")), path
    files = sorted(os.listdir(path))
    assert "README.md" not in files and "onnx" not in files, files
    assert any(f.endswith(".safetensors") for f in files), files
    assert greedy(["-m", "test-org/SmolLM2-hf"]) == greedy(["-m", HF_DIR])


def test_resume_after_a_dropped_connection_is_byte_identical():
    rm("test-org/SmolLM2-GGUF")
    control("/_control", {"drop_after": os.path.getsize(SMOL) * 2 // 5})
    before = stats()
    p = ferrolm("pull", "test-org/SmolLM2-GGUF:Q4_1")
    path = p.stdout.strip().splitlines()[-1]
    assert sha256(path) == sha256(SMOL)
    after = stats()
    assert after["cdn_ranged"] > before["cdn_ranged"], "the second request should resume with Range"
    assert "retrying" in p.stderr, p.stderr[-2000:]
    assert not [f for f in os.listdir(os.path.join(repo_dir("test-org/SmolLM2-GGUF"), "blobs")) if f.endswith(".incomplete")]


def test_a_corrupted_download_is_detected_and_not_kept():
    rm("test-org/SmolLM2-GGUF")
    control("/_control", {"corrupt": True})
    try:
        p = ferrolm("pull", "test-org/SmolLM2-GGUF:Q4_1", ok=False)
    finally:
        control("/_control", {"corrupt": False})
    assert "checksum mismatch" in p.stderr, p.stderr[-2000:]
    blobs = os.path.join(repo_dir("test-org/SmolLM2-GGUF"), "blobs")
    assert not [f for f in os.listdir(blobs) if f.endswith(".gguf") or len(f) == 64 or f.endswith(".incomplete")], os.listdir(blobs)
    snaps = os.path.join(repo_dir("test-org/SmolLM2-GGUF"), "snapshots")
    assert not os.path.exists(snaps) or not any(f.endswith(".gguf") for _, _, fs in os.walk(snaps) for f in fs)


def test_server_errors_are_retried():
    rm("test-org/SmolLM2-GGUF")
    control("/_control", {"fail": 3})
    p = ferrolm("pull", "test-org/SmolLM2-GGUF:Q4_1")
    assert sha256(p.stdout.strip().splitlines()[-1]) == sha256(SMOL)
    assert "503" in p.stderr, p.stderr[-2000:]


def test_gated_repo_needs_a_token():
    rm("test-org/Gated-GGUF")
    p = ferrolm("pull", "test-org/Gated-GGUF", ok=False)
    assert "gated" in p.stderr and "HF_TOKEN" in p.stderr and "licence" in p.stderr, p.stderr[-2000:]
    p = ferrolm("pull", "test-org/Gated-GGUF", ok=False, HF_TOKEN="hf_wrong")
    assert "no access" in p.stderr, p.stderr[-2000:]
    before = stats()
    path = ferrolm("pull", "test-org/Gated-GGUF", HF_TOKEN="hf_test_token").stdout.strip().splitlines()[-1]
    assert sha256(path) == sha256(SMOL)
    after = stats()
    assert after["cdn"] > before["cdn"] and after["cdn_auth"] == before["cdn_auth"], "the token must not leave the Hub"
    rm("test-org/Gated-GGUF")
    os.makedirs(HF_HOME, exist_ok=True)
    with open(os.path.join(HF_HOME, "token"), "w") as f:
        f.write("hf_test_token\n")
    try:
        ferrolm("pull", "test-org/Gated-GGUF")
    finally:
        os.remove(os.path.join(HF_HOME, "token"))


def test_not_found_names_the_repo_and_file():
    p = ferrolm("pull", "test-org/Nope", ok=False)
    assert "test-org/Nope" in p.stderr and "no such repository" in p.stderr, p.stderr[-2000:]
    p = ferrolm("pull", "test-org/SmolLM2-GGUF", "--file", "missing.gguf", ok=False)
    assert "missing.gguf" in p.stderr and "test-org/SmolLM2-GGUF" in p.stderr, p.stderr[-2000:]
    p = ferrolm("pull", "test-org/SmolLM2-GGUF:Q2_K", ok=False)
    assert "Q2_K" in p.stderr and "Q4_1" in p.stderr, p.stderr[-2000:]


def test_offline_mode_uses_only_the_cache():
    ferrolm("pull", "test-org/SmolLM2-GGUF:Q4_1")
    before = stats()
    path = ferrolm("pull", "test-org/SmolLM2-GGUF:Q4_1", HF_HUB_OFFLINE="1").stdout.strip().splitlines()[-1]
    assert sha256(path) == sha256(SMOL)
    assert greedy(["-m", "test-org/SmolLM2-GGUF:Q4_1"], HF_HUB_OFFLINE="1") == greedy(["-m", SMOL])
    assert stats() == before, "offline mode must not touch the network"
    rm("test-org/Gated-GGUF")
    p = ferrolm("pull", "test-org/Gated-GGUF", ok=False, HF_HUB_OFFLINE="1")
    assert "offline" in p.stderr, p.stderr[-2000:]


def test_serve_hf_repo():
    ferrolm("pull", "test-org/SmolLM2-GGUF:Q4_1")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([BIN, "serve", "--hf-repo", "test-org/SmolLM2-GGUF:Q4_1", "--port", str(port), "-c", "512"],
                            env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                with urllib.request.urlopen(base + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                if proc.poll() is not None:
                    raise AssertionError("server exited: " + proc.stderr.read()[-2000:])
                time.sleep(0.2)
        with urllib.request.urlopen(base + "/v1/models", timeout=10) as r:
            ids = [m["id"] for m in json.loads(r.read())["data"]]
        assert "test-org/SmolLM2-GGUF:Q4_1" in ids, ids
        body = json.dumps({"model": ids[0], "prompt": PROMPT, "max_tokens": 8, "temperature": 0}).encode()
        req = urllib.request.Request(base + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            text = json.loads(r.read())["choices"][0]["text"]
        assert text.strip() and greedy(["-m", SMOL]).startswith(PROMPT + text), text
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_list_and_rm():
    ferrolm("pull", "test-org/SmolLM2-GGUF:Q4_1")
    out = ferrolm("list").stdout
    assert "test-org/SmolLM2-GGUF" in out and "main" in out, out
    p = ferrolm("rm", "test-org/SmolLM2-GGUF")
    assert "removed" in p.stdout, p.stdout
    assert not os.path.exists(repo_dir("test-org/SmolLM2-GGUF"))
    assert "test-org/SmolLM2-GGUF" not in ferrolm("list").stdout
    p = ferrolm("rm", "test-org/SmolLM2-GGUF", ok=False)
    assert "not in the Hub cache" in p.stderr, p.stderr


def test_the_pip_catalog_keeps_working():
    p = ferrolm("pull", "smollm2")
    assert os.path.realpath(p.stdout.strip().splitlines()[-1]) == os.path.realpath(SMOL), p.stdout


def main():
    global ENDPOINT
    make_repos()
    port_file = os.path.join(WORK, "port")
    server = subprocess.Popen([sys.executable, os.path.join(HERE, "standin.py"), REPOS, port_file])
    try:
        for _ in range(600):
            if os.path.exists(port_file):
                break
            if server.poll() is not None:
                sys.exit("the Hub stand-in did not start")
            time.sleep(0.1)
        ENDPOINT = f"http://127.0.0.1:{open(port_file).read().strip()}"
        tests = [(n, f) for n, f in globals().items() if n.startswith("test_") and callable(f)]
        failed = []
        for name, fn in tests:
            t0 = time.time()
            try:
                fn()
                print(f"PASS {name} ({time.time() - t0:.1f}s)", flush=True)
            except Exception:
                failed.append(name)
                print(f"FAIL {name}\n{traceback.format_exc()}", flush=True)
        print(f"\n{len(tests) - len(failed)} passed, {len(failed)} failed")
        sys.exit(1 if failed else 0)
    finally:
        server.terminate()
        server.wait(timeout=10)
        shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    main()
