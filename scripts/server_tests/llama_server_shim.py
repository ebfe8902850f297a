#!/usr/bin/env python3
"""A stand-in for `llama-server`: translates its command line to `ferrolm serve` and execs it.

llama.cpp's server test suite (tools/server/tests, run by `llama_suite.sh`) starts the program
named by $LLAMA_SERVER_BIN_PATH with llama-server's flags. Pointed at this file, each start
becomes `ferrolm serve ...` (the binary: $FERROLM_BIN, else target/release/ferrolm), exec'd in
place (os.execv), so the suite's terminate()/kill() reach the server itself.

Models: the suite's Hugging Face models are replaced by the local test models
($FERROLM_MODEL_DIR, else ~/.cache/ferrolm/models; `common.find_model`), see MODEL_MAP. Any
other --hf-repo/--hf-file/--model goes through unchanged; with HF_HUB_OFFLINE=1 (which
llama_suite.sh sets, and which --offline sets) ferrolm then fails to start at once.

Flags, in four groups (the tables below):
* SAME: ferrolm has the flag under the same name and meaning; passed on. --metrics is
  ferrolm's default: without it (llama-server's default is no /metrics) the shim passes
  --no-metrics.
* RENAMED: ferrolm has it under another name (values translated where needed). --ctx-size is
  per slot in ferrolm but shared by all slots in llama-server (each of --parallel P slots gets
  N/P, unless --kv-unified), so `-c N -np P` becomes `-c N/P`; --alias lists are split by commas
  and sorted (llama-server's id is the alphabetically first alias, ferrolm's the first given).
* DROPPED: no observable effect on ferrolm (a feature it always has, or a performance/numerics
  knob), or a feature ferrolm always enables whose "off" switch the suite passes to every server
  (--no-jinja): dropping them keeps the suite runnable; the tests that check the
  "off" behaviour then fail on their own.
* Router mode (no model given): the suite's cache models (ROUTER_MODELS) are written into a
  models preset naming the local stand-ins, served with --models-preset.
* Server tools and MCP servers (--tools, --mcp-servers-config, --mcp-servers-json,
  --ui-mcp-proxy) are in SAME; --tools-runtime too, which ferrolm refuses (it has no container
  or ssh runtime), so a test that needs one fails to start its server.
* Everything else (LoRA, multimodal, --spec-type, ...) is passed on as
  is: ferrolm rejects the unknown flag and the test fails to start the server (an honest
  failure, never a silent pass).

Each start prints the translated command (and what was dropped) on stderr, which the suite
captures into the test's output.
"""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402  (find_model, default_binary, SMOLLM2, GEMMA3)

# A cross-encoder: the project's tiny BERT reranker fixture (random weights, so it ranks
# nothing meaningfully; tests of the endpoint's shape and validation run on it).
CROSS_ENCODER = str(Path(__file__).resolve().parents[2]
                    / "crates/ferrolm/tests/fixtures/rerank/bert-cross/model.gguf")

# (hf repo without ":quant", hf file or None) -> local model file. The suite's stories models
# (260K, infill, MoE) become SmolLM2; the Jina rerank model (a BERT cross-encoder) becomes
# CROSS_ENCODER; the BERT embedding model (bge small) becomes all-MiniLM-L6-v2, another BERT with
# the same tokenizer kind; tinygemma3 becomes Gemma 3 270M. Tests that check a model's exact
# text or ranking fail for any other model.
MODEL_MAP = {
    ("ggml-org/test-model-stories260K", None): common.SMOLLM2,
    ("ggml-org/test-model-stories260K-infill", None): common.SMOLLM2,
    ("ggml-org/models", "tinyllamas/stories260K.gguf"): common.SMOLLM2,
    ("ggml-org/stories15M_MOE", "stories15M_MOE-F16.gguf"): common.SMOLLM2,
    ("ggml-org/models", "bert-bge-small/ggml-model-f16.gguf"): common.MINILM,
    ("ggml-org/models", "jina-reranker-v1-tiny-en/ggml-model-f16.gguf"): CROSS_ENCODER,
    ("ggml-org/tinygemma3-GGUF", None): common.GEMMA3,
}

# llama-server flags that take a value, and those that do not (to walk the command line).
SAME_SWITCH = {"--metrics"}
PASSED_SWITCH = {"--no-models-autoload", "--slots", "--no-slots", "--verbose", "--reranking",
                 "--no-ui", "--ui-mcp-proxy"}
SAME_VALUE = {"--port", "--host", "--temp", "--seed", "--threads", "--batch-size", "--parallel",
              "--api-key", "--cache-ram", "--n-predict", "--chat-template-file",
              "--reasoning", "--reasoning-format", "--reasoning-budget", "--reasoning-budget-message",
              "--slot-save-path",
              "--models-max", "--models-dir", "--models-preset", "--sleep-idle-seconds",
              "--tools", "--tools-runtime", "--mcp-servers-config", "--mcp-servers-json",
              "--tags",
              # ferrolm takes the template's text; a built-in name (chatml...) fails the start.
              "--chat-template"}
