"""A worker that stops answering without closing its connection, found within seconds.

A frozen worker (`kill -STOP`, a hung process) keeps its TCP connection: its kernel acknowledges
what llama.cpp sends and answers keepalive probes, so the RPC client's `recv` waits forever and
`llama_decode` never returns (a dead worker, by contrast, resets the connection and ggml aborts at
once: ggufspec.llama.devices). This watchdog thread looks once a second at the decodes in flight
(`lib.decode`, logits reads and KV cache reads/writes register with `watching`): when one has run for `STALL_TIMEOUT_S` and no
worker's connection has delivered a byte for as long (the kernel's TCP_INFO `last_data_recv`), it
names the silent worker and shuts the connections down. The pending `recv` then fails, ggml aborts
through ggufspec's abort callback, and the process ends with one line (or the server fails the
request with 503 and /health says so), as for a dead worker.

A decode that computes on this machine while the workers idle, or a worker that computes one
graph for longer than the limit, would be taken for frozen: 20 s is far beyond one graph split of
the models ggufspec runs on CPU workers (milliseconds to a few seconds).
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import threading
import time
from typing import Any, Callable, Iterator, TypeVar

from ggufspec.errors import UserError
from ggufspec.rpc import Endpoint

T = TypeVar("T")

STALL_TIMEOUT_S = 20.0  # a decode with no byte from any worker for this long: a worker is frozen
_POLL_S = 1.0
# struct tcp_info (linux/tcp.h): 8 one-byte fields, then u32s; last_data_sent is the 10th, last_data_recv the 12th
_LAST_DATA_SENT, _LAST_DATA_RECV = 8 + 9 * 4, 8 + 11 * 4

_lock = threading.Lock()
_inflight: dict[int, float] = {}  # id of a call -> when it started (time.monotonic)
_endpoints: tuple[Endpoint, ...] = ()
_thread: threading.Thread | None = None
_stalled: str | None = None  # the reason, once the watchdog cut the connections


def stall_timeout_s() -> float:
    """Seconds a decode may wait on a silent RPC worker: `STALL_TIMEOUT_S`, or GGUFSPEC_RPC_STALL_S."""
    text = os.environ.get("GGUFSPEC_RPC_STALL_S")
    if not text:
        return STALL_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise UserError(f"GGUFSPEC_RPC_STALL_S must be a number of seconds > 0, got {text!r}; unset it for "
                        f"the default {STALL_TIMEOUT_S:g} s")
    return value


def arm(endpoints: tuple[Endpoint, ...], *, timeout_s: float | None = None) -> None:
    """Watch decodes against `endpoints` from now on (idempotent; later calls add workers).
    `timeout_s`: default `STALL_TIMEOUT_S`, or GGUFSPEC_RPC_STALL_S (a test-only hook: the frozen
    worker tests wait seconds, not 20)."""
    global _endpoints, _thread
    if timeout_s is None:
        timeout_s = stall_timeout_s()
    with _lock:
        _endpoints = tuple(dict.fromkeys(_endpoints + endpoints))
        if _thread is None:
            _thread = threading.Thread(target=_watch, args=(timeout_s,), name="ggufspec-rpc-stall", daemon=True)
            _thread.start()


def armed() -> bool:
    return _thread is not None


class watching:
    """`with watching():` around one llama.cpp call that may wait on a worker: a decode, and what
    waits for its results (llama.cpp decodes asynchronously: reading logits synchronises), or
    reads and writes a KV cache. About 1 us when armed."""

    __slots__ = ()

    def __enter__(self) -> None:
        if _thread is not None:
            _inflight[id(self)] = time.monotonic()

    def __exit__(self, *exc: object) -> None:
        _inflight.pop(id(self), None)


def watched(fn: Callable[..., T], *args: Any) -> T:
    """fn(*args) inside `watching()`; called at once while no worker is watched (one call less
    on every decode and logits read: code run right after a decode runs cache-cold, ~10 us a call)."""
    if _thread is None:
        return fn(*args)
    with watching():
        return fn(*args)


def stalled() -> str | None:
    """Why the watchdog cut the workers' connections (None: it has not)."""
    return _stalled


def worker_sockets(endpoints: tuple[Endpoint, ...]) -> Iterator[tuple[Endpoint, socket.socket]]:
    """This process's TCP connections to `endpoints` (Linux /proc), as duplicated sockets the
    caller closes (options and shutdown act on the connection itself)."""
    wanted: dict[tuple[str, int], Endpoint] = {}
    for ep in endpoints:
        try:
            for info in socket.getaddrinfo(ep.host, ep.port, type=socket.SOCK_STREAM):
                wanted[(info[4][0], ep.port)] = ep
        except OSError:
            continue
    for name in os.listdir("/proc/self/fd") if os.path.isdir("/proc/self/fd") else ():
        try:
            fd = int(name)
            if not os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                continue
            s = socket.socket(fileno=os.dup(fd))
        except (OSError, ValueError):
            continue
        try:
            ep = wanted.get(s.getpeername()[:2]) if s.type == socket.SOCK_STREAM else None
        except OSError:
            ep = None
        if ep is None:
            s.close()
            continue
        yield ep, s


def _silence(s: socket.socket) -> tuple[float, bool]:
    """(seconds since the worker last sent data, whether we sent since: a reply is awaited)."""
    info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    sent_ms, = struct.unpack_from("<I", info, _LAST_DATA_SENT)
    recv_ms, = struct.unpack_from("<I", info, _LAST_DATA_RECV)
    return recv_ms / 1000, sent_ms < recv_ms


def _watch(timeout_s: float) -> None:
    global _stalled
    while _stalled is None:
        time.sleep(_POLL_S)
        starts = list(_inflight.values())
        if not starts or time.monotonic() - min(starts) < timeout_s:
            continue
        conns = list(worker_sockets(_endpoints))
        try:
            silences = [(ep, *_silence(s)) for ep, s in conns]
            if not silences or min(quiet for _, quiet, _ in silences) < timeout_s:
                continue
            silent = [str(ep) for ep, _, awaited in silences if awaited] or [str(ep) for ep, _, _ in silences]
            _stalled = (f"RPC worker {', '.join(dict.fromkeys(silent))} did not answer for {timeout_s:g} s "
                        "(frozen, stopped or unreachable)")
            for _, s in conns:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)  # the waiting recv fails: ggml aborts (devices._on_abort)
        finally:
            for _, s in conns:
                s.close()
