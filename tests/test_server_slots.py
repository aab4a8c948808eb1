"""`serve --parallel N` through the real HTTP app (uvicorn in this process, 127.0.0.1): concurrent
greedy requests, streaming and not, with the draft model and without, must each give exactly the
text the target alone gives in a fresh library run (`--parallel 1`), whatever the other slots do
(Q8_0 tiny models: batch-invariant logits, so merging slots' decodes into one batch changes no
row). A cancelled slot leaves the others' text intact; each slot keeps its own prefix cache; a
full server answers 429; /metrics and /health count busy slots.

A gate on `adapter.start_generation` (open unless a test shuts it) holds generations between
tokens, so nothing depends on how fast this host decodes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
uvicorn = pytest.importorskip("uvicorn")

from test_server import API_KEY, AUTH, CHATS, PROMPTS, Gate, _metric, _raw_post, _wait_until  # noqa: E402

from ggufspec.llama.compute import compute_thread  # noqa: E402
from ggufspec.models.resolve import PairRefs  # noqa: E402
from ggufspec.runtime import load_pair  # noqa: E402
from ggufspec.server import adapter, create_app, open_pair  # noqa: E402
from ggufspec.settings import ContextSettings, PairSettings  # noqa: E402

N_CTX = 1024
SLOTS = 3
C, CHAT = "/v1/completions", "/v1/chat/completions"
SETTINGS = ContextSettings(n_ctx=N_CTX, n_threads=1)


class Slotted:
    def __init__(self, url: str, gate: Gate, pair) -> None:
        self.url, self.gate, self.pair = url, gate, pair

    def merged(self) -> tuple[int, int]:
        """Merged decodes so far: the target's, the draft model's (0 without one)."""
        slot = self.pair.slots()[0]
        return slot.batcher.merged, sum(b.merged for b in slot.draft_batchers)

    def post(self, path: str, body: dict) -> httpx.Response:
        return httpx.post(f"{self.url}{path}", json=body, headers=AUTH, timeout=120)

    def text(self, path: str, body: dict) -> str:
        """The reply's text, read from the stream's deltas when the body asks for a stream."""
        if not body.get("stream"):
            r = self.post(path, body)
            assert r.status_code == 200, r.text
            choice = r.json()["choices"][0]
            return choice["message"]["content"] if path == CHAT else choice["text"]
        parts = []
        with httpx.stream("POST", f"{self.url}{path}", json=body, headers=AUTH, timeout=120) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    for ch in json.loads(line[6:])["choices"]:
                        parts.append(ch["delta"].get("content") or "" if path == CHAT else ch["text"])
        return "".join(parts)

    def metric(self, name: str) -> float:
        return _metric(self.url, name)

    def health(self) -> dict:
        return httpx.get(f"{self.url}/health", timeout=10).json()


def _serve(pair, *, queue_size: int):
    """uvicorn on a thread around `create_app(pair)`, behind a gate; yields a `Slotted`."""
    gate = Gate()
    real = adapter.start_generation

    def gated(pair, request, slot=None):
        return gate.start_generation(lambda p, r: real(p, r, slot=slot), pair, request)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(adapter, "start_generation", gated)
        app = create_app(pair=pair, model_name="slots", api_key=API_KEY, queue_size=queue_size)
        import socket

        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        _wait_until(lambda: server.started or not thread.is_alive())
        assert server.started
        try:
            yield Slotted(f"http://127.0.0.1:{sock.getsockname()[1]}", gate, pair)
        finally:
            server.should_exit = True
            thread.join(30)
            sock.close()
        assert not thread.is_alive()


@pytest.fixture(scope="module", params=["draft", "none"])
def slotted(request, tiny_target_q8: Path, tiny_draft_q8: Path):
    """The app with --parallel 3 and --queue 1, with the tiny draft model or the target alone."""
    drafts = (str(tiny_draft_q8),) if request.param == "draft" else ("none",)
    # as `ggufspec serve` runs it: every decode of every slot on the one compute thread
    with compute_thread(), open_pair(refs=PairRefs(target=str(tiny_target_q8), drafts=drafts),
                   settings=PairSettings(context=SETTINGS, offline=True, parallel=SLOTS)) as pair:
        yield from _serve(pair, queue_size=1)


@pytest.fixture(scope="module")
def alone(tiny_target_q8: Path):
    """The target alone in-process (--parallel 1), every prompt decoded cold: what greedy text must be."""
    pair = load_pair(target=tiny_target_q8, draft="none", settings=PairSettings(context=SETTINGS))

    def run(*, prompt=None, messages=None, max_tokens: int, after: list[dict] | None = None, stop=()) -> str:
        """`after`: first run those messages cold, then this request reusing their cache (what a
        --parallel 1 server does for a conversation's next turn)."""
        if after is not None:
            pair.generate(messages=after, max_tokens=max_tokens, drafters=(), cache_prompt=False).run()
        tokens = pair.encode(prompt=prompt, messages=messages)
        return pair.generate(prompt_tokens=tokens, max_tokens=max_tokens, drafters=(), stop=list(stop),
                             cache_prompt=after is not None).run().text

    yield run
    pair.close()


def _bodies(stream: bool, always_draft: bool) -> list[tuple[str, dict]]:
    extra = {"temperature": 0, "max_tokens": 40, "stream": stream, "always_draft": always_draft}
    return [(C, {"prompt": PROMPTS[0], **extra}), (CHAT, {"messages": CHATS[0], **extra}),
            (C, {"prompt": PROMPTS[2], **extra})]


def _expected(alone, path: str, body: dict) -> str:
    if path == CHAT:
        return alone(messages=body["messages"], max_tokens=body["max_tokens"])
    return alone(prompt=body["prompt"], max_tokens=body["max_tokens"])


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("always_draft", [False, True], ids=["controller", "always-draft"])
def test_concurrent_greedy_requests_give_the_target_alone(slotted: Slotted, alone, stream: bool,
                                                          always_draft: bool) -> None:
    bodies = _bodies(stream, always_draft)
    target0, draft0 = slotted.merged()
    for _ in range(2):  # the second time, every slot has a cache of some other request
        with ThreadPoolExecutor(len(bodies)) as pool:
            got = list(pool.map(lambda pb: slotted.text(*pb), bodies))
        for (path, body), text in zip(bodies, got):
            assert text == _expected(alone, path, body)
        bodies = bodies[1:] + bodies[:1]
    target1, draft1 = slotted.merged()
    assert target1 > target0  # the slots' decodes did go out together
    # /metrics shows the target batcher's counters as the batcher holds them
    b = slotted.pair.slots()[0].batcher
    exported = {k: slotted.metric(f'ggufspec_batch_{k}_total{{model="target"}}')
                for k in ("decodes", "merged_decodes", "sequences", "rows")}
    assert exported["merged_decodes"] >= target1 - target0 > 0
    assert exported["rows"] >= exported["sequences"] > exported["decodes"] >= exported["merged_decodes"]
    assert exported["decodes"] <= b.decodes and slotted.metric('ggufspec_batch_wait_seconds_total{model="target"}') > 0
    if always_draft and slotted.pair.draft_path is not None:
        assert draft1 > draft0  # ... and their drafts too


def test_stop_strings_per_slot(slotted: Slotted, alone) -> None:
    """Each concurrent request ends at its own stop string, as the target alone does."""
    full = [alone(prompt=p, max_tokens=40) for p in PROMPTS]
    stops = [text[len(text) // 2: len(text) // 2 + 3] for text in full]  # a string from each one's middle
    bodies = [(C, {"prompt": p, "max_tokens": 40, "temperature": 0, "stop": [stop], "stream": i == 1})
              for i, (p, stop) in enumerate(zip(PROMPTS, stops))]
    with ThreadPoolExecutor(len(bodies)) as pool:
        got = list(pool.map(lambda pb: slotted.text(*pb), bodies))
    for (_, body), text, whole in zip(bodies, got, full):
        assert text == alone(prompt=body["prompt"], max_tokens=40, stop=body["stop"])
        assert len(text) < len(whole)


def test_a_cancelled_slot_leaves_the_others_intact(slotted: Slotted, alone) -> None:
    cancelled0 = slotted.metric('ggufspec_generations_total{stop_reason="cancelled"}')
    bodies = _bodies(stream=True, always_draft=False)[:2]
    with slotted.gate.shut():  # every generation holds after its first token
        sock = _raw_post(slotted.url, C, {"prompt": PROMPTS[1], "max_tokens": 500, "temperature": 0,
                                          "stream": True})
        _wait_until(lambda: slotted.health()["slots_busy"] == 1)
        with ThreadPoolExecutor(2) as pool:
            futures = [pool.submit(slotted.text, *pb) for pb in bodies]
            _wait_until(lambda: slotted.health()["slots_busy"] == 3)
            sock.close()  # the first client goes away while all three slots are generating
            _wait_until(lambda: slotted.metric(
                'ggufspec_requests_total{endpoint="/v1/completions",outcome="cancelled"}') > 0)
            slotted.gate._open.set()
            got = [f.result(timeout=120) for f in futures]
    for (path, body), text in zip(bodies, got):
        assert text == _expected(alone, path, body)
    _wait_until(lambda: slotted.metric('ggufspec_generations_total{stop_reason="cancelled"}') > cancelled0)
    _wait_until(lambda: slotted.health()["slots_busy"] == 0)


def test_each_slot_keeps_its_own_prefix(slotted: Slotted, alone) -> None:
    """Two conversations at once, twice: each second turn finds its first turn in its slot's cache,
    and gives the text a --parallel 1 server gives for the same two turns. (That text may differ
    from the second turn decoded cold where the KV cache type is not batch-invariant: the tiny
    model's f16 cache, a property of prefix reuse itself, not of slots.)"""
    convs = [[*CHATS[1]], [{"role": "user", "content": "Tell me about the moon, in detail."}]]
    starts = [list(c) for c in convs]

    def turn(messages: list[dict], **extra) -> tuple[str, dict]:
        r = slotted.post(CHAT, {"messages": messages, "max_tokens": 16, "temperature": 0, **extra})
        assert r.status_code == 200, r.text
        return r.json()["choices"][0]["message"]["content"], r.json()["usage"]

    with ThreadPoolExecutor(2) as pool:
        first = list(pool.map(turn, convs))
    for conv, (text, _) in zip(convs, first):
        conv += [{"role": "assistant", "content": text}, {"role": "user", "content": "And then?"}]
    with ThreadPoolExecutor(2) as pool:
        second = list(pool.map(turn, convs))
    for (_, u1), (text, u2), conv, start in zip(first, second, convs, starts):
        cached = u2["prompt_tokens_details"]["cached_tokens"]
        assert cached > 0.8 * u1["prompt_tokens"], (cached, u1)
        assert cached < u2["prompt_tokens"]
        assert text == alone(messages=conv, max_tokens=16, after=start)
    fresh, usage = turn(convs[0], cache_prompt=False)
    assert usage["prompt_tokens_details"]["cached_tokens"] == 0
    assert fresh == alone(messages=convs[0], max_tokens=16)


def test_every_slot_and_the_queue_full_gets_429(slotted: Slotted) -> None:
    body = {"prompt": PROMPTS[0], "max_tokens": 200, "temperature": 0, "stream": True}
    socks = []
    with slotted.gate.shut():
        try:
            for _ in range(SLOTS):
                socks.append(_raw_post(slotted.url, C, body))
            _wait_until(lambda: slotted.metric("ggufspec_slots_busy") == SLOTS)
            assert slotted.health()["slots"] == SLOTS and slotted.metric("ggufspec_busy") == 1
            socks.append(_raw_post(slotted.url, C, body))  # --queue 1: it waits
            _wait_until(lambda: slotted.health()["queue_depth"] == 1)
            r = slotted.post(C, {"prompt": "Hi", "max_tokens": 2})
            assert r.status_code == 429 and r.json()["error"]["code"] == "queue_full"
            assert int(r.headers["retry-after"]) >= 1
        finally:
            for s in socks:
                s.close()
    _wait_until(lambda: slotted.health()["slots_busy"] == 0 and slotted.health()["queue_depth"] == 0)
    assert slotted.post(C, {"prompt": "Hi", "max_tokens": 2}).status_code == 200


def test_parallel_must_be_positive() -> None:
    r = subprocess.run([sys.executable, "-m", "ggufspec.cli", "serve", "--parallel", "0"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.strip() == "error: --parallel must be >= 1, got 0"
