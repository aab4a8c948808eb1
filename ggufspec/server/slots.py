"""`serve --parallel N` (N > 1): N slot threads and one bounded waiting line.

Each slot (ggufspec.loop.parallel) is one sequence in the pair's multi-sequence contexts, with its own
thread: it runs one generation at a time, as `worker.Worker`'s one thread does, and the
contexts' batchers merge the slots' decodes. A request goes to the free slot whose cached tokens
share the longest prefix with its prompt, or the least recently used one when none shares half of
it (llama-server's choice); with no slot free it waits in
the line, and with the line full it gets 429 with Retry-After. Cancellation, errors, shutdown and a
lost RPC worker behave as in `worker.Worker`, per slot. `--parallel 1` keeps `worker.Worker`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque

from ggufspec.loop.parallel import Slot, pick_slot
from ggufspec.server import adapter
from ggufspec.server.error_bodies import APIError, shutting_down
from ggufspec.server.eta import WaitEstimate
from ggufspec.server.metrics import Metrics
from ggufspec.server.worker import Job, KeepLearnt, device_lost_error, run_job

log = logging.getLogger("ggufspec.server")


class SlotWorker:
    """N generation threads, one per slot of the pair, and their bounded waiting line."""

    def __init__(self, pair: adapter.Pair, *, queue_size: int, metrics: Metrics) -> None:
        self.pair = pair
        self.slots: list[Slot] = adapter.slots(pair)
        self.queue_size = queue_size
        self.metrics = metrics
        self._cond = threading.Condition()
        self._waiting: deque[Job] = deque()
        self._assigned: dict[int, Job] = {}  # slot index -> the job it runs (or is about to)
        self._stopping = False
        self.eta = WaitEstimate()  # for Retry-After
        self.lost: str | None = None
        self.keep = KeepLearnt(pair.save_controller)
        self._threads = [threading.Thread(target=self._run, args=(s,), name=f"ggufspec-slot-{s.index}", daemon=True)
                         for s in self.slots]
        metrics.queue_depth.set_function(self.depth)
        metrics.busy.set_function(lambda: 1.0 if self.busy else 0.0)
        metrics.slots_busy.set_function(self.busy_slots)
        if self.slots and self.slots[0].batcher is not None:
            drafts = self.slots[0].draft_batchers
            metrics.watch_batchers({"target": self.slots[0].batcher,
                                    **{f"draft{i + 1 if i else ''}": b for i, b in enumerate(drafts)}})

    @property
    def alive(self) -> bool:
        return all(t.is_alive() for t in self._threads) and self.lost is None

    @property
    def stopped(self) -> bool:
        """No generation runs any more (after `stop`: every slot's thread has ended)."""
        return not any(t.is_alive() for t in self._threads)

    @property
    def busy(self) -> bool:
        return self.busy_slots() > 0

    def busy_slots(self) -> int:
        with self._cond:
            return len(self._assigned)

    def depth(self) -> int:
        with self._cond:
            return sum(not j.cancel.is_set() for j in self._waiting)

    def fail(self, reason: str) -> None:
        """The pair is lost (an RPC worker died): fail running and waiting requests with 503."""
        with self._cond:
            self.lost = reason
            jobs = list(self._assigned.values()) + list(self._waiting)
            self._waiting = deque()
        for job in jobs:
            job.emit("error", device_lost_error(reason))

    def start(self) -> None:
        if self._stopping:
            return
        for t in self._threads:
            if not t.is_alive():
                t.start()

    def halt(self) -> None:
        """Refuse new jobs, fail the waiting ones, cancel the running ones; returns at once. Each
        slot's job ends in a shutting-down error after its current step (`run_job`)."""
        with self._cond:
            self._stopping = True
            waiting, self._waiting = list(self._waiting), deque()
            for job in self._assigned.values():
                job.cancel.set()
            self._cond.notify_all()
        for job in waiting:
            job.cancel.set()
            job.emit("error", shutting_down())

    def stop(self, timeout: float = 10.0) -> None:
        """`halt`, then join the threads; not when the pair is lost (`Worker.stop`)."""
        self.halt()
        if self.lost is not None:
            return
        deadline = time.monotonic() + timeout
        for t in self._threads:
            if t.is_alive():
                t.join(max(0.0, deadline - time.monotonic()))

    def submit(self, job: Job) -> None:
        """Hand the job to a free slot or queue it; raise 429 (all busy, line full) / 503."""
        with self._cond:
            if self.lost is not None:
                raise device_lost_error(self.lost)
            if self._stopping or not all(t.is_alive() for t in self._threads):
                raise shutting_down()
            if any(j.cancel.is_set() for j in self._waiting):
                self._waiting = deque(j for j in self._waiting if not j.cancel.is_set())
            free = len(self.slots) - len(self._assigned)
            if free > len(self._waiting) or len(self._waiting) < self.queue_size:
                self._waiting.append(job)
                self._dispatch()
                return
            n = len(self._waiting)
            wait = self.eta.seconds(running=list(self._assigned.values()), waiting=list(self._waiting),
                                    slots=len(self.slots))
        raise APIError(
            429, f"the server is busy ({len(self.slots)} generations running, {n} waiting); retry in {wait} s",
            type="rate_limit_error", code="queue_full", headers={"Retry-After": str(wait)},
        )

    def _dispatch(self) -> None:
        """Give waiting jobs to free slots, each to the one sharing the longest prefix (under the lock)."""
        while self._waiting:
            free = [s for s in self.slots if s.index not in self._assigned]
            if not free:
                return
            job = self._waiting.popleft()
            if job.cancel.is_set():  # the client left while waiting
                continue
            slot = pick_slot(free, job.request.tokens if job.request.cache_prompt else ())
            self._assigned[slot.index] = job
            self._cond.notify_all()

    def _run(self, slot: Slot) -> None:
        while True:
            with self._cond:
                while slot.index not in self._assigned and not self._stopping:
                    self._cond.wait()
                job = self._assigned.pop(slot.index, None) if self._stopping else self._assigned[slot.index]
            if job is None or self._stopping:  # shutting down: a job handed over but not started hears so
                if job is not None:
                    job.emit("error", shutting_down())
                return
            last: tuple[str, object] | None = None
            try:
                if job.cancel.is_set():  # its client left, or a shutdown began, before it started
                    last = ("error", shutting_down()) if self._stopping else None
                else:
                    last = self._generate(slot, job)
            except Exception as exc:  # never let one request kill the slot
                log.exception("generation failed")
                last = ("error", APIError(500, f"generation failed: {type(exc).__name__}: {exc}",
                                          type="server_error", code="internal_error"))
            finally:
                # The slot is free BEFORE the client hears the end: its next request (a conversation's
                # next turn) then finds this slot's cache free, not busy for a moment.
                with self._cond:
                    del self._assigned[slot.index]
                    if not self._stopping:
                        self._dispatch()
                self.eta.finished(job, complete=last is not None and last[0] == "end" and not job.cancel.is_set())
            if last is not None:
                job.emit(*last)
            with self._cond:  # (no slot starts a job while it is held: _dispatch runs under it)
                if not self._assigned and not self._waiting and not self._stopping and self.lost is None:
                    self.keep.idle()

    def _generate(self, slot: Slot, job: Job) -> tuple[str, object]:
        """Run the job on the slot, emitting its text; returns its last event (sent once the slot is free)."""
        return run_job(self.pair, job, self.metrics, stopping=lambda: self._stopping, slot=slot)
