"""scripts/round_trace.py's --losses split (pure: hand-built rounds)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from script_module import load_script

from ggufspec.loop.rounds import Choice

round_trace = load_script("round_trace")


def _round(drafter: str | None, k: int, emitted: int, seconds: float, *, grade: int = 0, retry: bool = False,
           free: bool = False, catchup_s: float = 0.0) -> SimpleNamespace:
    return SimpleNamespace(choice=Choice(drafter, k, retry, grade), drafted=k, emitted=emitted, round_s=seconds,
                           catchup_s=catchup_s, free=free)


def test_each_round_is_priced_at_its_generations_target_alone() -> None:
    g1 = [_round(None, 0, 1, 0.010), _round(None, 0, 1, 0.012), _round("m", 4, 2, 0.040, retry=True),
          _round("lookup", 8, 9, 0.036, grade=3, free=True)]
    g2 = [_round(None, 0, 1, 0.020), _round("m", 4, 5, 0.050, catchup_s=0.01)]
    net, total = round_trace.losses([g1, g2])
    # g1's target alone 11 ms a round, g2's 20 ms
    assert total == pytest.approx(13 * 0.011 + 6 * 0.020)
    assert net["model retry"] == pytest.approx([1, 0.040 - 2 * 0.011, 0.0])
    assert net["lookup#3"] == pytest.approx([1, 0.0, 0.036 - 9 * 0.011])
    assert net["model"] == pytest.approx([1, 0.0, 0.050 + 0.010 - 5 * 0.020])  # its catch-up counted
    assert net["target alone"][1] + net["target alone"][2] == pytest.approx(0.0)  # priced at their own mean
    # every second of the rounds is the reference's or some kind's
    spent = sum(r.round_s + r.catchup_s for g in (g1, g2) for r in g)
    assert sum(v[1] + v[2] for v in net.values()) == pytest.approx(spent - total)


def test_without_a_round_of_the_target_alone_nothing_is_priced() -> None:
    net, total = round_trace.losses([[_round("m", 4, 5, 0.05)]])
    assert (net, total) == ({}, 0.0)
