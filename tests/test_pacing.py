"""The pacer: pause drafting exactly when the measured costs say it loses to the target alone."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from ggufspec.pacing import DraftPacer, expected_tokens


def _feed(pacer: DraftPacer, *, t_1: float, t_row: float, t_draft: float, k: int, accepted: int) -> None:
    pacer.observe(drafted=0, accepted=0, draft_s=0.0, verify_s=t_1)
    pacer.observe(drafted=k, accepted=accepted, draft_s=k * t_draft, verify_s=t_1 + k * t_row)


@given(a=st.floats(0.0, 0.999), k=st.integers(0, 16))
def test_expected_tokens_is_the_geometric_sum(a: float, k: int) -> None:
    assert math.isclose(expected_tokens(a, k), sum(a**i for i in range(k + 1)), rel_tol=1e-9)


def test_first_round_calibrates_the_target_alone() -> None:
    pacer = DraftPacer()
    assert pacer.decide(draft_len=4, draft_max=8) == 0
    pacer.observe(drafted=0, accepted=0, draft_s=0.0, verify_s=0.010)
    assert pacer.decide(draft_len=4, draft_max=8) == 4  # unmeasured draft: probe it


def test_a_draft_as_slow_as_the_target_pauses_long_even_when_all_is_accepted() -> None:
    # c = 1.2 and verify rows 0.4 of a step: at a = 1, K = 8 gives 9 / (9.6 + 1 + 3.2) = 0.65x
    pacer = DraftPacer(first_pause=2, hopeless_pause=40, hopeless_after=2)
    _feed(pacer, t_1=0.010, t_row=0.004, t_draft=0.012, k=4, accepted=4)
    assert pacer.best_gain(draft_max=8) == (0, 1.0)
    assert pacer.best_gain(draft_max=8, accept_rate=1.0) == (0, 1.0)
    # one probe is not a verdict (it may have been a noisy one): a short pause, then probe again
    assert [pacer.decide(draft_len=8, draft_max=8) for _ in range(3)] == [0, 0, 4]
    _feed(pacer, t_1=0.010, t_row=0.004, t_draft=0.012, k=4, accepted=4)
    lengths = [pacer.decide(draft_len=8, draft_max=8) for _ in range(41)]
    assert lengths == [0] * 40 + [4]  # the second confirms it: a long pause, then one short probe
    assert pacer.paused_rounds == 42


def test_one_noisy_probe_does_not_switch_drafting_off() -> None:
    # the first probe's verify ran 10x slow (a cold batch): a short pause; the next probe, timed
    # normally, shows drafting pays and the pacer keeps drafting
    pacer = DraftPacer(first_pause=4)
    pacer.observe(drafted=0, accepted=0, draft_s=0.0, verify_s=0.015)
    pacer.observe(drafted=4, accepted=4, draft_s=4 * 0.016, verify_s=0.20)
    assert pacer.best_gain(draft_max=8, accept_rate=1.0)[0] == 0
    assert [pacer.decide(draft_len=8, draft_max=8) for _ in range(5)] == [0, 0, 0, 0, 4]
    for _ in range(4):
        pacer.observe(drafted=4, accepted=4, draft_s=4 * 0.0065, verify_s=0.020)
    assert pacer.decide(draft_len=8, draft_max=8) == 8


def test_a_draft_that_would_pay_if_right_backs_off_and_probes() -> None:
    # c = 0.2: at a = 1 drafting wins, but at a ~ 0.1 it loses; pauses double 4, 8, 16 (max)
    pacer = DraftPacer(first_pause=4, max_pause=16)
    for _ in range(12):
        _feed(pacer, t_1=0.010, t_row=0.004, t_draft=0.002, k=4, accepted=0)
    assert pacer.best_gain(draft_max=8)[0] == 0 and pacer.best_gain(draft_max=8, accept_rate=1.0)[0] > 0
    seen = []
    for _ in range(3):
        n = 0
        while (k := pacer.decide(draft_len=6, draft_max=8)) == 0:
            n += 1
        seen.append((n, k))
        pacer.observe(drafted=k, accepted=0, draft_s=k * 0.002, verify_s=0.010 + k * 0.004)
    assert seen == [(4, 4), (8, 4), (16, 4)]


def test_a_cheap_accurate_draft_keeps_drafting() -> None:
    pacer = DraftPacer()
    for _ in range(5):
        _feed(pacer, t_1=0.010, t_row=0.001, t_draft=0.001, k=4, accepted=4)
    k, gain = pacer.best_gain(draft_max=8)
    assert k > 0 and gain > 2
    assert all(pacer.decide(draft_len=6, draft_max=8) == 6 for _ in range(50))
    assert pacer.paused_rounds == 0


def test_a_cheap_draft_that_is_always_rejected_pauses() -> None:
    # prompt lookup on text it cannot predict: free drafts, but each verify row costs 0.5 step
    pacer = DraftPacer()
    for _ in range(20):
        _feed(pacer, t_1=0.010, t_row=0.005, t_draft=0.0, k=3, accepted=0)
    assert pacer.accept_rate < 0.2
    assert pacer.decide(draft_len=3, draft_max=8) == 0


def test_drafting_that_pays_again_resets_the_back_off() -> None:
    pacer = DraftPacer(first_pause=2, max_pause=64)
    for _ in range(12):
        _feed(pacer, t_1=0.010, t_row=0.004, t_draft=0.002, k=4, accepted=0)
    for _ in range(3):  # pause 2, probe, pause 4, probe, pause 8, probe
        while pacer.decide(draft_len=4, draft_max=8) == 0:
            pass
        pacer.observe(drafted=4, accepted=0, draft_s=4 * 0.002, verify_s=0.026)
    assert pacer._next_pause == 16
    # the text turned predictable: paying rounds reset the back-off
    for _ in range(20):
        pacer.observe(drafted=4, accepted=4, draft_s=4 * 0.002, verify_s=0.026)
    assert pacer._next_pause == 2
    assert pacer.decide(draft_len=4, draft_max=8) == 4
