"""The one thread that runs generations, and its bounded waiting line.

llama.cpp contexts are not thread-safe, so ONE worker thread runs every generation, fed by a
bounded queue; a request that finds the queue full gets 429 with Retry-After. Steps go from the
worker to the event loop through ``loop.call_soon_threadsafe``; a client that goes away sets its
job's cancel flag, which the worker checks after every emitted token (so the pair is free again
within one decode step) and which makes a job still waiting in the queue be skipped.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

from ggufspec.errors import UserError
from ggufspec.server import adapter
from ggufspec.server.error_bodies import APIError, invalid, shutting_down
from ggufspec.server.eta import WaitEstimate
from ggufspec.server.marks import Mark
from ggufspec.server.metrics import Metrics

log = logging.getLogger("ggufspec.server")


def device_lost_error(reason: str) -> APIError:
    return APIError(503, f"an RPC worker stopped answering ({reason}); this server can no longer generate: "
                         "restart the worker and the server", type="server_error", code="device_lost")


class KeepLearnt:
    """What the draft controller learnt, written between generations at most once every `every_s`
    seconds (ggufspec.remember; a no-op without --remember), so a server that is killed, or whose
    RPC worker is lost, keeps most of it; `serve` writes it once more when it stops. Called by the
    thread that runs generations, under its lock, with none running or waiting: the controller
    does not move while it is pickled (a few ms)."""

    def __init__(self, save: Callable[[], None], *, every_s: float = 60.0) -> None:
        self._save = save
        self.every_s = every_s
        self._last: float | None = None  # (never: the first idle moment writes)

    def idle(self) -> None:
        now = time.monotonic()
        if self._last is not None and now - self._last < self.every_s:
            return
        self._last = now
        try:
            self._save()
        except Exception:  # (an unwritable folder is one stderr line inside save; anything else: logged)
            log.exception("could not keep what the draft controller learnt")


@dataclass(eq=False)
class Job:
    """One generation request, shared by the event loop (consumer) and the worker (producer).

    Events, in order: ("text", str)* (with `marks`: ("step", Mark)*, one per token), then
    ("end", RunStats) or ("error", APIError).
    """

    request: adapter.GenerationRequest
    loop: asyncio.AbstractEventLoop
    events: asyncio.Queue = field(default_factory=asyncio.Queue)
    cancel: threading.Event = field(default_factory=threading.Event)
    enqueued: float = field(default_factory=time.perf_counter)
    # the client reads the text as it comes (SSE); False: it waits for the whole reply, so the
    # text goes in one event at the end instead of waking the event loop for every token
    stream: bool = True
    marks: bool = False  # a streaming client asked for each token's provenance (ggufspec.server.marks)
    # the generating thread's timings, read by the Retry-After estimate (ggufspec.server.eta)
    started: float | None = None
    first_token: float | None = None
    generated: int = 0

    @property
    def max_tokens(self) -> int:
        return self.request.max_tokens

    def emit(self, kind: str, value: Any = None) -> None:
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, (kind, value))
        except RuntimeError:  # the event loop is gone (shutdown): nobody is listening
            self.cancel.set()


class Worker:
    """The one thread that touches the pair's llama.cpp contexts, and its bounded waiting line."""

    def __init__(self, pair: adapter.Pair, *, queue_size: int, metrics: Metrics) -> None:
        self.pair = pair
        self.queue_size = queue_size
        self.metrics = metrics
        self._cond = threading.Condition()
        self._waiting: deque[Job] = deque()
        self._current: Job | None = None
        self._stopping = False
        self.eta = WaitEstimate()  # for Retry-After
        self.lost: str | None = None  # why the pair can no longer generate (an RPC worker died)
        self.keep = KeepLearnt(pair.save_controller)
        self._thread = threading.Thread(target=self._run, name="ggufspec-generate", daemon=True)
        metrics.queue_depth.set_function(self.depth)
        metrics.busy.set_function(lambda: 1.0 if self.busy else 0.0)
        metrics.slots_busy.set_function(self.busy_slots)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and self.lost is None

    @property
    def stopped(self) -> bool:
        """No generation runs any more (after `stop`: the thread has ended)."""
        return not self._thread.is_alive()

    def fail(self, reason: str) -> None:
        """The pair is lost (an RPC worker died mid-generation; this thread is stuck in llama.cpp
        for good): fail the running and waiting requests with 503; later ones get 503 too."""
        with self._cond:
            self.lost = reason
            jobs = ([self._current] if self._current is not None else []) + list(self._waiting)
            self._waiting = deque()
        for job in jobs:
            job.emit("error", device_lost_error(reason))

    @property
    def busy(self) -> bool:
        return self._current is not None

    def busy_slots(self) -> int:
        return 1 if self.busy else 0

    def depth(self) -> int:
        """Requests waiting whose clients are still there."""
        with self._cond:
            return sum(not j.cancel.is_set() for j in self._waiting)

    def start(self) -> None:
        if not self._thread.is_alive() and not self._stopping:
            self._thread.start()

    def halt(self) -> None:
        """Refuse new jobs, fail the waiting ones, cancel the running one; returns at once. The
        running job ends in a shutting-down error after its current step (`run_job`)."""
        with self._cond:
            self._stopping = True
            waiting, self._waiting = list(self._waiting), deque()
            if self._current is not None:
                self._current.cancel.set()
            self._cond.notify_all()
        for job in waiting:
            job.cancel.set()
            job.emit("error", shutting_down())

    def stop(self, timeout: float = 10.0) -> None:
        """`halt`, then join the thread; not when the pair is lost: that thread is stuck in
        llama.cpp for good, and waiting for it held a SIGTERM for the whole timeout."""
        self.halt()
        if self._thread.is_alive() and self.lost is None:
            self._thread.join(timeout)

    def submit(self, job: Job) -> None:
        """Queue a job, or raise 429 (queue full) / 503 (shutting down)."""
        with self._cond:
            if self.lost is not None:
                raise device_lost_error(self.lost)
            if self._stopping or not self._thread.is_alive():
                raise shutting_down()
            # Jobs whose clients left give their places up now, not when the worker reaches them.
            if any(j.cancel.is_set() for j in self._waiting):
                self._waiting = deque(j for j in self._waiting if not j.cancel.is_set())
            idle = self._current is None and not self._waiting
            if idle or len(self._waiting) < self.queue_size:
                self._waiting.append(job)
                self._cond.notify()
                return
            n = len(self._waiting)
            wait = self.eta.seconds(running=[self._current] if self._current is not None else [],
                                    waiting=list(self._waiting), slots=1)
        raise APIError(
            429, f"the server is busy (one generation running, {n} waiting); retry in {wait} s",
            type="rate_limit_error", code="queue_full", headers={"Retry-After": str(wait)},
        )

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._waiting and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return
                job = self._waiting.popleft()
                if job.cancel.is_set():  # the client left while waiting
                    continue
                self._current = job
            last: tuple[str, Any] | None = None
            try:
                last = self._generate(job)
            except Exception as exc:  # never let one request kill the worker
                log.exception("generation failed")
                last = ("error", APIError(500, f"generation failed: {type(exc).__name__}: {exc}",
                                          type="server_error", code="internal_error"))
            finally:
                with self._cond:
                    self._current = None
                self.eta.finished(job, complete=last is not None and last[0] == "end" and not job.cancel.is_set())
            if last is not None:
                job.emit(*last)
            with self._cond:
                if not self._waiting and not self._stopping and self.lost is None:
                    self.keep.idle()

    def _generate(self, job: Job) -> tuple[str, Any]:
        return run_job(self.pair, job, self.metrics, stopping=lambda: self._stopping)


