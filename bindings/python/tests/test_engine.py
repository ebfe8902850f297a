"""`Engine`: 8 concurrent asyncio tasks get the same greedy text as each alone; cancelling a
task frees its slot; blocking iteration from threads."""

import asyncio
import threading
import time

import pytest

import ferrolm

PROMPTS = [
    "The capital of France is",
    "List three colours:",
    "Once upon a time",
    "The best way to learn Python is",
    "Water boils at",
    "My favourite animal is the",
    "In 1969, humans",
    "A haiku about autumn:",
]


@pytest.fixture(scope="module")
def engine(smollm2_model):
    return ferrolm.Engine(smollm2_model, n_slots=8, n_ctx=512)


def test_eight_concurrent_tasks_match_each_alone(engine):
    alone = [engine.generate(p, max_tokens=24, temperature=0.0) for p in PROMPTS]

    async def all_at_once():
        return await asyncio.gather(*(engine.agenerate(p, max_tokens=24, temperature=0.0) for p in PROMPTS))

    together = asyncio.run(all_at_once())
    assert together == alone
    assert all(t.strip() for t in alone)


def test_async_for_streams_tokens(engine):
    async def stream():
        req = engine.submit(PROMPTS[0], max_tokens=12, temperature=0.0)
        pieces = [tok.text async for tok in req]
        return pieces, req.finish

    pieces, finish = asyncio.run(stream())
    assert "".join(pieces) == engine.generate(PROMPTS[0], max_tokens=12, temperature=0.0)
    assert finish.completion_tokens == 12 and finish.finish_reason == "length"


def test_cancelling_a_task_frees_its_slot(smollm2_model):
    engine = ferrolm.Engine(smollm2_model, n_slots=1, n_ctx=2048)

    async def scenario():
        started = asyncio.Event()
        seen = [0]

        async def endless():
            async for _tok in engine.submit(PROMPTS[2], max_tokens=1500, temperature=0.0, ignore_eos=True):
                seen[0] += 1
                if seen[0] == 4:
                    started.set()

        task = asyncio.create_task(endless())
        await asyncio.wait_for(started.wait(), 60)
        assert engine.metrics()["slots_busy"] == 1 and engine.in_flight() == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # The single slot is free again: a new request runs to its end.
        return await asyncio.wait_for(engine.agenerate(PROMPTS[0], max_tokens=8, temperature=0.0), 60)

    text = asyncio.run(scenario())
    assert text.strip()
    assert engine.wait_idle(10)
    m = engine.metrics()
    assert m["requests_cancelled"] == 1 and m["slots_busy"] == 0
    # The cancelled request stopped early: far fewer than its 1500 tokens were generated.
    assert m["generated_tokens_total"] < 500


def test_threads_submit_concurrently(engine):
    alone = {p: engine.generate(p, max_tokens=16, temperature=0.0) for p in PROMPTS[:4]}
    got = {}

    def worker(p):
        got[p] = "".join(t.text for t in engine.submit(p, max_tokens=16, temperature=0.0))

    threads = [threading.Thread(target=worker, args=(p,)) for p in PROMPTS[:4]]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert got == alone


def test_constraint_and_errors(engine):
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    text = engine.generate("A JSON object with a number:", max_tokens=40, temperature=0.0, json_schema=schema)
    import json

    assert isinstance(json.loads(text)["n"], int)
    with pytest.raises(ValueError):
        engine.submit("x", max_tokens=4, json_schema={"type": "nonsense-type"})
    with pytest.raises(ValueError):
        engine.submit([10**9], max_tokens=4)
    with pytest.raises(ferrolm.Error):
        engine.submit("", max_tokens=4)


def test_timeout_ends_a_request(engine):
    req = engine.submit(PROMPTS[2], max_tokens=4000, ignore_eos=True, temperature=0.0, timeout=0.3)
    t0 = time.time()
    list(req)
    assert time.time() - t0 < 30
    assert req.finish.reason == "timeout"
