"""The controller's running estimates against their definitions (property tests, no llama.cpp)."""

from __future__ import annotations

import statistics

from hypothesis import given, settings
from hypothesis import strategies as st

from ggufspec.loop.estimates import Samples


def _reference(items: list[tuple[int, float]], now: int, horizon: int, low: bool,
               expire: float = float("inf")) -> float | None:
    """The low median (`low`: the minimum) of the samples of the last `horizon` rounds, or of all
    those of the last `expire` rounds."""
    items = [(r, v) for r, v in items if now - r <= expire]
    if not items:
        return None
    fresh = [v for r, v in items if now - r <= horizon] or [v for _, v in items]
    return min(fresh) if low else statistics.median_low(fresh)


@settings(max_examples=300, deadline=None)
@given(steps=st.lists(st.tuples(st.integers(0, 5), st.floats(0.0, 1.0), st.booleans()), max_size=80),
       window=st.integers(1, 8), horizon=st.integers(0, 12), low=st.booleans(),
       expire=st.sampled_from([float("inf"), 0.0, 3.0, 10.0, 30.0]))
def test_a_samples_median_is_the_low_median_of_its_fresh_samples_however_often_asked(
        steps: list[tuple[int, float, bool]], window: int, horizon: int, low: bool, expire: float) -> None:
    # rounds advance by 0-5 between samples; each round the estimate is asked, some rounds add a
    # sample: the memo must answer what the definition does, round after round
    s, kept, now = Samples(window), [], 0
    for gap, value, add in steps:
        now += gap
        if add:
            s.add(now, value)
            kept = (kept + [(now, value)])[-window:]
        assert s.median(now, horizon, low=low, expire=expire) == _reference(kept, now, horizon, low, expire)
        assert s.median(now, horizon, low=low, expire=expire) == _reference(kept, now, horizon, low, expire)  # (the memo)
        assert s.median(now, horizon, low=low) == _reference(kept, now, horizon, low)  # (another key)