RENAMED_VALUE = {
    "-ctk": "--cache-type-k",
    "-ctv": "--cache-type-v",
    "--pooling": "--embeddings-pooling",  # mean/cls/last/none; "rank" is rejected by ferrolm
    "--spec-draft-n-max": "--draft-max",
    "--spec-draft-n-min": "--draft-min",
}
# Switches ferrolm has under another name (flag -> extra ferrolm args).
RENAMED_SWITCH = {
    # llama.cpp's context shift (drop the older half after --keep when the context is full) is
    # ferrolm's sliding-window eviction (keep the protected prefix and the recent window).
    "--context-shift": ["--eviction-policy", "sliding"],
}
DROPPED_SWITCH = {
    "--cont-batching",   # ferrolm always batches continuously
    "--embedding",       # ferrolm always serves /v1/embeddings (llama-server then refuses completions)
    "--kv-unified",      # every slot may use the whole --ctx-size (handled above): ferrolm's
                         # slots each get their own, so the pool never runs out for all at once
    "--swa-full",        # memory only: ferrolm keeps the full cache for sliding-window layers
    "--jinja", "--no-jinja",  # ferrolm always renders the GGUF's Jinja template
    "--no-mmproj",       # ferrolm loads no multimodal projector anyway
    "--backend_sampling",  # where sampling runs (GPU), not what it gives
}
DROPPED_VALUE = {
    "--n-gpu-layers",    # offload; ferrolm picks the backend with --backend
    "--ubatch-size",     # physical batch: performance only
    "-fa",               # flash attention: numerics/performance only
}
MODEL_VALUE = {"--hf-repo", "--hf-file", "--model", "--model-draft"}
SPECIAL_VALUE = {"--ctx-size", "--alias", "--cors-origins"}


def say(msg):
    print(f"llama_server_shim: {msg}", file=sys.stderr, flush=True)


def local_model(repo, file):
    """The local model for (hf repo, hf file), or None when the pair is not mapped."""
    if repo is None:
        return None
    base = repo.split(":", 1)[0]
    name = MODEL_MAP.get((base, file))
    return common.find_model(name) if name else None


def translate(argv):
    """(ferrolm serve arguments, notes on what was dropped or mapped, extra environment)."""
    out, notes, env = [], [], {}
    values = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        flag, eq, inline = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        takes_value = flag in (SAME_VALUE | set(RENAMED_VALUE) | DROPPED_VALUE
                               | MODEL_VALUE | SPECIAL_VALUE)
        if takes_value:
            if eq:
                value = inline
                i += 1
            elif i + 1 < len(argv):
                value = argv[i + 1]
                i += 2
            else:  # a missing value: let ferrolm complain
                out.append(arg)
                i += 1
                continue
        else:
            i += 1
        if flag in SAME_VALUE:
            out += [flag, value]
            values[flag] = value
        elif flag in SAME_SWITCH:
            values[flag] = True
        elif flag in PASSED_SWITCH:
            out.append(flag)
        elif flag in RENAMED_VALUE:
            out += [RENAMED_VALUE[flag], value]
        elif flag in RENAMED_SWITCH:
            out += RENAMED_SWITCH[flag]
            notes.append(f"{flag} -> {' '.join(RENAMED_SWITCH[flag])}")
        elif flag == "--offline":
            env["HF_HUB_OFFLINE"] = "1"
        elif flag in DROPPED_SWITCH:
            notes.append(f"dropped {flag}")
            values[flag] = True
        elif flag in DROPPED_VALUE:
            notes.append(f"dropped {flag} {value}")
        elif flag in MODEL_VALUE or flag in SPECIAL_VALUE:
            values[flag] = value
        else:
            out.append(arg)  # unknown to the shim: ferrolm decides (usually: refuses to start)

    # Models.
    repo, file, model = values.get("--hf-repo"), values.get("--hf-file"), values.get("--model")
    mapped = local_model(repo, file)
    if mapped:
        out += ["--model", mapped]
        notes.append(f"model {repo}{' ' + file if file else ''} -> {mapped}")
        if model:
            out += ["--model", model]  # both given: ferrolm refuses the repeat (honest)
    else:
        if repo:
            out += ["--hf-repo", repo]
        if file:
            out += ["--hf-file", file]
        if model:
            out += ["--model", model]
    if "--model-draft" in values:
        draft = values["--model-draft"]
        out += ["--model-draft", draft]

    # llama-server serves /metrics only with --metrics; ferrolm by default.
    if not values.get("--metrics"):
        out.append("--no-metrics")

    # Context: llama-server shares --ctx-size among its --parallel slots (unless --kv-unified);
    # ferrolm's --ctx-size is per slot.
    if "--ctx-size" in values:
        ctx = values["--ctx-size"]
        par = values.get("--parallel")
        if par and not values.get("--kv-unified") and ctx.isdigit() and par.isdigit() and int(par) > 0:
            per_slot = int(ctx) // int(par)
            out += ["--ctx-size", str(per_slot)]
            notes.append(f"--ctx-size {ctx} over {par} slots -> --ctx-size {per_slot} per slot")
        else:
            out += ["--ctx-size", ctx]

    # llama-server keeps its aliases in a sorted set and names the model by the first:
    # ferrolm's id is its first --alias, so the names go over sorted.
    if "--alias" in values:
        for name in sorted({n.strip() for n in values["--alias"].split(",") if n.strip()}):
            out += ["--alias", name]

    if "--cors-origins" in values:
        out += ["--cors-origins", values["--cors-origins"]]  # the same list, `localhost` included

    # Router mode (no model): llama-server serves the models of its Hugging Face cache under
    # their repo:quant names; ferrolm serves a preset naming the local stand-ins so.
    if not (repo or file or model or "--models-dir" in values or "--models-preset" in values):
        preset = write_router_preset()
        out += ["--models-preset", preset]
        notes.append(f"router mode -> --models-preset {preset}")
    return out, notes, env


