"""Retry-After for a full queue: how long the work already in hand takes, from this server's speed.

A job costs a start-up (prompt processing, from its start to its first token) plus its tokens
times the seconds per token of decoding, and it generates about `fill` of the max_tokens it asked
for (EOS and stop strings end many early). All three are exponential moving averages over the
jobs this server finished, so a request asking for 16 tokens does not teach the estimate that
one asking for 4000 takes as long. Before any job finished, the running jobs' own rates so far
stand in (the first decode timings), then a deliberately slow prior (a CPU decoding 10 tokens/s).

The wait is the time to finish every running and waiting job (--parallel N: N decode at once),
clamped to [MIN_S, MAX_S]: a client told to come back then finds the line empty; one told
less than a second would come back into the same full line.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Protocol, Sequence

#: Seconds per token before anything was measured: slow on purpose (an early client waits a
#: little more, rather than coming back into a full line).
PRIOR_S_PER_TOKEN = 0.1
ALPHA = 0.3  # weight of the newest finished job in each moving average
MIN_S, MAX_S = 1, 600
_MIN_LIVE_TOKENS = 4  # a running job's rate is a fair stand-in after this many tokens


class Timed(Protocol):
    """What the estimate reads of a job (`worker.Job`)."""

    max_tokens: int
    started: float | None  # perf_counter when its generation started (None: still waiting)
    first_token: float | None  # perf_counter of its first token
    generated: int  # tokens so far


def _ema(old: float | None, new: float) -> float:
    return new if old is None else (1 - ALPHA) * old + ALPHA * new


class WaitEstimate:
    """Moving averages of finished jobs' start-up, seconds per token and fill; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._startup_s: float | None = None
        self._s_per_token: float | None = None
        self._fill: float | None = None

    def finished(self, job: Timed, *, complete: bool) -> None:
        """Learn from a job that ended (`complete`: it ran to EOS, a stop or max_tokens, so its
        fill counts; a cancelled or failed one still tells the speed)."""
        end = time.perf_counter()
        with self._lock:
            if job.started is not None and job.first_token is not None:
                self._startup_s = _ema(self._startup_s, job.first_token - job.started)
                if job.generated >= 2:
                    self._s_per_token = _ema(self._s_per_token, (end - job.first_token) / (job.generated - 1))
            if complete and job.max_tokens > 0:
                self._fill = _ema(self._fill, min(1.0, job.generated / job.max_tokens))

    def seconds(self, *, running: Sequence[Timed], waiting: Sequence[Timed], slots: int) -> int:
        """Seconds until the running and waiting jobs are all done, clamped to [MIN_S, MAX_S]."""
        now = time.perf_counter()
        with self._lock:
            startup, spt, fill = self._startup_s, self._s_per_token, self._fill
        if spt is None:  # nothing finished yet: the running jobs' rates so far, else the prior
            live = [(now - j.first_token) / (j.generated - 1) for j in running
                    if j.first_token is not None and j.generated >= _MIN_LIVE_TOKENS]
            spt = max(live) if live else PRIOR_S_PER_TOKEN
        fill = 1.0 if fill is None else fill
        startup = startup or 0.0
        total = 0.0
        for j in running:
            left = max(0.0, j.max_tokens * fill - j.generated)
            total += left * spt + (startup if j.first_token is None else 0.0)
        total += sum(startup + j.max_tokens * fill * spt for j in waiting)
        return min(MAX_S, max(MIN_S, math.ceil(total / max(1, slots))))
