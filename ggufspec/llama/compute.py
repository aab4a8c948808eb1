"""The one thread that runs llama.cpp's compute graphs, for a process that decodes from several.

llama.cpp's CPU backend, built with OpenMP (llama-cpp-python's build and the exact kernels are),
runs each graph on an OpenMP team, and libgomp keeps a pool of team threads for every thread that
starts one. Once a second thread of the process has decoded, libgomp manages more threads than
there are CPUs and throttles its spin-waits (GOMP's throttled spin count: 100 spins by default),
so the graph's hundreds of barriers each sleep in the kernel. Measured on the 2-core CPU, one-token
decodes of the F32 target: 14-16 ms a token from the thread that also made the first decode,
26-30 ms from a second thread (the server's worker, after the load's warm-up in the main thread),
16-17 ms from either with a CPU backend built without OpenMP. The library keeps its decodes in
the caller's thread; the server, whose decodes come from a worker thread or from several slot
threads, installs a `ComputeThread` before it loads the pair, and `lib.decode` hands every decode
to it (the load's warm-up included): two thread switches a decode instead of a slower decode.
"""

from __future__ import annotations

import queue
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator


class _Call:
    __slots__ = ("fn", "args", "done", "result", "error")

    def __init__(self, fn: Callable[..., Any], args: tuple) -> None:
        self.fn, self.args = fn, args
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None


class ComputeThread:
    """A daemon thread that runs the callables handed to it, one at a time, in order."""

    def __init__(self, name: str = "ggufspec-compute") -> None:
        self._queue: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def is_current(self) -> bool:
        return threading.get_ident() == self._thread.ident

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """fn(*args) on this thread (at once when called from it); its result or its exception.
        Blocks until fn has returned, whatever signal arrives meanwhile: the caller may not free
        what fn is using while it runs (see `lib.decode` for Ctrl-C)."""
        if self.is_current():
            return fn(*args)
        c = _Call(fn, args)
        self._queue.put(c)
        c.done.wait()
        if c.error is not None:
            raise c.error
        return c.result

    def close(self) -> None:
        """Let the calls already handed over finish, then end the thread."""
        if self._thread.is_alive():
            self._queue.put(None)
            if not self.is_current():
                self._thread.join()

    def _loop(self) -> None:
        while (c := self._queue.get()) is not None:
            try:
                c.result = c.fn(*c.args)
            except BaseException as exc:  # handed back to the caller
                c.error = exc
            c.done.set()


_current: ComputeThread | None = None


def current() -> ComputeThread | None:
    """The process's compute thread, or None: decodes run in the caller's thread."""
    return _current


@contextmanager
def compute_thread() -> Iterator[ComputeThread]:
    """Run every llama.cpp decode of the process on one thread while inside (the server). Enter it
    before the pair loads (the load's warm-up decodes), leave it after the pair is closed."""
    global _current
    if _current is not None:
        raise RuntimeError("a compute thread is already installed")
    _current = ComputeThread()
    try:
        yield _current
    finally:
        owner, _current = _current, None
        owner.close()
