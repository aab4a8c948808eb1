"""Retry-After of a full queue, against a real `ggufspec serve` process (issue 42): it must be about
the time the queue then takes to drain. It said 2-3 s for waits of 30-150 s: a mean of whole jobs'
durations that started at 1 s and knew nothing of how many tokens the waiting jobs asked for.

Two rounds on one server with --queue 1: before any request finished (the estimate has only the
running job's first tokens), and after short requests finished (their seconds per token, not their
length, must carry over to long ones). Each round: a long job runs, a long one waits, a third gets
429; the test times how long the two then take.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")

import web_serve  # noqa: E402
from web_serve import AUTH, wait_until as _wait_until  # noqa: E402

# two of them drain in 4-8 s on a 2-core EPYC (2000 tokens drained in 2.7 s on a quiet one: too fast to judge)
LONG = {"messages": [{"role": "user", "content": "Tell me a long story."}], "max_tokens": 3000, "temperature": 0}
#: Retry-After must be within this factor of the measured drain, either way.
FACTOR = 2.5



def _round(url: str) -> tuple[int, float]:
    """A long job running, one waiting, a third refused: (its Retry-After, seconds until both are done)."""
    done: list[httpx.Response] = []

    def post() -> None:
        done.append(httpx.post(f"{url}/v1/chat/completions", json=LONG, headers=AUTH, timeout=300))

    def health() -> dict:
        return httpx.get(f"{url}/health", timeout=5).json()

    first = threading.Thread(target=post)
    first.start()
    _wait_until(lambda: health()["busy"])
    second = threading.Thread(target=post)
    second.start()
    _wait_until(lambda: health()["queue_depth"] == 1)
    time.sleep(0.5)  # the running job has decoded some tokens: what an early estimate has
    r = httpx.post(f"{url}/v1/completions", json={"prompt": "Hi", "max_tokens": 4}, headers=AUTH, timeout=10)
    refused = time.monotonic()
    assert r.status_code == 429 and r.json()["error"]["code"] == "queue_full", r.text
    for t in (first, second):
        t.join(300)
    drained = time.monotonic() - refused
    assert [x.status_code for x in done] == [200, 200], [x.text for x in done]
    return int(r.headers["Retry-After"]), drained


def test_retry_after_is_about_the_time_the_queue_takes(tiny_target_q8: Path, tiny_draft_q8: Path,
                                                       tmp_path: Path) -> None:
    srv = web_serve.start(["--target", str(tiny_target_q8), "--draft", str(tiny_draft_q8), "--threads", "1",
                           "--ctx", "4096", "--queue", "1", "--api-key", web_serve.API_KEY],
                          log=tmp_path / "serve.log", timeout_s=120)
    try:
        cold = _round(srv.url)
        for _ in range(4):  # short requests finish: a fast per-request mean, the same per-token speed
            r = httpx.post(f"{srv.url}/v1/completions", json={"prompt": "Hello", "max_tokens": 16}, headers=AUTH,
                           timeout=60)
            assert r.status_code == 200
        warm = _round(srv.url)
    finally:
        web_serve.stop(srv)
    for name, (retry_after, drained) in (("before any finished", cold), ("after short ones", warm)):
        assert drained > 3, f"{name}: the queue drained in {drained:.1f} s: too fast to judge an estimate"
        assert drained / FACTOR <= retry_after <= drained * FACTOR, (
            f"{name}: Retry-After {retry_after} s, the queue took {drained:.1f} s")
