"""ggufspec.bench.lockstep on fake generations and a fake clock (no model)."""

from __future__ import annotations

from typing import Iterator

from ggufspec.bench.lockstep import interleave


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _gen(clock: FakeClock, name: str, log: list[str], rounds: list[tuple[float, int]]) -> Iterator[int]:
    """A generation whose rounds each cost `seconds` and yield `tokens` tokens (the work is done
    before the round's first token, as in ggufspec.loop.engine); the last call costs `0.5`."""
    for seconds, tokens in rounds:
        clock.t += seconds
        for _ in range(tokens):
            log.append(name)
            yield 0
    clock.t += 0.5


def test_each_lane_is_charged_only_its_own_steps() -> None:
    clock, log = FakeClock(), []
    alone = _gen(clock, "a", log, [(1.0, 1)] * 6)  # 6 tokens, 1 s each
    spec = _gen(clock, "s", log, [(2.0, 3), (2.0, 3)])  # 6 tokens in 2 rounds of 2 s
    busy = interleave([alone, spec], clock=clock)
    assert busy == [6.5, 4.5]  # each its own rounds and its exhausting call, none of the other's
    assert clock.t == 11.0


def test_the_lane_with_fewest_tokens_steps_next() -> None:
    clock, log = FakeClock(), []
    alone = _gen(clock, "a", log, [(1.0, 1)] * 6)
    spec = _gen(clock, "s", log, [(2.0, 3), (2.0, 3)])
    interleave([alone, spec], clock=clock)
    # ties go to the first lane; a round's later tokens come out (no work) while the other catches up
    assert "".join(log) == "as" * 6

def test_lanes_of_different_lengths_and_an_empty_one() -> None:
    clock, log = FakeClock(), []
    short = _gen(clock, "x", log, [(1.0, 2)])
    long = _gen(clock, "y", log, [(1.0, 1)] * 5)
    empty: Iterator[int] = iter(())
    busy = interleave([short, long, empty], clock=clock)
    assert busy == [1.5, 5.5, 0.0]
    assert log.count("x") == 2 and log.count("y") == 5