# The cache models the suite's router tests name, and their local stand-ins: all SmolLM2, whose
# GGUF has a chat template (the local Gemma 3 file has none, and the router tests chat).
ROUTER_MODELS = {
    "ggml-org/tinygemma3-GGUF:Q8_0": common.SMOLLM2,
    "ggml-org/test-model-stories260K:F32": common.SMOLLM2,
    "ggml-org/test-model-stories260K-infill:F32": common.SMOLLM2,
}


def write_router_preset():
    """A models preset (INI) of ROUTER_MODELS; its path. The shim execs the server and cannot
    clean up after it, so the file has one fixed name per content, rewritten in place, rather
    than a fresh temporary folder per server start."""
    import hashlib
    import tempfile
    text = "".join(f"[{name}]\nmodel = {common.find_model(local)}\n\n"
                   for name, local in ROUTER_MODELS.items())
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    path = os.path.join(tempfile.gettempdir(), f"ferrolm-router-{digest}.ini")
    tmp = f"{path}.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)
    return path


# --server llama (llama_suite.sh): exec the real llama-server ($LLAMA_SERVER_REAL) with the
# suite's flags unchanged, except the suite's Hugging Face models, which become the same local
# GGUF files the ferrolm translation maps them to (so both servers see the same models).
REAL_MODEL_FLAGS = {"-hf", "-hfr", "--hf-repo", "-hff", "--hf-file", "-m", "--model"}


def real_llama_args(argv):
    """(llama-server arguments, notes): argv with mapped HF models replaced by --model FILE."""
    values, rest, i = {}, [], 0
    while i < len(argv):
        flag, eq, inline = argv[i].partition("=") if argv[i].startswith("--") else (argv[i], "", "")
        if flag in REAL_MODEL_FLAGS and (eq or i + 1 < len(argv)):
            value = inline if eq else argv[i + 1]
            key = {"-hf": "r", "-hfr": "r", "--hf-repo": "r", "-hff": "f", "--hf-file": "f"}.get(flag, "m")
            values[key] = (flag, value)
            i += 1 if eq else 2
        else:
            rest.append(argv[i])
            i += 1
    repo, file = values.get("r", (None, None))[1], values.get("f", (None, None))[1]
    mapped = local_model(repo, file)
    if mapped and Path(mapped).is_dir():
        # A Hugging Face folder: llama-server reads the GGUF llama_suite.sh converted it to.
        mapped = str(Path(os.environ.get("LLAMA_SUITE_GGUF_DIR", "")) / (Path(mapped).name + ".gguf"))
    if mapped:
        return ["--model", mapped, *rest], [f"model {repo}{' ' + file if file else ''} -> {mapped}"]
    for flag, value in values.values():
        rest += [flag, value]
    return rest, []


def main():
    real = os.environ.get("LLAMA_SERVER_REAL")
    if real:
        args, notes = real_llama_args(sys.argv[1:])
        for n in notes:
            say(n)
        say("exec " + " ".join([real, *args]))
        os.execv(real, [real, *args])
    binary = common.default_binary()
    args, notes, env = translate(sys.argv[1:])
    for n in notes:
        say(n)
    cmd = [binary, "serve", *args]
    say("exec " + " ".join(cmd))
    os.environ.update(env)
    os.execv(binary, cmd)


if __name__ == "__main__":
    main()
