"""Rule `load_costs`: what the models' decodes cost when they loaded, before a round measures it
(pure: the controller on hand-built rounds; the real path's timing is tests/test_engine.py's).

The no-pay regime these stand for: a quantized SmolLM2 target on 2 cores, a = 10 ms, its verify
rows 0.6 a each, and a draft model whose step costs as much as the target's (b = 0.95 a): no K
pays, whatever is accepted. Without the load's figures a fresh controller opens the model on the
first prompt (b priced at its prior, 0.25 a) and tries lookup's proposals at the prior row (0.2 a).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from ggufspec.loop.control import ControlSettings, DraftController
from ggufspec.loop.rounds import Candidate, Choice, Round

A = 0.010  # the target's step, seconds
ROW = 0.6 * A  # a verify row beyond the first
SLOW = 0.95 * A  # a draft model's step where nothing pays
FAST = 0.25 * A  # ... where it pays


def _round_s(k: int, b: float, row: float = ROW) -> float:
    return A + (0.3 * A + row * k if k else 0.0) + k * b


def _first_model_rounds(settings: ControlSettings, *, b: float, row: float = ROW, accept_all: bool = False,
                        rounds: int = 200, know: bool = True) -> list[int]:
    """A fresh controller, told the model's step `b` and the verify row `row` at load (`know`),
    over prompts of 64 rounds, the model prefilled at each where it `wants`; a round keeps one
    draft (or all: `accept_all`). Returns the rounds the model drafted."""
    ctrl = DraftController(settings=settings)
    ran = []
    for r in range(rounds):
        if r % 64 == 0:
            if know:
                ctrl.know_costs(steps={"m": b}, target_s=None, row_s=row)
            wanted = ctrl.wants("m", backlog=40, remaining=64)
            ctrl.begin(prefilled=["m"] if wanted else [], prefill={"m": (40, 40 * 0.1 * b)} if wanted else None)
        c = ctrl.choose(drafters=[Candidate("m")], draft_max=8)
        k = c.draft_len
        acc = k if accept_all else min(k, 1)
        if k:
            ran.append(r)
        ctrl.observe(Round(choice=c, drafted=k, accepted=acc, emitted=acc + 1, round_s=_round_s(k, b, row),
                           draft_s=k * b))
    return ran


def test_a_model_that_cannot_pay_at_its_load_step_is_neither_opened_nor_retried_at_once() -> None:
    on = _first_model_rounds(ControlSettings(), b=SLOW)
    off = _first_model_rounds(ControlSettings(load_costs=False), b=SLOW)
    unknown = _first_model_rounds(ControlSettings(), b=SLOW, know=False)
    # without the load's figures the model opens the first prompt (its prior b is 0.25 a)
    assert off[0] <= 2 and unknown[0] <= 2
    # with them it is hopeless before it ran: its first retry a hopeless interval (retry x spacing
    # = 128 rounds) after it was told, and it still runs then (exploration stays bounded)
    retry, spacing = ControlSettings().retry, ControlSettings().spacing
    assert on and on[0] >= retry * spacing - 8 and on[0] < retry * spacing + 64
    assert len(on) < len(off)


def test_a_model_that_pays_at_its_load_step_opens_as_before() -> None:
    # rows of 0.1 a, every draft kept: K = 8 makes 2.2x the target alone
    on = _first_model_rounds(ControlSettings(), b=FAST, row=0.1 * A, accept_all=True)
    off = _first_model_rounds(ControlSettings(load_costs=False), b=FAST, row=0.1 * A, accept_all=True)
    assert on[0] <= 2 and off[0] <= 2
    assert len(on) > 150 and len(off) > 150  # it drafts almost every round either way


def test_a_hopeless_model_is_not_prefilled_for_the_next_prompt_until_its_retry_is_due() -> None:
    ctrl = DraftController()
    ctrl.know_costs(steps={"m": SLOW}, target_s=None, row_s=ROW)
    assert ctrl.wants("m", backlog=40, remaining=64)  # the first prompt: nothing measured yet (a)
    ctrl.begin(prefilled=["m"], prefill={"m": (40, 0.004)})
    for _ in range(64):
        c = ctrl.choose(drafters=[Candidate("m")], draft_max=8)
        assert c.drafter is None
        ctrl.observe(Round(choice=c, drafted=0, accepted=0, emitted=1, round_s=A))
    assert not ctrl.wants("m", backlog=40, remaining=64)
    for _ in range(80):
        ctrl.choose(drafters=[], draft_max=8)
        ctrl.observe(Round(choice=Choice(None, 0), drafted=0, accepted=0, emitted=1, round_s=A))
    assert ctrl.wants("m", backlog=40, remaining=64)  # 144 rounds since it was told: due


def _lookup_first(settings: ControlSettings, *, row_s: float) -> tuple[float, Choice]:
    """A fresh controller told a verify row's cost at load, a few rounds of the target alone,
    then lookup's first proposal of 6 tokens (its prior curve). Returns V(6) / a and the choice."""
    ctrl = DraftController(settings=settings)
    ctrl.know_costs(steps={}, target_s=None, row_s=row_s)
    for _ in range(4):
        ctrl.choose(drafters=[], draft_max=8)
        ctrl.observe(Round(choice=Choice(None, 0), drafted=0, accepted=0, emitted=1, round_s=A))
    c = ctrl.choose(drafters=[Candidate("lookup", free=True, match_len=6)], draft_max=8)
    return ctrl.verify_s(6) / A, c


