"""The draft controller on simulated cost and accept sequences (pure: no llama.cpp, no loop).

A simulated round of drafter d at length K costs (a + K * b_d) seconds times a lognormal jitter
(10%), K * b_d of them drafting (verify rows cost nothing extra here, as on a GPU with room) and accepts each draft with probability alpha_d until the first rejection; the target
alone costs a. The stated bounds: the controller settles on the best source within SETTLE
rounds, follows a change of costs within FOLLOW rounds, and runs a losing source at least once
in every window of retry + number of sources rounds.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import pytest

from ggufspec.control import Candidate, Choice, ControlSettings, DraftController

SETTLE = 40  # rounds to settle on the best source
FOLLOW = 60  # rounds to follow a change of costs


@dataclass
class Sim:
    b: float  # seconds each drafted token adds to a round
    alpha: float  # per-token accept rate
    free: bool = False
    p_match: float = 1.0  # free drafters: how often they have something to propose


def best_rate(a: float, d: Sim, k_max: int = 8) -> float:
    """Tokens per second of the best fixed K for drafter d (the oracle)."""
    return max(sum(d.alpha**i for i in range(k + 1)) / (a + k * d.b) for k in range(1, k_max + 1))


def simulate(ctrl: DraftController, rounds: int, *, a: float, drafters: dict[str, Sim], rng: np.random.Generator,
             allow_none: bool = True, stall: int | None = None):
    """Run `rounds` rounds; returns the choices and the realized tokens per second."""
    choices, tokens, seconds = [], 0, 0.0
    for r in range(rounds):
        cands, props = [], {}
        for name, d in drafters.items():
            if d.free:
                props[name] = int(rng.integers(1, 9)) if rng.random() < d.p_match else 0
                cands.append(Candidate(name, free=True, match_len=props[name]))
            else:
                cands.append(Candidate(name))
        c = ctrl.choose(drafters=cands, draft_max=8, allow_none=allow_none)
        k, acc, t_draft = c.draft_len, 0, 0.0
        if c.drafter is None:
            t = a
        else:
            d = drafters[c.drafter]
            while acc < k and rng.random() < d.alpha:
                acc += 1
            t_draft = k * d.b
            t = a + t_draft
        jitter = rng.lognormal(0.0, 0.1) * (50.0 if r == stall else 1.0)
        t, t_draft = t * jitter, t_draft * jitter
        scored = {}
        for name, n in props.items():
            if name != c.drafter and n > 0:
                m = 0
                while m < n and m < acc + 1 and rng.random() < drafters[name].alpha:
                    m += 1
                scored[name] = (n, m)
        ctrl.observe(choice=c, drafted=k, accepted=acc, emitted=acc + 1, round_s=t, draft_s=t_draft,
                     free=c.drafter in props, scored=scored)
        choices.append(c)
        tokens += acc + 1
        seconds += t
    return choices, tokens / seconds


def share(choices, name) -> float:
    return sum(c.drafter == name for c in choices) / len(choices)


GOOD = Sim(b=0.003, alpha=0.85)  # a = 0.010: the best fixed K drafts 1.69x the target alone
BAD = Sim(b=0.008, alpha=0.6)  # every K loses to the target alone (best 0.89x)


@pytest.mark.parametrize("seed", range(4))
def test_it_settles_on_drafting_when_drafting_pays(seed: int) -> None:
    ctrl = DraftController()
    choices, _ = simulate(ctrl, 600, a=0.010, drafters={"m": GOOD}, rng=np.random.default_rng(seed))
    assert share(choices[SETTLE:], "m") > 0.9
    _, rate = simulate(ctrl, 1000, a=0.010, drafters={"m": GOOD}, rng=np.random.default_rng(seed + 10))
    assert rate > 0.95 * best_rate(0.010, GOOD)  # the K it picks is as good as the best fixed one


@pytest.mark.parametrize("seed", range(4))
def test_it_settles_on_the_target_alone_when_drafting_loses_and_retries_the_draft(seed: int) -> None:
    ctrl = DraftController()
    choices, rate = simulate(ctrl, 600, a=0.010, drafters={"m": BAD}, rng=np.random.default_rng(seed))
    # BAD is 0.89x at its best K: a streak of lucky accepts after a retry wins it a few rounds
    # (0.89-0.94 of the rounds go to the target alone over seeds 0-3)
    assert share(choices[SETTLE:], None) > 0.85
    assert rate > 0.95 / 0.010
    # a losing choice is tried again: in every window of retry + 2 rounds, the draft runs at least once
    window = ctrl.settings.retry + 2
    for start in range(SETTLE, len(choices) - window):
        assert any(c.drafter == "m" for c in choices[start : start + window]), start


def test_it_follows_a_change_of_costs() -> None:
    rng = np.random.default_rng(7)
    ctrl = DraftController()
    choices, _ = simulate(ctrl, 300, a=0.010, drafters={"m": GOOD}, rng=rng)
    assert share(choices[-100:], "m") > 0.9
    # the machine gets busy for the draft (its tokens cost 3x): now drafting loses
    choices, _ = simulate(ctrl, 300, a=0.010, drafters={"m": Sim(b=0.012, alpha=0.85)}, rng=rng)
    assert share(choices[FOLLOW:], None) > 0.9
    # and back: drafting pays again, and the retries find it
    choices, _ = simulate(ctrl, 300, a=0.010, drafters={"m": GOOD}, rng=rng)
    assert share(choices[FOLLOW:], "m") > 0.9


def test_one_stalled_round_does_not_condemn_a_source() -> None:
    rng = np.random.default_rng(3)
    ctrl = DraftController()
    simulate(ctrl, 200, a=0.010, drafters={"m": GOOD}, rng=rng)
    # a 50x round (a page fault, another process) while drafting: still drafting right after
    choices, _ = simulate(ctrl, 40, a=0.010, drafters={"m": GOOD}, rng=rng, stall=0)
    assert share(choices[1:], "m") > 0.9


def test_it_picks_the_better_of_two_drafters_and_lookup_where_it_matches() -> None:
    rng = np.random.default_rng(11)
    ctrl = DraftController()
    drafters = {"slow": BAD, "fast": GOOD}
    choices, _ = simulate(ctrl, 600, a=0.010, drafters=drafters, rng=rng)
    assert share(choices[SETTLE:], "fast") > 0.85
    # prompt lookup, free, right 90% where it matches (a third of the rounds); a bad draft model
    ctrl = DraftController()
    drafters = {"slow": BAD, "lookup": Sim(b=0.0005, alpha=0.9, free=True, p_match=0.33)}
    choices, rate = simulate(ctrl, 900, a=0.010, drafters=drafters, rng=rng)
    late = choices[SETTLE:]
    assert 0.25 < share(late, "lookup") < 0.4  # wherever it has a match
    assert share(late, None) > 0.55  # else the target alone, not the losing model
    assert rate > 1.3 / 0.010


def test_free_drafters_are_scored_without_being_chosen() -> None:
    # always-draft with the model: lookup never wins a round, yet its accept rate is learned from
    # the tokens the target emitted (Not-a-Bandit's full information)
    ctrl = DraftController()
    rng = np.random.default_rng(5)
    drafters = {"m": GOOD, "lookup": Sim(b=0.0005, alpha=0.3, free=True)}
    simulate(ctrl, 400, a=0.010, drafters=drafters, rng=rng, allow_none=False)
    pi = ctrl.prefix_accept("lookup", 2)
    assert pi[0] == pytest.approx(0.3, abs=0.1)


def test_a_counted_controller_depends_on_counts_not_time() -> None:
    # seeded sampled runs: the same accepts in the same order give the same choices, whatever the clock
    runs = []
    for scale in (1.0, 7.0):
        ctrl = DraftController(timed=False)
        rng = np.random.default_rng(2)
        seq = []
        for _ in range(300):
            c = ctrl.choose(drafters=[Candidate("m"), Candidate("lookup", free=True, match_len=int(rng.integers(0, 4)))],
                            draft_max=8)
            acc = int(rng.integers(0, c.draft_len + 1))
            ctrl.observe(choice=c, drafted=c.draft_len, accepted=acc, emitted=acc + 1,
                         round_s=scale * float(rng.random()), free=c.drafter == "lookup")
            seq.append(c)
        runs.append(seq)
    assert runs[0] == runs[1]
    assert Counter(c.drafter for c in runs[0]).keys() == {"m", "lookup", None}


def test_draft_min_and_no_candidates() -> None:
    ctrl = DraftController()
    # lookup found nothing and the target alone is not allowed: nothing can draft, K = 0
    c = ctrl.choose(drafters=[Candidate("lookup", free=True, match_len=0)], draft_max=8, allow_none=False)
    assert (c.drafter, c.draft_len) == (None, 0)
    # a match shorter than draft_min is no candidate
    c = ctrl.choose(drafters=[Candidate("lookup", free=True, match_len=2)], draft_max=8, draft_min=3)
    assert c.drafter is None
    with pytest.raises(ValueError):
        ControlSettings(retry=0)


def _losing_model_controller() -> DraftController:
    """A controller that has measured the model drafter losing: a round of K drafts costs
    10 + 8 K ms against 10 ms for the target alone, and half the drafts are accepted (best: K = 1,
    1.5 tokens in 18 ms, 0.83x); its catch-up costs 3 ms a token (0.3 target steps)."""
    ctrl = DraftController()
    for r in range(80):
        c = ctrl.choose(drafters=[Candidate("m")], draft_max=8)
        k = c.draft_len
        acc = min(k, r % 2)
        ctrl.observe(choice=c, drafted=k, accepted=acc, emitted=acc + 1, round_s=0.010 + 0.008 * k, draft_s=0.008 * k)
    ctrl.observe(choice=Choice("m", 1), drafted=1, accepted=0, emitted=1, round_s=0.018, draft_s=0.008,
                 catchup_tokens=40, catchup_s=40 * 0.003)
    assert ctrl.catchup_s("m") == pytest.approx(0.003)
    return ctrl


def test_a_catch_up_that_does_not_pay_defers_the_retry_to_the_next_prompt() -> None:
    ctrl = _losing_model_controller()
    due = ctrl.settings.retry + 1
    for _ in range(due):  # the model sits out: the target alone, its backlog grows a token a round
        c = ctrl.choose(drafters=[Candidate("m", backlog=3)], draft_max=8)
        ctrl.observe(choice=c, drafted=c.draft_len, accepted=0, emitted=1, round_s=0.010)
    assert ctrl.wants("m")  # due: prefilled with the next prompt, where a retry costs no catch-up
    # mid-generation, 40 tokens behind with 100 to go: even at its prior rate (alpha 0.8: 1.00x
    # the target alone) it would save nothing, and the catch-up costs 120 ms: not retried
    for _ in range(50):
        c = ctrl.choose(drafters=[Candidate("m", backlog=40)], draft_max=8, remaining=100)
        assert c.drafter is None
        ctrl.observe(choice=c, drafted=0, accepted=0, emitted=1, round_s=0.010)
    # at the next prompt it is in step (backlog <= SYNCED): the retry runs
    c = ctrl.choose(drafters=[Candidate("m", backlog=1)], draft_max=8, remaining=100)
    assert c.drafter == "m" and c.retry


def test_a_catch_up_that_pays_runs_and_a_cheap_one_always_may() -> None:
    # a drafter measured winning (1.7x) but 40 tokens behind: with 500 tokens to go the catch-up
    # (40 x 3 ms) is repaid many times over, with 5 to go it is not
    ctrl = DraftController()
    rng = np.random.default_rng(3)
    simulate(ctrl, 150, a=0.010, drafters={"m": GOOD}, rng=rng)
    ctrl.observe(choice=Choice("m", 4), drafted=4, accepted=4, emitted=5, round_s=0.022, draft_s=0.012,
                 catchup_tokens=40, catchup_s=40 * 0.003)
    assert ctrl.choose(drafters=[Candidate("m", backlog=40)], draft_max=8, remaining=500).drafter == "m"
    assert ctrl.choose(drafters=[Candidate("m", backlog=40)], draft_max=8, remaining=5).drafter is None
    assert ctrl.choose(drafters=[Candidate("m", backlog=2)], draft_max=8, remaining=5).drafter == "m"


def test_a_losing_model_is_not_prefilled_until_its_retry_is_due() -> None:
    ctrl = _losing_model_controller()
    ctrl.observe(choice=Choice(None, 0), drafted=0, accepted=0, emitted=1, round_s=0.010)
    assert ctrl.choose(drafters=[Candidate("m")], draft_max=8).drafter is None  # the estimates: the target alone
    assert not ctrl.wants("m")
    assert ctrl.wants("never-seen")  # a drafter never run is always prepared
