#!/usr/bin/env python3
"""Many models in one server: `ferrolm serve --models-dir DIR` over SmolLM2 and Gemma 3.

The folder holds links to the two test models (as smollm2.gguf and gemma3.gguf).
  table      GET /v1/models lists both, unloaded, before any request.
  lru        --models-max 1: a request to each model in turn; each is loaded on first use and
             the other is unloaded (status in /v1/models, loads and unloads in /metrics); the
             greedy answer through the multi-model server equals the single-model server's.
  errors     an unknown model is 404 model_not_found, a request without `model` is 400.
  parallel   --models-max 2: streamed requests to both models at once all succeed, and each
             model is loaded once however many requests asked for it at the same time.
Exits 1 when a check fails, 2 when a server cannot start.
"""

import argparse
import os
import sys
import tempfile
import threading

import common

PROMPT = {"prompt": "The capital of France is", "max_tokens": 12, "temperature": 0}


def complete(url, model, stream=False):
    body = {**PROMPT, "model": model}
    if not stream:
        st, out = common.post_json(url + "/v1/completions", body)
        assert st == 200, f"{model}: {st} {out}"
        assert out["model"] == model, out
        return out["choices"][0]["text"]
    text = ""
    for _, data in common.stream_sse(url + "/v1/completions", {**body, "stream": True}):
        if data != "[DONE]":
            text += data["choices"][0]["text"]
    return text


def statuses(url):
    st, body = common.get_json(url + "/v1/models")
    assert st == 200, body
    return {m["id"]: m["status"]["value"] for m in body["data"]}


def table(url):
    got = statuses(url)
    assert got == {"gemma3": "unloaded", "smollm2": "unloaded"}, got
    return str(got)


def lru(url, alone):
    answers = {}
    for model, other in (("smollm2", "gemma3"), ("gemma3", "smollm2"), ("smollm2", "gemma3")):
        answers[model] = complete(url, model)
        got = statuses(url)
        assert got[model] == "loaded" and got[other] == "unloaded", f"after {model}: {got}"
    m = common.metrics(url)
    loads, unloads = m["ferrolm_model_loads_total"], m["ferrolm_model_unloads_total"]
    assert (loads, unloads) == (3, 2), f"loads {loads}, unloads {unloads}"
    for model, text in alone.items():
        assert answers[model] == text, f"{model}: {answers[model]!r} here, {text!r} alone"
    return f"3 loads, 2 unloads; answers equal the single-model servers' ({answers})"


def errors(url):
    st, body = common.post_json(url + "/v1/completions", {**PROMPT, "model": "nope"})
    assert st == 404 and body["error"]["code"] == "model_not_found", (st, body)
    st, body = common.post_json(url + "/v1/completions", PROMPT)
    assert st == 400 and "gemma3, smollm2" in body["error"]["message"], (st, body)
    return "404 and 400"


def parallel(url):
    results = {}

    def run(i, model):
        try:
            results[i] = (model, complete(url, model, stream=True))
        except Exception as e:  # reported below
            results[i] = (model, e)

    threads = [threading.Thread(target=run, args=(i, ("smollm2", "gemma3")[i % 2])) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    failed = [(m, r) for m, r in results.values() if isinstance(r, Exception) or not r]
    assert not failed, f"failed: {failed}"
    got = statuses(url)
    assert got == {"gemma3": "loaded", "smollm2": "loaded"}, got
    loads = common.metrics(url)["ferrolm_model_loads_total"]
    assert loads == 2, f"{loads} loads for 2 models"
    return "6 streamed requests over 2 models, 2 loads"


def run(args):
    checks = common.Checks()
    models = {"smollm2": common.find_model(common.SMOLLM2), "gemma3": common.find_model(common.GEMMA3)}
    alone = {}
    for name, path in models.items():
        with common.Server(args.binary, path, ["-c", "1024", "--parallel", "2", "--alias", name]) as s:
            alone[name] = complete(s.url, name)
    with tempfile.TemporaryDirectory() as d:
        for name, path in models.items():
            os.symlink(path, os.path.join(d, name + ".gguf"))
        base = ["--models-dir", d, "-c", "1024", "--parallel", "2"]
        with common.Server(args.binary, None, [*base, "--models-max", "1"]) as s:
            checks.run("table", table, s.url)
            checks.run("lru", lru, s.url, alone)
            checks.run("errors", errors, s.url)
        with common.Server(args.binary, None, [*base, "--models-max", "2"]) as s:
            checks.run("parallel", parallel, s.url)
    return checks.summary("models-dir")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--binary", default=common.default_binary())
    args = p.parse_args()
    return common.setup_or_exit(lambda: run(args))


if __name__ == "__main__":
    sys.exit(main())