def test_a_verify_row_timed_at_load_is_the_least_slope_of_the_verify_line() -> None:
    v_on, c_on = _lookup_first(ControlSettings(), row_s=ROW)
    v_off, c_off = _lookup_first(ControlSettings(load_costs=False), row_s=ROW)
    assert v_off == pytest.approx(1.0 + 0.3 + 0.2 * 6) and c_off.drafter == "lookup"
    assert v_on == pytest.approx(1.0 + 0.3 + 0.6 * 6) and c_on.drafter is None
    # rows cheaper than the prior's 0.2 a (an F32 target on a CPU, a GPU): nothing changes
    v_cheap, c_cheap = _lookup_first(ControlSettings(), row_s=0.05 * A)
    assert v_cheap == pytest.approx(v_off) and c_cheap == c_off


def test_a_counted_controller_ignores_the_load_and_a_measured_b_overrides_it() -> None:
    counted = DraftController(timed=False)
    counted.know_costs(steps={"m": SLOW}, target_s=None, row_s=ROW)
    assert counted.per_token_s("m") is None  # not even registered: counts alone
    assert counted.verify_s(6) == pytest.approx(1.0 + 0.3 + 0.2 * 6)  # nominal rows, not the load's
    ctrl = DraftController(settings=replace(ControlSettings(), calibrate=1))
    ctrl.know_costs(steps={"m": SLOW}, target_s=None, row_s=ROW)
    ctrl.observe(Round(choice=Choice(None, 0), drafted=0, accepted=0, emitted=1, round_s=A))
    assert ctrl.per_token_s("m") == pytest.approx(SLOW)
    ctrl.observe(Round(choice=Choice("m", 3), drafted=3, accepted=1, emitted=2, round_s=_round_s(3, 0.004),
                       draft_s=0.012, draft_first_s=0.004, draft_calls=3))
    assert ctrl.per_token_s("m") == pytest.approx(0.004)


def _opening_after_a_stall(settings: ControlSettings, *, first: list[float]) -> list[Choice]:
    """A fresh controller told the target's step (A) and a paying model's at load, the model
    prefilled (it opens), the first rounds of the target alone taking `first` seconds (a stall:
    a GC pause, a cold cache); then A. Returns the first 5 choices."""
    ctrl = DraftController(settings=settings)
    ctrl.know_costs(steps={"m": FAST}, target_s=A * 0.9, row_s=0.1 * A)
    ctrl.begin(prefilled=["m"], prefill={"m": (40, 0.004)})
    out, slow = [], list(first)
    for _ in range(5):
        c = ctrl.choose(drafters=[Candidate("m")], draft_max=8)
        out.append(c)
        k = c.draft_len
        round_s = (slow.pop(0) if slow else A) if k == 0 else _round_s(k, FAST, 0.1 * A)
        ctrl.observe(Round(choice=c, drafted=k, accepted=k, emitted=k + 1, round_s=round_s, draft_s=k * FAST))
    return out


def test_a_first_round_of_the_target_alone_far_over_its_load_step_is_measured_again() -> None:
    # a fresh controller's a is its first samples' minimum: a stall there (3 a) made the target
    # alone look 3x slower than it is, and a fresh controller drafted a whole no-pay generation
    # (docs/bench/load-costs-2026-12-07). With the target's step at load, that sample is suspect
    # and the target alone runs again before the opening.
    on = _opening_after_a_stall(ControlSettings(), first=[3 * A])
    off = _opening_after_a_stall(ControlSettings(load_costs=False), first=[3 * A])
    assert [c.drafter for c in on[:2]] == [None, None] and on[2].drafter == "m"
    assert [c.drafter for c in off[:2]] == [None, "m"]
    # where every first round costs over twice the load's step (a long context), at most
    # `calibrate` of them re-measure: then the model runs
    slow = _opening_after_a_stall(ControlSettings(), first=[2.5 * A] * 5)
    assert [c.drafter for c in slow] == [None, None, None, "m", "m"]
    # a first round near the load's step (a's Python over its decode) changes nothing
    normal = _opening_after_a_stall(ControlSettings(), first=[1.2 * A])
    assert [c.drafter for c in normal[:2]] == [None, "m"]
