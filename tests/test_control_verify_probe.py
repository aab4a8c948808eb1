"""Rule `verify_probe` on a verify whose seconds step with the rows (pure, simulated rounds).

llama.cpp's repacked CPU kernels take a batch's rows in blocks, so a verify of 6 rows can cost
less than one of 5 (smollm2-as-1b on a 2-core EPYC: 141 ms at 4 rows, 189 at 5, 168 at 6, against
a 55.5 ms target step; docs/bench/regimes-cpu-2026-12-07c). The verify line prices a K never run
lately; where it prices the best K too dear, only a round at that K can show it.
"""

from __future__ import annotations

import numpy as np
import pytest

from ggufspec.loop.control import ControlSettings, DraftController
from ggufspec.loop.rounds import Choice, Round

from test_control import Sim, simulate

A = 0.010  # the target step
# seconds of a verify of K drafts (K + 1 rows) in target steps: the as-1b measurements' shape, the
# steps steeper (K = 5 at 2.8 a, K = 8 at 5.0 a: the line through K = 3 and 8 prices K = 5 at 3.5 a)
STEP = {1: 1.9 * A, 2: 2.67 * A, 3: 2.54 * A, 4: 3.41 * A, 5: 2.8 * A, 6: 3.9 * A, 7: 4.2 * A, 8: 5.0 * A}
MODEL = Sim(b=0.15 * A, alpha=0.92)  # E(5) / T(5) = 1.39 / a, E(3) / T(3) = 1.19 / a: K = 5 best by ~17%


def _rate(k: int) -> float:
    e = sum(MODEL.alpha**i for i in range(k + 1))
    return e / (STEP[k] + k * MODEL.b)


def _settled_at_3(settings: ControlSettings) -> DraftController:
    """A controller whose history ran K = 3 (and its probes K = 8): the line through them prices
    K = 5 at ~3.5 a, not its 2.8 a, and E(5) / T(5) 3% under K = 3's."""
    ctrl = DraftController(settings=settings)
    ctrl.observe(Round(choice=Choice(None, 0), emitted=1, round_s=A))
    ctrl.observe(Round(choice=Choice(None, 0), emitted=1, round_s=A))
    for r in range(40):
        k = 8 if r % 16 == 15 else 3
        ctrl.observe(Round(choice=Choice("m", k), drafted=k, accepted=k, emitted=k + 1,
                           round_s=STEP[k] + k * MODEL.b, draft_s=k * MODEL.b))
    return ctrl


def test_the_stepped_costs_make_k5_best_and_k3_second() -> None:
    rates = {k: _rate(k) for k in STEP}
    assert max(rates, key=rates.__getitem__) == 5
    assert rates[5] > 1.15 * rates[3]


def _k5_share(probe: bool, seed: int) -> tuple[float, float, float]:
    """(share of rounds at K = 5 in rounds 0-99, in rounds 100-399, tokens a target step) after `_settled_at_3`."""
    ctrl = _settled_at_3(ControlSettings(verify_probe=probe))
    choices, rate = simulate(ctrl, 400, a=A, drafters={"m": MODEL}, rng=np.random.default_rng(seed),
                             allow_none=False, verify_s=STEP)
    ks = [c.draft_len for c in choices]
    return ks[:100].count(5) / 100, ks[100:].count(5) / 300, rate * A


@pytest.mark.parametrize("seed", range(6))
def test_a_k_the_line_prices_too_dear_is_measured_and_then_run(seed: int) -> None:
    _, later, rate = _k5_share(True, seed)
    assert later > 0.9  # found within 100 rounds (a verify probe every 2 `retry` rounds at most)
    assert rate > 0.93 * _rate(5) * A


def test_without_the_rule_the_line_keeps_the_best_k_out_for_hundreds_of_rounds() -> None:
    # seeds 0 and 4: K = 3 for rounds 6-280 and 6-160, K = 5 in 38% and 82% of rounds 100-399 (the
    # other seeds' first rounds found K = 5 anyway)
    for seed in (0, 4):
        first, later, _ = _k5_share(False, seed)
        assert first == 0.0 and later < 0.85, (seed, first, later)
        assert _k5_share(True, seed)[1] > 0.9
