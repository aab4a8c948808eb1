"""SIGTERM while a real `ggufspec serve` process generates (issue 42): the open stream ends with an
OpenAI-shaped error event and ``data: [DONE]``, a non-streaming request in flight (waiting in the
queue, or generating in another slot) gets 503, nothing
is logged as a traceback, and the process exits within a few seconds.

The tiny Q8_0 pair streams a few hundred tokens a second here, so a stream of 8000 tokens is
still running seconds after it starts: the signal lands mid-stream (the error event proves it).
"""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")

import web_serve  # noqa: E402
from web_serve import AUTH, wait_until as _wait_until  # noqa: E402

#: SIGTERM to exit: the worker stops after its current step, the stream's last events go out,
#: then the pair is freed. uvicorn's graceful timeout (5 s) must not be what ends it.
EXIT_WITHIN_S = 4.0



@pytest.mark.parametrize("parallel", [1, 2])
def test_sigterm_ends_open_streams_with_an_error_and_done(tiny_target_q8: Path, tiny_draft_q8: Path,
                                                         tmp_path: Path, parallel: int) -> None:
    srv = web_serve.start(["--target", str(tiny_target_q8), "--draft", str(tiny_draft_q8), "--threads", "1",
                           "--ctx", "8192", "--queue", "2", "--parallel", str(parallel),
                           "--api-key", web_serve.API_KEY],
                          log=tmp_path / "serve.log", timeout_s=120)
    waiting: dict[str, httpx.Response] = {}

    def queued() -> None:  # --parallel 1: waits behind the stream; 2: generates beside it
        waiting["r"] = httpx.post(f"{srv.url}/v1/completions", headers=AUTH, timeout=60,
                                  json={"prompt": "Hello", "max_tokens": 8000})

    def in_flight() -> bool:
        health = httpx.get(f"{srv.url}/health", timeout=5).json()
        return health["queue_depth"] == 1 if parallel == 1 else health["slots_busy"] == 2

    lines: list[str] = []
    try:
        body = {"messages": [{"role": "user", "content": "Tell me a long story."}], "max_tokens": 8000,
                "temperature": 0, "stream": True}
        with httpx.stream("POST", f"{srv.url}/v1/chat/completions", json=body, headers=AUTH, timeout=60) as r:
            assert r.status_code == 200
            it = r.iter_lines()
            lines += [next(it) for _ in range(4)]  # the stream is running
            other = threading.Thread(target=queued)
            other.start()
            _wait_until(in_flight)
            sent = time.monotonic()
            srv.proc.send_signal(signal.SIGTERM)
            lines += list(it)  # a truncated stream raises here (RemoteProtocolError)
        rc = srv.proc.wait(timeout=30)
        elapsed = time.monotonic() - sent
        other.join(timeout=30)
    finally:
        if srv.proc.poll() is None:
            srv.proc.kill()
            srv.proc.wait()
    log = srv.log.read_text()
    data = [line.removeprefix("data: ") for line in lines if line.startswith("data: ")]
    assert data[-1] == "[DONE]", data[-3:]
    error = json.loads(data[-2])["error"]
    assert error["code"] == "server_shutting_down" and error["type"] == "server_error", error
    assert "shutting down" in error["message"]
    assert waiting["r"].status_code == 503, waiting["r"].text
    assert waiting["r"].json()["error"]["code"] == "server_shutting_down"
    assert "Traceback" not in log and "CancelledError" not in log, log[-3000:]
    # uvicorn re-raises the signal it caught once it has shut down: death by SIGTERM, as promised
    assert rc in (0, -signal.SIGTERM), log[-3000:]
    assert elapsed < EXIT_WITHIN_S, f"exited {elapsed:.1f} s after SIGTERM"
