"""Several generations in lockstep, each timed on its own steps (pure: no llama_cpp).

Why: on a shared machine a whole run goes faster or slower for seconds at a time. Two runs of the
target alone on the same prompt, one after the other, differ by sd 6.2% (log of the time ratio,
14 pairs); the same two generations interleaved token by token, each on its own context, by sd
0.65%, at the same speed (3.85 s and 3.82 s a generation; scripts in docs/bench/lockstep.md). A
configuration's speedup is a ratio of two runs, so the bench runs every configuration of a
(repeat, prompt) block in lockstep: a slow second then costs all of them alike.

The lane with the fewest tokens so far takes the next step (ties: the given order), so every lane
reaches each position at about the same moment. One step of a speculative generation runs a whole
round (draft and verify) and yields its first token; the round's other tokens come out without
work. Each lane is charged only for the time inside its own steps; what a generation measures of
itself (the controller's round times, draft and verify seconds) never spans another lane's step.
A lane with a `wait()` (`ggufspec.loop.engine.Generation`) has it called inside its step: on an
asynchronous target a generation launches its next round of the target alone before it yields,
and that device time is its own, not the next lane's (whose decode would queue behind it).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any, Callable, Iterator, Sequence


def interleave(lanes: Sequence[Iterator[object]], *, clock: Callable[[], float] = time.perf_counter) -> list[float]:
    """Drain every iterator of `lanes`, one step at a time, the one that has yielded the fewest
    items first. Returns the seconds spent inside each lane's steps (its exhausting call included)."""
    busy = [0.0] * len(lanes)
    count = [0] * len(lanes)
    live = list(range(len(lanes)))
    while live:
        i = min(live, key=lambda j: count[j])
        t = clock()
        try:
            next(lanes[i])
            count[i] += 1
            wait = getattr(lanes[i], "wait", None)
            if wait is not None:
                wait()
        except StopIteration:
            live.remove(i)
        busy[i] += clock() - t
    return busy


def own_stats(stats: Any, busy_s: float) -> Any:
    """A lane's `RunStats` with its generation time the seconds inside its own steps (`interleave`'s)
    less its prefill, not the wall time that spans the other lanes' steps."""
    return replace(stats, gen_s=max(0.0, busy_s - stats.prompt_s))
