"""`ggufspec serve` as a subprocess for the chat page's tests: start it on a free port, wait for
/health (bounded), stop it (SIGTERM, then kill)."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

API_KEY = "sk-web-test"
AUTH = {"Authorization": f"Bearer {API_KEY}"}


@dataclass(frozen=True, kw_only=True)
class Served:
    proc: subprocess.Popen
    url: str
    log: Path


def start(args: list[str], *, log: Path, timeout_s: float = 300) -> Served:
    """`ggufspec serve ARGS --port 0` on 127.0.0.1; fails the test if it does not come up."""
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "ggufspec.cli", "serve", *args, "--host", "127.0.0.1",
                                 "--port", "0", "--log-level", "warning"], stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + timeout_s
    url = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the server exited with {proc.returncode}:\n{log.read_text()}")
        if url is None:
            m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", log.read_text())
            url = m.group(1) if m else None
        if url is not None:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    return Served(proc=proc, url=url, log=log)
            except httpx.TransportError:
                pass
        time.sleep(0.1)
    proc.kill()
    pytest.fail(f"the server did not come up in {timeout_s:.0f} s:\n{log.read_text()}")


def stop(server: Served) -> None:
    server.proc.terminate()
    try:
        server.proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        server.proc.wait()


def wait_until(predicate, timeout: float = 60.0, *, poll_s: float = 0.02) -> None:
    """Poll until `predicate()`; the timeout only keeps a broken server from hanging the suite."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail("timed out waiting")
        time.sleep(poll_s)
