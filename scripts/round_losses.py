"""A round's gain or loss against the target alone, by the kind of round: the one split behind
`scripts/trace_sim.py --losses` (the replay) and `scripts/round_trace.py --losses` (real rounds),
which differ only in the target alone's round they price tokens at."""

from __future__ import annotations

from typing import Any

ALONE = "target alone"


def kind_of(r: Any) -> str:
    """A `Round`'s kind: the target alone, the model (a retry apart), or a free drafter's grade."""
    c = r.choice
    if c is None or c.drafter is None or not r.drafted:
        return ALONE
    name = c.drafter if r.free else "model"
    return name + (f"#{c.grade}" if c.grade else "") + (" retry" if c.retry else "")


def add(kinds: dict[str, list[float]], r: Any, alone_s: float) -> tuple[str, float]:
    """Count round `r` in `kinds` (kind -> [rounds, lost s, gained s (<= 0), ...]): its seconds, its
    catch-up included, minus its emitted tokens at `alone_s` a token. Returns (its kind, that net)."""
    kind = kind_of(r)
    d = r.round_s + r.catchup_s - r.emitted * alone_s
    cell = kinds[kind]
    cell[0] += 1
    cell[1 if d > 0 else 2] += d
    return kind, d