def run_job(pair: adapter.Pair, job: Job, metrics: Metrics, *, stopping: Callable[[], bool], slot: Any = None
            ) -> tuple[str, Any]:
    """Run `job` (on `slot` when given), emitting its text as it comes; returns its last event,
    ("end", stats) or ("error", APIError), for the caller to emit (a slot worker frees the slot
    first). `stopping`: is the server shutting down (a cancelled job then ends in an error)."""
    started = job.started = time.perf_counter()
    metrics.queue_wait.observe(started - job.enqueued)
    try:
        gen = (adapter.start_generation(pair, job.request) if slot is None
               else adapter.start_generation(pair, job.request, slot=slot))
    except UserError as exc:
        return ("error", invalid(str(exc)))
    first = True
    held: list[str] = []  # a non-streaming job's text, emitted once
    try:
        for step in gen:
            job.generated += 1
            if first:
                job.first_token = time.perf_counter()
                metrics.ttft.observe(job.first_token - job.enqueued)
                first = False
            if job.marks:
                job.emit("step", Mark.of(step))
            elif step.text:
                if job.stream:
                    job.emit("text", step.text)
                else:
                    held.append(step.text)
            if job.cancel.is_set():
                break  # the client is gone: free the pair (or slot) now
    finally:
        gen.close()  # no-op when the generation ran to its end
    if held:
        job.emit("text", "".join(held))
    if gen.stats is not None:
        metrics.record(gen.stats)
    if stopping() and job.cancel.is_set():
        return ("error", shutting_down())
    return ("end", gen.stats)
