"""One limit, one message, in every command that takes the setting (issue 42): a value past what
the machine can run, or past what another entry point accepts, is one `error:` line and exit 2,
before anything loads."""

from __future__ import annotations

import subprocess
import sys

import psutil
import pytest

DRAFT_MAX_LIMIT = 64  # the server's and the console's cap, now everyone's
MAX_SEED = 2**63 - 1  # the server's, now everyone's


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ggufspec.cli", *args], input="", capture_output=True,
                          text=True, timeout=120)


def _one_error(proc: subprocess.CompletedProcess, *fragments: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


COMMANDS = {
    "run": ["run", "-p", "hi", "-n", "4"],
    "serve": ["serve", "--port", "0"],
    "chat": ["chat"],
    "bench": ["bench", "--quick"],
    "rpc-server": ["rpc-server", "--port", "50999"],
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_threads_are_bounded_by_the_cpus(command: str) -> None:
    """--threads 100000 segfaulted llama.cpp (32768: libgomp could not create the threads)."""
    _one_error(_cli(*COMMANDS[command], "--threads", "100000"),
               f"--threads must be between 1 and {len(psutil.Process().cpu_affinity())}", "got 100000")


@pytest.mark.parametrize("command", ["run", "chat", "bench"])
def test_draft_max_has_one_limit(command: str) -> None:
    """The CLI took --draft-max 100000 where the console and the server cap K at 64."""
    _one_error(_cli(*COMMANDS[command], "--draft-max", "100000"), f"[1, {DRAFT_MAX_LIMIT}]", "got 100000")


@pytest.mark.parametrize("command", ["run", "chat"])
def test_seed_has_one_limit(command: str) -> None:
    """A request's seed must be < 2^63; the CLI took any."""
    _one_error(_cli(*COMMANDS[command], "--temp", "0.8", "--seed", str(MAX_SEED + 1)),
               f"seed must be in [0, {MAX_SEED}]", f"got {MAX_SEED + 1}")
