"""The draft controller on simulated cost and accept sequences (pure: no llama.cpp, no loop).

A simulated round of drafter d at length K costs (a + K * b_d) seconds times a lognormal jitter
(10%), K * b_d of them drafting (verify rows cost nothing extra here, as on a GPU with room) and accepts each draft with probability alpha_d until the first rejection; the target
alone costs a. The stated bounds: the controller settles on the best source within SETTLE
rounds, follows a change of costs within FOLLOW rounds, and runs a losing source at least once
in every window of retry + number of sources rounds.
"""

from __future__ import annotations

import math

from collections import Counter
from dataclasses import dataclass

import numpy as np
import pytest

from ggufspec.loop.control import SYNCED, ControlSettings, DraftController
from ggufspec.loop.rounds import Candidate, Choice, Round, Scored

SETTLE = 40  # rounds to settle on the best source
FOLLOW = 60  # rounds to follow a change of costs


@dataclass
class Sim:
    b: float  # seconds each drafted token adds to a round
    alpha: float  # per-token accept rate
    free: bool = False
    p_match: float = 1.0  # free drafters: how often they have something to propose


def _kept(rng: np.random.Generator, n: int, alpha: float) -> int:
    """How many of n drafts the target keeps when each is kept with probability `alpha` until the
    first rejection."""
    kept = 0
    while kept < n and rng.random() < alpha:
        kept += 1
    return kept


def best_rate(a: float, d: Sim, k_max: int = 8) -> float:
    """Tokens per second of the best fixed K for drafter d (the oracle)."""
    return max(sum(d.alpha**i for i in range(k + 1)) / (a + k * d.b) for k in range(1, k_max + 1))


def simulate(ctrl: DraftController, rounds: int, *, a: float, drafters: dict[str, Sim], rng: np.random.Generator,
             allow_none: bool = True, stall: int | None = None, busy: float = 1.0,
             verify_s: dict[int, float] | None = None):
    """Run `rounds` rounds; returns the choices and the realized tokens per second. `busy`: a
    busy host's slowdown of a round of the target alone (x4 that of a drafting round, its
    drafting x16: a burst on a 2-core host hits the longer rounds harder). `verify_s`: K -> seconds
    of a verify of K drafts (else a)."""
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
            acc = _kept(rng, k, d.alpha)
            t_draft = k * d.b
            t = (verify_s[k] if verify_s else a) + t_draft
        jitter = rng.lognormal(0.0, 0.1) * (50.0 if r == stall else 1.0)
        verify, drafting = (busy, busy) if c.drafter is None or busy == 1.0 else (4 * busy, 16 * busy)
        t, t_draft = ((t - t_draft) * verify + t_draft * drafting) * jitter, t_draft * drafting * jitter
        scored = {}
        for name, n in props.items():
            if name != c.drafter and n > 0:
                scored[name] = Scored(n, _kept(rng, min(n, acc + 1), drafters[name].alpha))
        ctrl.observe(Round(choice=c, drafted=k, accepted=acc, emitted=acc + 1, round_s=t, draft_s=t_draft,
                     free=c.drafter in props, scored=scored))
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


def test_the_target_alone_is_retried_the_less_often_the_more_it_trails() -> None:
    # its retries fall (R_best / R_none)^2 retry intervals apart, at most `spacing` (4) of them:
    # behind a draft at 1.69x (realized ~1.5x) every ~70 rounds, not 32; in a close race (a
    # draft at 1.2x) about every interval as before; never more than 4 x 32 rounds apart
    st = ControlSettings()
    for drafter, lo, hi in ((GOOD, 1.6, st.spacing), (Sim(b=0.004, alpha=0.7), 1.0, 1.5)):
        for seed in range(3):
            choices, _ = simulate(DraftController(), 800, a=0.010, drafters={"m": drafter}, rng=np.random.default_rng(seed))
            at = [i for i, c in enumerate(choices) if i >= SETTLE and c.drafter is None and c.retry]
            gaps = [g for g in np.diff(at) if g > 1]  # (a retry that beat the bar runs again at once)
            assert lo * st.retry <= np.median(gaps) <= hi * st.retry, gaps
            assert max(gaps) <= st.spacing * st.retry + 2, gaps


def test_it_follows_a_change_of_costs() -> None:
    rng = np.random.default_rng(7)
    ctrl = DraftController()
    choices, _ = simulate(ctrl, 300, a=0.010, drafters={"m": GOOD}, rng=rng)
    assert share(choices[-100:], "m") > 0.9
    # the machine gets busy for the draft (its tokens cost 3x): now drafting loses
    choices, _ = simulate(ctrl, 300, a=0.010, drafters={"m": Sim(b=0.012, alpha=0.85)}, rng=rng)
    assert share(choices[FOLLOW:], None) > 0.9
    # and back: drafting pays again, and the retries find it. The dear draft could not pay even
    # fully accepted (rule `hopeless`), so its retries are budgeted: one every D(8) / (1% a)
    # rounds (here ~1000-1200: 10-12 s at these costs), no longer every 128
    wait = ctrl._hopeless_interval("m")
    assert 128 < wait < 1300
    choices, _ = simulate(ctrl, int(wait) + 300, a=0.010, drafters={"m": GOOD}, rng=rng)
    assert share(choices[int(wait) + FOLLOW:], "m") > 0.9


def test_one_stalled_round_does_not_condemn_a_source() -> None:
    rng = np.random.default_rng(3)
    ctrl = DraftController()
    simulate(ctrl, 200, a=0.010, drafters={"m": GOOD}, rng=rng)
    # a 50x round (a page fault, another process) while drafting: still drafting right after
    choices, _ = simulate(ctrl, 40, a=0.010, drafters={"m": GOOD}, rng=rng, stall=0)
    assert share(choices[1:], "m") > 0.9


def _timed_rounds(ctrl: DraftController, rounds: int, *, rng: np.random.Generator, stall: float, a: float,
                  row: float, b: float, alpha: float) -> list[str | None]:
    """Rounds with a verify of K + 1 rows costing a + K row and our Python 0.3 ms, except round
    0's: `stall` seconds. Returns who drafted each round."""
    out = []
    for r in range(rounds):
        c = ctrl.choose(drafters=[Candidate("m")], draft_max=8, allow_none=True)
        k = c.draft_len if c.drafter is not None else 0
        acc = _kept(rng, k, alpha)
        verify, draft = a + row * k, k * b
        ctrl.observe(Round(choice=c, drafted=k, accepted=acc, emitted=acc + 1, verify_s=verify, draft_s=draft,
                           round_s=verify + draft + (stall if r == 0 else 0.0003)))
        out.append(c.drafter)
    return out


# the Q8_0 target on the 2-core EPYC: no draft pays (its draft step 1.09 a, a verify row 0.59 a)
NO_PAY = dict(a=0.0084, row=0.005, b=0.0092, alpha=0.7)


@pytest.mark.parametrize("seed", [2, 3])
def test_a_stall_in_a_fresh_controllers_first_round_does_not_make_it_draft_where_nothing_pays(seed: int) -> None:
    # a 50 ms pause of our Python (a full GC pass) in round 0, the first sample of a: without the
    # rule a ~7x a makes the draft look cheap, and the verify rows (dearer than that a) never bound
    # it down: the draft ran most of the generation. Rule recheck: round 0's Python outlasted its
    # decode, so it is priced 2 x its decode and the target alone measured again
    def drafted(recheck: bool, stall: float) -> int:
        ctrl = DraftController(settings=ControlSettings(recheck=recheck))
        return sum(d == "m" for d in _timed_rounds(ctrl, 60, rng=np.random.default_rng(seed), stall=stall, **NO_PAY))

    assert drafted(False, 0.05) > 40  # (the trap, as on the real pair: docs/bench/stall-2026-12-07)
    assert drafted(True, 0.05) <= drafted(True, 0.0) + 1 <= 3


def test_round_zeros_python_under_its_decode_changes_nothing() -> None:
    # the rule reads only a first round whose Python outlasts its decode (on the real pairs round 0's
    # Python is 1-5% of it): otherwise the same choices, on and off, where drafting pays
    def choices(recheck: bool) -> list[str | None]:
        ctrl = DraftController(settings=ControlSettings(recheck=recheck))
        return _timed_rounds(ctrl, 200, rng=np.random.default_rng(7), stall=0.004, a=0.010, row=0.0005, b=0.003,
                             alpha=0.85)

    on = choices(True)
    assert on == choices(False) and sum(d == "m" for d in on) > 150


@pytest.mark.parametrize("expire", [1024.0, math.inf])
@pytest.mark.parametrize("probe_b", [True, False])
def test_a_busy_start_does_not_keep_a_paying_draft_out(expire: float, probe_b: bool) -> None:
    # the first rounds on a busy host (the target alone 3x slower, a drafting round's verify 12x,
    # its drafting 48x: four processes warming at once on 2 cores), then quiet for good. The
    # draft's costs are measured only when it runs: judged hopeless on the busy ones (retries
    # every D(K) / (1% a) rounds, tens of thousands), its few slow samples kept by the low median.
    # Rule probe_b: a model judged on one measurement of b is retried every retry x spacing rounds
    # (at K >= 2, which measures b) and b from a few measurements is their fastest: back within
    # ~150 rounds. Without it, rule `expire` forgets the slow samples after 1,024 rounds
    rng = np.random.default_rng(5)
    ctrl = DraftController(settings=ControlSettings(expire=expire, probe_b=probe_b))
    simulate(ctrl, 12, a=0.010, drafters={"m": GOOD}, rng=rng, busy=3.0)
    choices, _ = simulate(ctrl, 1500, a=0.010, drafters={"m": GOOD}, rng=rng)
    assert share(choices[:100], "m") < 0.2  # (the scenario: the draft is out at first)
    if probe_b:
        assert share(choices[200:], "m") > 0.9
    else:
        assert share(choices[:300], "m") < 0.2
        late = share(choices[1100:], "m")
        assert (late > 0.9) if expire < math.inf else (late < 0.2), late


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
    # always-draft with the model: lookup never wins a round and is never retried, yet its accept
    # rate is learned from the tokens the target emitted (Not-a-Bandit's full information). One
    # run's estimate weighs its last ~30 rounds (sd ~0.07 over seeds): the mean over 8 runs.
    estimates = []
    for seed in range(8):
        ctrl = DraftController()
        drafters = {"m": GOOD, "lookup": Sim(b=0.0005, alpha=0.3, free=True)}
        choices, _ = simulate(ctrl, 400, a=0.010, drafters=drafters, rng=np.random.default_rng(seed), allow_none=False)
        assert share(choices[SETTLE:], "lookup") < 0.02
        estimates.append(ctrl.prefix_accept("lookup", 2)[0])
    assert float(np.mean(estimates)) == pytest.approx(0.3, abs=0.06)


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
            ctrl.observe(Round(choice=c, drafted=c.draft_len, accepted=acc, emitted=acc + 1,
                         round_s=scale * float(rng.random()), free=c.drafter == "lookup"))
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


def _losing_model_controller(settings: ControlSettings = ControlSettings()) -> DraftController:
    """A controller that has measured the model drafter losing: a round of K drafts costs
    10 + 8 K ms against 10 ms for the target alone, and half the drafts are accepted (best: K = 1,
    1.5 tokens in 18 ms, 0.83x); its catch-up costs 3 ms a token (0.3 target steps)."""
    ctrl = DraftController(settings=settings)
    for r in range(80):
        c = ctrl.choose(drafters=[Candidate("m")], draft_max=8)
        k = c.draft_len
        acc = min(k, r % 2)
        ctrl.observe(Round(choice=c, drafted=k, accepted=acc, emitted=acc + 1, round_s=0.010 + 0.008 * k, draft_s=0.008 * k))
    ctrl.observe(Round(choice=Choice("m", 1), drafted=1, accepted=0, emitted=1, round_s=0.018, draft_s=0.008,
                 catchup_tokens=40, catchup_s=40 * 0.003))
    assert ctrl.catchup_s("m") == pytest.approx(0.003)
    return ctrl


def test_a_catch_up_that_does_not_pay_defers_the_retry_to_the_next_prompt() -> None:
    ctrl = _losing_model_controller()
    due = ctrl.settings.retry + 1
    for _ in range(due):  # the model sits out: the target alone, its backlog grows a token a round
        c = ctrl.choose(drafters=[Candidate("m", backlog=3)], draft_max=8)
        ctrl.observe(Round(choice=c, drafted=c.draft_len, accepted=0, emitted=1, round_s=0.010))
    assert ctrl.wants("m")  # due: prefilled with the next prompt, where a retry costs no catch-up
    # mid-generation, 40 tokens behind with 100 to go: even at its prior rate (alpha 0.8: 1.00x
    # the target alone) it would save nothing, and the catch-up costs 120 ms: not retried
    for _ in range(50):
        c = ctrl.choose(drafters=[Candidate("m", backlog=40)], draft_max=8, remaining=100)
        assert c.drafter is None
        ctrl.observe(Round(choice=c, drafted=0, accepted=0, emitted=1, round_s=0.010))
    # at the next prompt it is in step (backlog <= SYNCED): the retry runs
    c = ctrl.choose(drafters=[Candidate("m", backlog=1)], draft_max=8, remaining=100)
    assert c.drafter == "m" and c.retry


def _winning_model_controller(*, seed: int) -> DraftController:
    """A controller that has measured the model drafter winning (GOOD, ~1.6x) over 150 rounds,
    then a catch-up of 40 tokens at 3 ms a token."""
    ctrl = DraftController()
    simulate(ctrl, 150, a=0.010, drafters={"m": GOOD}, rng=np.random.default_rng(seed))
    ctrl.observe(Round(choice=Choice("m", 4), drafted=4, accepted=4, emitted=5, round_s=0.022, draft_s=0.012,
                 catchup_tokens=40, catchup_s=40 * 0.003))
    return ctrl


def test_a_catch_up_that_pays_runs_and_a_cheap_one_always_may() -> None:
    # a drafter measured winning (1.7x) but 40 tokens behind: with 500 tokens to go the catch-up
    # (40 x 3 ms) is repaid many times over, with 5 to go it is not
    ctrl = _winning_model_controller(seed=3)
    assert ctrl.choose(drafters=[Candidate("m", backlog=40)], draft_max=8, remaining=500).drafter == "m"
    assert ctrl.choose(drafters=[Candidate("m", backlog=40)], draft_max=8, remaining=5).drafter is None
    assert ctrl.choose(drafters=[Candidate("m", backlog=2)], draft_max=8, remaining=5).drafter == "m"


def test_a_losing_model_is_not_prefilled_until_its_retry_is_due() -> None:
    ctrl = _losing_model_controller()
    ctrl.observe(Round(choice=Choice(None, 0), drafted=0, accepted=0, emitted=1, round_s=0.010))
    assert ctrl.choose(drafters=[Candidate("m")], draft_max=8).drafter is None  # the estimates: the target alone
    assert not ctrl.wants("m")
    assert ctrl.wants("never-seen")  # a drafter never run is always prepared


@pytest.mark.parametrize("full_retry", [True, False])
def test_a_retry_at_a_new_prompt_runs_the_full_opening(full_retry: bool) -> None:
    # rule `full_retry`: a model that lost, prefilled because its retry is due, runs the whole
    # opening (3 rounds), not one. A prompt's first tokens are often hard (the bench's hard-start
    # scenario above: 2 hard tokens first): judged on one round there, every retry failed, the
    # estimate only fell, and the model sat out whole prompts (default / best fixed K 0.84 on 3
    # of 12 seeds; with the rule at least 0.93)
    ctrl = _losing_model_controller(settings=ControlSettings(full_retry=full_retry))
    for _ in range(ctrl.settings.retry + 1):  # sits out until its retry is due
        c = ctrl.choose(drafters=[Candidate("m", backlog=3)], draft_max=8)
        ctrl.observe(Round(choice=c, drafted=c.draft_len, accepted=0, emitted=1, round_s=0.010))
    assert ctrl.wants("m")
    ctrl.begin(prefilled=["m"])
    picks = []
    for _ in range(ctrl.settings.opening + 2):
        c = ctrl.choose(drafters=[Candidate("m", backlog=1)], draft_max=8, remaining=100)
        picks.append(c.drafter)
        k = c.draft_len
        ctrl.observe(Round(choice=c, drafted=k, accepted=0, emitted=1, round_s=0.010 + 0.008 * k, draft_s=0.008 * k))
    opened = ctrl.settings.opening if full_retry else 1
    assert picks[:opened] == ["m"] * opened and picks[opened:] == [None] * (len(picks) - opened)


def test_an_exploratory_prefill_costs_its_share_of_the_time_and_opens_in_full() -> None:
    # a model measured losing (0.83x at best), 200-token prompts for 128 new tokens: its prefill
    # (3 ms a token) never pays, so it is prefilled only for exploration, once the time since it
    # last ran is 1 / explore_share times the prefill and the opening's rounds (~0.8 s): every
    # ~13 prompts of 1.3 s, not every 128 rounds (each prompt); then it runs its full opening
    ctrl = _losing_model_controller()
    explored, total_s, explore_s = [], 0.0, 0.0
    for prompt in range(40):
        pre = ctrl.wants("m", backlog=200, remaining=128)
        ctrl.begin(prefilled=["m"] if pre else [], prefill={"m": (200, 0.6)} if pre else None)
        total_s += 0.6 if pre else 0.0
        explore_s += 0.6 if pre else 0.0
        backlog, runs = (0 if pre else 200), 0
        for r in range(128):
            c = ctrl.choose(drafters=[Candidate("m", backlog=backlog)], draft_max=8, remaining=128 - r)
            k = c.draft_len
            acc = min(k, r % 2)
            t = 0.010 + 0.008 * k
            ctrl.observe(Round(choice=c, drafted=k, accepted=acc, emitted=acc + 1, round_s=t, draft_s=0.008 * k))
            total_s += t
            if c.drafter == "m":
                runs += 1
                explore_s += t
                backlog = SYNCED
            else:
                backlog += 1
        explored.append(runs)
        if pre:  # the prefill is paid: the opening's rounds, not one
            assert runs >= ctrl.settings.opening
        else:
            assert runs == 0  # no catch-up of 200 tokens pays
    tried = [i for i, n in enumerate(explored) if n]
    assert 2 <= len(tried) <= 5 and tried[0] <= 15  # bounded: tried again within a bounded time
    assert explore_s / total_s <= 2 * ctrl.settings.explore_share


# ---- prompts: the controller across generations, as the engine drives it ------------------------
#
# Costs as measured on the 2-core CPU with the default pair (in target steps a = 14 ms): a verify of
# K drafts V(K) = a (1.35 + 0.06 K), a drafted token 0.42 a, a catch-up 0.2 a a token. Acceptance is
# bursty: each prompt has its accept rate alpha, except in "hard" stretches (a name, a number) where
# drafts are accepted with probability 0.35; a stretch starts with probability 0.04 a token and ends
# with 0.4. The engine's part: prefill the model when the controller `wants` it, `begin`, track the
# model's backlog (a round it sat out leaves it the emitted tokens to catch up on).

A = 0.014


def _verify(k: int) -> float:
    return A * (1.0 + (0.35 + 0.06 * k if k else 0.0))


def run_prompt(ctrl: DraftController | None, alpha: float, rng: np.random.Generator, *, n: int = 128,
               fixed: int = 0, hard_start: int = 0, verify=_verify, b: float = 0.42 * A) -> float:
    """Tokens per second of one prompt of n tokens: under `ctrl`, or at a fixed K (0: the target
    alone). `verify(K)`: a round's verify seconds; `b`: a drafted token's."""
    hrng = np.random.default_rng(int(alpha * 1e6))  # the prompt's hard stretches, the same for every policy
    hard, h = [], False
    for _ in range(n + 16):
        h = not h if hrng.random() < (0.4 if h else 0.04) else h
        hard.append(h)
    backlog = 0
    if ctrl is not None:
        prefilled = ctrl.wants("m")
        ctrl.begin(prefilled=["m"] if prefilled else [])
        backlog = 0 if prefilled else 200  # not prefilled: the whole prompt to catch up on
    gen, seconds = 0, 0.0
    while gen < n:
        left = n - gen
        if ctrl is None:
            c = Choice("m" if fixed else None, min(fixed, left - 1))
        else:
            c = ctrl.choose(drafters=[Candidate("m", backlog=backlog)], draft_max=min(8, left - 1), remaining=left)
        k, acc = (c.draft_len, 0) if c.drafter else (0, 0)
        while acc < k and rng.random() < (0.35 if gen + acc < hard_start or hard[gen + acc] else alpha):
            acc += 1
        jitter = rng.lognormal(0.0, 0.1)
        draft_s = k * b * jitter
        round_s = verify(k) * jitter + draft_s
        caught = backlog if c.drafter and backlog > SYNCED else 0
        if ctrl is not None:
            ctrl.observe(Round(choice=c, drafted=k, accepted=acc, emitted=acc + 1, round_s=round_s, draft_s=draft_s,
                         catchup_tokens=caught, catchup_s=caught * 0.2 * A))
        seconds += round_s + caught * 0.2 * A
        backlog = (SYNCED if acc == k else 1) if c.drafter else backlog + acc + 1
        gen += acc + 1
    return gen / seconds


def prompts_speedups(alphas, *, seed: int, hard_start: int = 0, settings: ControlSettings = ControlSettings(),
                     **costs) -> dict[str, float]:
    """Median speedup over the target alone, per policy, of one controller run over the prompts
    (`costs`: run_prompt's verify and b)."""
    rng = np.random.default_rng(seed)
    ctrl = DraftController(settings=settings)
    out: dict[str, list[float]] = {"default": [], "K2": [], "K4": [], "K8": []}
    for alpha in alphas:
        out["default"].append(run_prompt(ctrl, alpha, rng, hard_start=hard_start, **costs))
        alone = run_prompt(None, alpha, rng, hard_start=hard_start, **costs)
        out["default"][-1] /= alone
        for k in (2, 4, 8):
            out[f"K{k}"].append(run_prompt(None, alpha, rng, fixed=k, hard_start=hard_start, **costs) / alone)
    return {name: float(np.median(v)) for name, v in out.items()}


@pytest.mark.parametrize("hard_start", [0, 2], ids=["easy-start", "hard-start"])
def test_over_prompts_where_drafting_pays_it_drafts_through_bad_stretches(hard_start: int) -> None:
    # prompts on which the draft agrees 93-99% outside hard stretches (the default pair on chat):
    # fixed K = 4 gives ~1.2x. Before the estimates kept a pool over prompts and a prompt's first
    # rounds (the opening), one bad stretch at a prompt's start left the draft out for the whole
    # prompt. Median over 12 seeds of the default / the best fixed K: 0.947 (easy start) and 0.844
    # (2 hard tokens first) before, 0.979 and 0.936 after, 0.987 and 0.946 with the target alone's
    # retries spaced by its margin (`_spacing`). Hard start, each seed: 0.84-0.85 in 3 of 12 before
    # a retry at a new prompt ran its full opening (rule `full_retry`: judged on its first round,
    # at the hard tokens, the model sat out whole prompts), 0.93 or more after. Over 36 seeds (hard
    # start) the lowest are 0.88 (3 under 0.9); rule `expire` moves them (median 0.955 -> 0.960,
    # mean 0.954 -> 0.952, lowest 0.855, 4 under 0.9; seed 1 here 0.955 -> 0.895). Rule
    # measured_verify costs here, where the verify is linear and each K's few samples are noise
    # against the line that pools them (36 seeds, hard start: median 0.975 -> 0.963, lowest 0.890
    # -> 0.846; easy start 0.986 -> 0.986, lowest 0.936 -> 0.917), and gains where it is not
    # (docs/bench/controller.md, twenty-fifth session): the floor of the hard start 0.88 -> 0.86
    ratios = []
    for seed in range(12):
        alphas = np.random.default_rng(100 + seed).uniform(0.93, 0.99, size=24)
        s = prompts_speedups(alphas, seed=seed, hard_start=hard_start)
        ratios.append(s["default"] / max(s["K2"], s["K4"], s["K8"], 1.0))
    assert np.median(ratios) > (0.96 if hard_start == 0 else 0.92)
    assert min(ratios) > (0.9 if hard_start == 0 else 0.86), ratios


def test_over_prompts_where_drafting_loses_it_costs_little() -> None:
    # the draft agrees 30-60%: every fixed K loses (0.36-0.72x); the controller, which still
    # opens each prompt with the model, stays within 3% of the target alone (median over 12
    # seeds 0.987; 0.948 while a retry's optimism was the cost model's prior alone)
    ratios = []
    for seed in range(6):
        alphas = np.random.default_rng(200 + seed).uniform(0.3, 0.6, size=24)
        s = prompts_speedups(alphas, seed=seed)
        assert max(s["K2"], s["K4"], s["K8"]) < 0.8
        ratios.append(s["default"])
    assert np.median(ratios) > 0.97


def test_a_prompt_that_starts_badly_keeps_a_draft_that_pays_elsewhere() -> None:
    ctrl = DraftController()
    rng = np.random.default_rng(1)
    for _ in range(3):
        run_prompt(ctrl, 0.97, rng)
    assert ctrl.wants("m")
    ctrl.begin(prefilled=["m"])
    for _ in range(2):  # the reply's first words: rejected at once
        c = ctrl.choose(drafters=[Candidate("m")], draft_max=8, remaining=120)
        assert c.drafter == "m" and c.draft_len >= 3  # the opening runs at a K that can show a gain
        ctrl.observe(Round(choice=c, drafted=c.draft_len, accepted=0, emitted=1, round_s=_verify(c.draft_len) + c.draft_len * 0.42 * A,
                     draft_s=c.draft_len * 0.42 * A))
    # then the draft agrees again: it is still drafting (judged by what it did on other prompts)
    picks = []
    for _ in range(20):
        c = ctrl.choose(drafters=[Candidate("m")], draft_max=8, remaining=100)
        picks.append(c.drafter)
        k = c.draft_len if c.drafter else 0
        ctrl.observe(Round(choice=c, drafted=k, accepted=k, emitted=k + 1, round_s=_verify(k) + k * 0.42 * A, draft_s=k * 0.42 * A))
    assert picks.count("m") >= 18


def test_lookup_is_charged_the_catch_up_it_leaves_the_model() -> None:
    # a counting prompt: the model is right every time at K = 8 (9 tokens for V(8) + 8 b); lookup
    # finds 2-token matches, also right, for free. Per round lookup looks better (3 tokens in
    # V(2): 2.1 vs 1.7 tokens per step), but each of its rounds leaves the model 3 tokens to
    # catch up on (0.2 a each); counting that, the model wins (1.74 vs 1.75 ... see below)
    ctrl = DraftController()
    model_runs = lookup_runs = 0
    backlog = 0
    for _ in range(300):
        c = ctrl.choose(drafters=[Candidate("m", backlog=backlog), Candidate("lookup", free=True, match_len=2)], draft_max=8)
        k = c.draft_len if c.drafter else 0
        caught = backlog if c.drafter == "m" and backlog > SYNCED else 0
        draft_s = k * 0.42 * A if c.drafter == "m" else 0.0
        # lookup's 3 tokens cost the model a catch-up of 3 decodes in one batch: 0.6 a
        ctrl.observe(Round(choice=c, drafted=k, accepted=k, emitted=k + 1, round_s=_verify(k) + draft_s, draft_s=draft_s,
                     free=c.drafter == "lookup", catchup_tokens=caught, catchup_s=caught * 0.2 * A))
        backlog = SYNCED if c.drafter == "m" else backlog + k + 1
        model_runs += c.drafter == "m"
        lookup_runs += c.drafter == "lookup"
    assert model_runs > 4 * lookup_runs


def test_a_draft_model_is_prefilled_only_where_its_gain_pays_for_the_prefill() -> None:
    # a draft measured winning (GOOD: ~1.6x) whose catch-up costs 3 ms a token: a 40-token prompt
    # for 500 new tokens is worth prefilling, a 2,000-token one for 10 new tokens is not
    ctrl = _winning_model_controller(seed=4)
    ctrl.choose(drafters=[Candidate("m")], draft_max=8)
    assert ctrl.wants("m", backlog=40, remaining=500)
    assert not ctrl.wants("m", backlog=2000, remaining=10)
    assert ctrl.wants("m")  # no sizes given: as it may run soon


@pytest.mark.parametrize("rivals", [True, False], ids=["rule", "off"])
def test_a_winning_model_is_prefilled_after_a_prompt_that_ended_in_lookups_matches(rivals: bool) -> None:
    # rule `prefill_rivals`: the last rounds ran lookup's grade 3 (347 against the model's 103 and
    # the target alone's 71 tokens/s); at the next prompt lookup runs only where it matches, and
    # the model, which beats the target alone, is prefilled. Judged against lookup's grade (off),
    # the model was neither the leader nor close, and its ceiling under lookup's rate made it
    # hopeless: not prefilled, it caught up on the whole prompt in its first round (smollm2-as-1b,
    # chat-04: a 50-token decode, 0.16-0.18 s of the generation's ~3.5 s)
    rng = np.random.default_rng(0)
    ctrl = _shared_warm_controller(rng, ControlSettings(prefill_rivals=rivals))
    assert [_lookup_round(ctrl).drafter for _ in range(6)] == ["lookup"] * 6
    assert ctrl.wants("m", backlog=50, remaining=128) is rivals
    assert not ctrl.wants("m", backlog=2000, remaining=10)  # still priced: a long prompt for a few tokens


@pytest.mark.parametrize("seed", range(4))
def test_a_prefill_is_priced_at_the_measured_prefill_cost_not_a_catch_ups(seed: int) -> None:
    # a catch-up of a few tokens costs 3 ms a token (a decode call's own cost spread over them), a
    # 200-token prefill 0.5 ms a token: a 200-token prompt for 100 new tokens (the draft saves ~2 ms
    # a token) is worth prefilling at the prefill's cost (0.1 s) and would not be at the catch-up's
    # (0.6 s). (At 1 ms a token, 0.2 s, the gain's estimate decides by a hair, seed by seed.)
    ctrl = _winning_model_controller(seed=seed)
    ctrl.choose(drafters=[Candidate("m")], draft_max=8)
    assert not ctrl.wants("m", backlog=200, remaining=100)
    ctrl.begin(prefilled=["m"], prefill={"m": (200, 200 * 0.0005)})
    ctrl.choose(drafters=[Candidate("m")], draft_max=8)
    assert ctrl.wants("m", backlog=200, remaining=100)


def _lookup_prompt(ctrl: DraftController, rng: np.random.Generator, *, look_alpha: float, look_len: int,
                   p_match: float, model_alpha: float, n: int = 128) -> list[str | None]:
    """One prompt with a draft model that imports the target's cache (the default pair) and prompt
    lookup, which has a proposal of `look_len` tokens in a share `p_match` of the rounds."""
    ctrl.begin(prefilled=["m"])
    gen, picks = 0, []
    while gen < n:
        left = n - gen
        match = look_len if rng.random() < p_match else 0
        c = ctrl.choose(drafters=[Candidate("m", kv_shared=True), Candidate("lookup", free=True, match_len=match)],
                        draft_max=min(8, left - 1), remaining=left)
        k = c.draft_len if c.drafter else 0
        alpha = model_alpha if c.drafter == "m" else look_alpha
        acc = _kept(rng, k, alpha)
        jitter = rng.lognormal(0.0, 0.1)
        draft_s = k * 0.42 * A * jitter if c.drafter == "m" else 0.0
        scored = {}
        if c.drafter != "lookup" and match:
            scored["lookup"] = Scored(match, _kept(rng, min(match, acc + 1), look_alpha))
        ctrl.observe(Round(choice=c, drafted=k, accepted=acc, emitted=acc + 1, round_s=_verify(k) * jitter + draft_s,
                     draft_s=draft_s, free=c.drafter == "lookup", scored=scored))
        picks.append(c.drafter)
        gen += acc + 1
    return picks


def test_lookup_that_matched_on_one_prompt_does_not_keep_one_where_its_matches_are_spurious() -> None:
    # two code edits where lookup copies 8 tokens at a time (right 97%), then a summary whose
    # n-grams recur but continue differently (lookup's 6-token proposals right 10%). Lookup is
    # scored every round, so this prompt's own counts must outvote the pooled curve within a few
    # rounds. (With the pooled curve and lookup's realized rate over all generations as the
    # prior of this prompt's, it kept 11-23 rounds of the summary, at 5 seeds.)
    kept = []
    for seed in range(5):
        rng = np.random.default_rng(seed)
        ctrl = DraftController()
        for _ in range(2):
            edit = _lookup_prompt(ctrl, rng, look_alpha=0.97, look_len=8, p_match=0.9, model_alpha=0.85)
            assert edit.count("lookup") > len(edit) / 2  # where it matches, lookup leads
        kept.append(_lookup_prompt(ctrl, rng, look_alpha=0.1, look_len=6, p_match=0.7, model_alpha=0.9).count("lookup"))
    assert max(kept) <= 6 and float(np.mean(kept)) <= 4, kept


def _graded_prompt(ctrl: DraftController, rng: np.random.Generator, *, grades: dict[int, float],
                   model_alpha: float = 0.95, n: int = 128, graded: bool = True) -> tuple[list[tuple[int, str | None]], float]:
    """One prompt of the default pair's shape (a cache-sharing draft model and prompt lookup);
    lookup's proposals (8 tokens) come in grades drawn uniformly, each with its own accept rate.
    `graded` False: the controller is not told the grade. Returns (grade, drafter) per round
    (grade 0: no proposal) and the realized tokens per second."""
    ctrl.begin(prefilled=["m"])
    gen, picks, seconds = 0, [], 0.0
    while gen < n:
        left = n - gen
        g = int(rng.choice(list(grades)))
        match = 8
        c = ctrl.choose(drafters=[Candidate("m", kv_shared=True),
                                  Candidate("lookup", free=True, match_len=match, grade=g if graded else 0)],
                        draft_max=min(8, left - 1), remaining=left)
        k = c.draft_len if c.drafter else 0
        alpha = model_alpha if c.drafter == "m" else grades[g]
        acc = _kept(rng, k, alpha)
        jitter = rng.lognormal(0.0, 0.1)
        draft_s = k * 0.42 * A * jitter if c.drafter == "m" else 0.0
        round_s = _verify(k) * jitter + draft_s
        scored = {}
        if c.drafter != "lookup":
            scored["lookup"] = Scored(match, _kept(rng, min(match, acc + 1), grades[g]), g if graded else 0)
        ctrl.observe(Round(choice=c, drafted=k, accepted=acc, emitted=acc + 1, round_s=round_s, draft_s=draft_s,
                     free=c.drafter == "lookup", scored=scored))
        picks.append((g, c.drafter))
        gen += acc + 1
        seconds += round_s
    return picks, gen / seconds


def test_a_free_drafter_is_judged_per_grade() -> None:
    # lookup's 3-gram matches right 90% a token, its 1-gram ones 10%, half the rounds each: told
    # the grade, the controller drafts with lookup on the 3-gram rounds and with the model on the
    # others, from the second prompt on; not told, it can only average them
    rates: dict[bool, list[float]] = {True: [], False: []}
    picks: list[tuple[int, str | None]] = []
    for seed in range(6):
        for graded in (True, False):
            rng = np.random.default_rng(seed)
            ctrl = DraftController()
            for p in range(3):
                got, tps = _graded_prompt(ctrl, rng, grades={3: 0.9, 1: 0.1}, graded=graded)
                if p > 0:
                    rates[graded].append(tps)
                    picks += got if graded else []
    on3 = [d for g, d in picks if g == 3]
    on1 = [d for g, d in picks if g == 1]
    assert on3.count("lookup") >= 0.8 * len(on3) and on1.count("lookup") <= 0.05 * len(on1)
    assert np.median(rates[True]) > 1.1 * np.median(rates[False]), rates


def test_a_choice_names_the_drafter_and_its_grade() -> None:
    ctrl = DraftController()
    ctrl.observe(Round(choice=Choice(None, 0), drafted=0, accepted=0, emitted=1, round_s=A))
    for _ in range(20):  # a free drafter right every time at grade 2
        c = ctrl.choose(drafters=[Candidate("lookup", free=True, match_len=4, grade=2)], draft_max=8, allow_none=False)
        assert (c.drafter, c.grade) == ("lookup", 2)
        ctrl.observe(Round(choice=c, drafted=c.draft_len, accepted=c.draft_len, emitted=c.draft_len + 1,
                     round_s=_verify(c.draft_len), free=True))


def _shared_round(ctrl: DraftController, accept) -> Choice:
    """One round with a draft model that imports the target's KV cache (`_verify` costs, a draft
    token 0.45 target steps); `accept(k)`: how many of k drafts the target keeps."""
    c = ctrl.choose(drafters=[Candidate("m", kv_shared=True)], draft_max=8, remaining=100)
    k = c.draft_len if c.drafter else 0
    acc = accept(k) if k else 0
    ctrl.observe(Round(choice=c, drafted=k, accepted=acc, emitted=acc + 1, round_s=_verify(k) + k * 0.45 * A,
                 draft_s=k * 0.45 * A))
    return c


def _agreeing(rng: np.random.Generator, alpha: float = 0.96):
    """Each draft kept with probability `alpha` until the first rejection."""
    return lambda k: _kept(rng, k, alpha)


def _shared_warm_controller(rng: np.random.Generator, settings: ControlSettings = ControlSettings()) -> DraftController:
    """Three prompts of 40 rounds at 0.96 a draft (K = 8: 7.7 tokens in 5.4 target steps, 1.42x
    the target alone, as the default pair's 65.7 against 45.3 tok/s on the bench's chat), then a
    new generation."""
    ctrl = DraftController(settings=settings)
    for _ in range(3):
        ctrl.begin(prefilled=[])
        for _ in range(40):
            _shared_round(ctrl, _agreeing(rng))
    ctrl.begin(prefilled=[])
    return ctrl


def test_one_rejected_round_does_not_stop_a_draft_that_pays_elsewhere() -> None:
    # a draft model that imports the target's cache has no opening and no hysteresis (leaving it
    # costs nothing), so a prompt's own rounds decide from its first: they must count as rounds
    # of that source. Counted in target steps, the 8 pseudo-rounds of the pooled rate were 1.5
    # rounds at K = 8, and one first draft rejected put the target alone ahead for the 32 rounds
    # until the retry (the bench's chat-09: 30 of 44 rounds without a draft)
    for seed in range(4):
        rng = np.random.default_rng(seed)
        ctrl = _shared_warm_controller(rng)
        first = _shared_round(ctrl, lambda k: 0)
        assert first.drafter == "m" and first.draft_len >= 4
        picks = [_shared_round(ctrl, _agreeing(rng)).drafter for _ in range(10)]
        assert picks.count("m") >= 9  # (one round may be the target alone's retry, due every 32)


def test_a_draft_rejected_round_after_round_is_left_within_a_few_rounds_and_retried() -> None:
    # ... while a prompt on which every first draft is rejected is left after a few rounds (each
    # costs ~5 target steps for 1 token), and the model is retried within `retry` rounds
    for seed in range(4):
        ctrl = _shared_warm_controller(np.random.default_rng(seed))
        rounds = [_shared_round(ctrl, lambda k: 0) for _ in range(8)]
        picks = [c.drafter for c in rounds]
        # left: the target alone from there on (a retry of the target alone between two rounds
        # of the draft is no verdict against it; one that the rounds after confirm is)
        left = next(i for i in range(len(picks)) if all(p is None for p in picks[i:]))
        assert 2 <= left <= 6
        later = [_shared_round(ctrl, lambda k: 0).drafter for _ in range(ControlSettings().retry + 2)]
        assert "m" in later


def test_the_verify_line_follows_this_machines_measurements_not_the_prior() -> None:
    # the prior (V(K) - a = 0.3 a + 0.2 a K, the 2-core EPYC's) against the 2-core Xeon's measured
    # verify rows, V(K) - a = 0.107 a K: with 8 rounds at K = 4 and at K = 8, the line must price
    # K = 8 within 0.05 a of what was measured there (at prior weight 1 it priced it at 1.02 a
    # against 0.86 a)
    ctrl = DraftController()
    a = 0.024
    ctrl.observe(Round(choice=Choice(None, 0), drafted=0, accepted=0, emitted=1, round_s=a))
    for k in (4, 8) * 8:
        draft_s = k * 0.47 * a
        ctrl.observe(Round(choice=Choice("m", k), drafted=k, accepted=k, emitted=k + 1,
                     round_s=a * (1.0 + 0.107 * k) + draft_s, draft_s=draft_s))
    for k in (4, 6, 8):
        assert abs(ctrl.verify_s(k) - a * (1.0 + 0.107 * k)) < 0.05 * a


def _bent_verify(settings: ControlSettings, *, stale: bool = False, jitter: float = 0.0) -> DraftController:
    """A controller that ran K = 2, 4 and 7 eight times each, every draft kept, on a verify whose
    seconds are not linear in its rows (V(K) - a: 0.4 a at K = 2, 2.4 a at 4 and at 7: a CPU
    kernel's batch shapes), each round's seconds times lognormal(0, `jitter`); with `stale`, then
    `2 retry` rounds of the target alone."""
    ctrl = DraftController(settings=settings)
    rng = np.random.default_rng(7)
    a = 0.05
    ctrl.observe(Round(choice=Choice(None, 0), drafted=0, accepted=0, emitted=1, round_s=a))
    for k in (2, 4, 7) * 8:
        draft_s = k * 0.2 * a
        verify_s = a * (1.4 if k == 2 else 3.4) * rng.lognormal(0.0, jitter)
        ctrl.observe(Round(choice=Choice("m", k), drafted=k, accepted=k, emitted=k + 1,
                     round_s=verify_s + draft_s, draft_s=draft_s))
    for _ in range(2 * settings.retry + 1 if stale else 0):
        ctrl.observe(Round(choice=Choice(None, 0), drafted=0, accepted=0, emitted=1, round_s=a))
    return ctrl


def test_a_verify_measured_at_k_is_priced_as_measured_where_it_stands_out_of_the_noise() -> None:
    # Rule measured_verify. The line through those points prices K = 4 below what it cost and
    # K = 7 above (by ~0.3-0.8 a). Measured lately (>= 2 samples of the last 2 retry rounds) and
    # steady, each K is priced as measured, a K never measured by the line; stale samples give the
    # line back.
    a = 0.05
    on = _bent_verify(ControlSettings())
    off = _bent_verify(ControlSettings(measured_verify=False))
    for k, measured in ((2, 1.4 * a), (4, 3.4 * a), (7, 3.4 * a)):
        assert on.verify_s(k) == pytest.approx(measured)
    assert off.verify_s(4) < 3.2 * a and off.verify_s(7) > 3.6 * a
    assert on.verify_s(6) == pytest.approx(off.verify_s(6))  # never measured: the line
    assert on.round_costs("m", 7)[7] == pytest.approx(3.4 * a + on.draft_cost_s("m", 7))
    stale = _bent_verify(ControlSettings(), stale=True)
    v0, v = stale._verify_line(stale.base_s())
    assert stale.verify_s(7) == pytest.approx(stale.base_s() + v0 + 7 * v)
    # rounds whose seconds scatter by ~40%: the same bend no longer stands out of 8 samples' noise
    # at K = 4 and 7 (0.2-0.5 a from the line, a median's error ~0.5 a): priced nearer the line
    noisy_on = _bent_verify(ControlSettings(), jitter=0.4)
    noisy_off = _bent_verify(ControlSettings(measured_verify=False), jitter=0.4)
    for k in (4, 7):
        measured = noisy_on._recent(noisy_on._verify[k], noisy_on._fresh())
        line = noisy_off.verify_s(k)
        assert abs(noisy_on.verify_s(k) - line) < 0.5 * abs(measured - line)


def _lookup_first_choice(settings: ControlSettings, *, prefill_row: float) -> tuple[float, Choice]:
    """A fresh controller on a compute-bound target (a = 7.7 ms, a prompt token of its prefill
    `prefill_row` a, a verify row 0.58 a: the Q4_1 SmolLM2 on a 2-core EPYC), a 200-token prompt,
    a few rounds of the target alone; then lookup offers 6 tokens it never proposed before (its
    prior curve, 0.6 a token). Returns V(6) as priced and the choice."""
    a = 0.0077
    ctrl = DraftController(settings=settings)
    ctrl.begin(target_prefill=(200, 200 * prefill_row * a))
    for _ in range(4):
        ctrl.choose(drafters=[], draft_max=8)
        ctrl.observe(Round(choice=Choice(None, 0), drafted=0, accepted=0, emitted=1, round_s=a))
    c = ctrl.choose(drafters=[Candidate("lookup", free=True, match_len=6)], draft_max=8)
    return ctrl.verify_s(6) / a, c


def test_a_verify_row_is_priced_no_cheaper_than_a_token_of_the_targets_prefill() -> None:
    # Rule prefill_slope. Before any verify is measured the line is its prior, 0.2 a a row: on
    # this target (0.58 a a row) a fresh controller priced lookup's first 6-token proposal at
    # 2.5 a against the 4.8 a it costs, and took it (the Q4_1 grid's first lookup rounds: 0.2-0.3
    # of the target alone's tokens a second). With the prefill's 0.40 a a token as the floor of the
    # prior slope, it is priced at 3.7 a and the target alone runs.
    on, off = ControlSettings(), ControlSettings(prefill_slope=False)
    v_on, c_on = _lookup_first_choice(on, prefill_row=0.40)
    v_off, c_off = _lookup_first_choice(off, prefill_row=0.40)
    assert v_off == pytest.approx(1.0 + 0.3 + 0.2 * 6)
    assert v_on == pytest.approx(1.0 + 0.3 + 0.40 * 6)
    assert c_off.drafter == "lookup" and c_on.drafter is None
    # where a prefill token is cheaper than the prior's row (an F32 target, any GPU) nothing changes
    v_cheap, c_cheap = _lookup_first_choice(on, prefill_row=0.08)
    assert v_cheap == pytest.approx(v_off) and c_cheap == c_off


def _first_call_sim(ctrl: DraftController, rounds: int, *, alpha: float, f: float, b: float, a: float,
                    rng: np.random.Generator, tell_first: bool = True) -> list[int]:
    """Rounds of one draft model whose K calls cost f + K b (the first call imports the target's
    cache and decodes 1-2 rows: f more than the others) and a verify of K + 1 rows a (1 + 0.107 K)
    (the 2-core Xeon's); returns the K of each round that drafted."""
    ks = []
    for _ in range(rounds):
        c = ctrl.choose(drafters=[Candidate("m", kv_shared=True)], draft_max=8)
        k = c.draft_len if c.drafter is not None else 0
        acc = _kept(rng, k, alpha)
        jitter = rng.lognormal(0.0, 0.05)
        first = (b + f) * jitter
        draft_s = (f + k * b) * jitter if k else 0.0
        ctrl.observe(Round(choice=c, drafted=k, accepted=acc, emitted=acc + 1,
                     round_s=a * (1.0 + 0.107 * k) * jitter + draft_s, draft_s=draft_s,
                     draft_first_s=first if k and tell_first else None, draft_calls=k))
        if k:
            ks.append(k)
    return ks


def test_a_draft_models_first_call_is_priced_once_a_round_not_per_token() -> None:
    # The Q4_1 draft on the 2-core Xeon: K tokens cost f + K b, f = 4.9 ms (the cache import and a
    # 2-row first decode), b = 10.1 ms; the target a = 23.3 ms, accept rate 0.92. Told which part of
    # a round's draft seconds was its first call, the controller prices every K within 3%, at
    # whatever K it drafted. Priced per drafted token (draft seconds over K at the K in use, ~4.5
    # here) it put K = 1 at 11.2 ms (-25%) and K = 8 at 3-5% too dear: short rounds too cheap, long
    # ones too dear, and at this accept rate the K it chose then was 3, not the best 4 (1% slower).
    a, f, b, alpha = 0.0233, 0.0049, 0.0101, 0.92
    for seed in range(3):
        ctrl = DraftController()
        ks = _first_call_sim(ctrl, 300, alpha=alpha, f=f, b=b, a=a, rng=np.random.default_rng(seed))
        assert len(set(ks)) >= 3  # it drafted at several K (and priced the others from them)
        for k in (1, 2, 4, 8):
            assert ctrl.draft_cost_s("m", k) == pytest.approx(f + k * b, rel=0.03)
    # not told (a drafter that reports no first call): per drafted token, as before
    ctrl = DraftController()
    ks = _first_call_sim(ctrl, 300, alpha=alpha, f=f, b=b, a=a, rng=np.random.default_rng(0), tell_first=False)
    assert ctrl.draft_cost_s("m", 1) < 0.9 * (f + b)  # the first call's extra spread over K tokens
    assert ctrl.draft_cost_s("m", 8) > 1.02 * (f + 8 * b)


def _continued_sim(ctrl: DraftController, rounds: int, *, alpha: float, a: float, b: float, ext: int,
                   rng: np.random.Generator) -> tuple[list[int], float]:
    """Rounds of one draft model (K drafts kept with `alpha` each, b a draft, a verify of n rows
    a (1 + 0.107 (n - 1))) whose every full proposal lookup continues by `ext` tokens, all right
    (copied text the model leads into); returns (the K of each drafting round, tokens a second)."""
    ks, tokens, seconds = [], 0, 0.0
    for _ in range(rounds):
        c = ctrl.choose(drafters=[Candidate("m", kv_shared=True)], draft_max=8)
        k = c.draft_len if c.drafter is not None else 0
        kept = _kept(rng, k, alpha)
        e = ext if k else 0
        accepted = kept + (e if kept == k else 0)  # the continuation is judged where the drafts all were
        round_s = a * (1.0 + 0.107 * (k + e)) + b * k
        ctrl.observe(Round(choice=c, drafted=k + e, accepted=accepted, emitted=accepted + 1, round_s=round_s,
                           draft_s=b * k, draft_calls=k, extended=e, extended_by="lookup" if e else None,
                           extended_grade=3 if e else 0))
        tokens, seconds = tokens + accepted + 1, seconds + round_s
        if k:
            ks.append(k)
    return ks, tokens / seconds


def test_a_model_whose_full_proposals_lookup_continues_drafts_short() -> None:
    # A draft step of 0.15 a, accept rate 0.8: alone its best K is 3 (E(K) / T(K)). But lookup continues
    # each of its full proposals by 4 right tokens, which cost verify rows only: K = 1 then makes
    # 5.0 tokens in 1.69 a where K = 3 makes 5.0 in 2.20 a. Rule extend_k prices the continuation.
    a, b, alpha = 0.02, 0.003, 0.8
    for seed in range(3):
        runs = {}
        for on in (True, False):
            ctrl = DraftController(settings=ControlSettings(extend_k=on))
            ks, rate = _continued_sim(ctrl, 400, alpha=alpha, a=a, b=b, ext=4, rng=np.random.default_rng(seed))
            runs[on] = (sum(k == 1 for k in ks[100:]) / len(ks[100:]), rate)
        assert runs[True][0] > 0.8 and runs[False][0] < 0.2, runs  # K = 1 with the rule, 3 without
        assert runs[True][1] > 1.15 * runs[False][1], runs  # 2.96 / a against 2.27 / a


def _lookup_round(ctrl: DraftController, *, backlog: int = 0, kv_shared: bool = True, right: bool = True,
                  check_s: float = 0.0) -> Choice:
    """A round offered a draft model `m` (0.45 target steps a draft) and lookup's 8-token grade-3
    proposal (right throughout or wrong at its first token): a checked lookup choice runs as the
    engine runs it (kept where right, the model's round where wrong)."""
    c = ctrl.choose(drafters=[Candidate("m", backlog=backlog, kv_shared=kv_shared),
                              Candidate("lookup", free=True, match_len=8, grade=3)], draft_max=8, remaining=100)
    look = Scored(8, 8 if right else 0, 3)
    if c.drafter == "lookup" and (right or c.check is None):
        acc = 8 if right else 0
        ctrl.observe(Round(choice=c, drafted=8, accepted=acc, emitted=acc + 1, round_s=_verify(8) + check_s, free=True,
                     check_s=check_s if c.check else 0.0))
    else:
        ran = c if c.drafter != "lookup" else Choice("m", c.check_len)
        k = ran.draft_len if ran.drafter else 0
        ctrl.observe(Round(choice=ran, drafted=k, accepted=k, emitted=k + 1, round_s=_verify(k) + k * 0.45 * A,
                     draft_s=k * 0.45 * A, scored={"lookup": look} if k or ran.drafter is None else None))
    return c


def test_a_free_drafter_that_turns_right_is_taken_within_a_few_rounds_of_a_clear_model_choice() -> None:
    # lookup wrong all through one prompt (its grade 3 priced low, the model the clear choice),
    # then right every round of the next: scored every round (full information), it is taken
    # within a few rounds. A hold of the model's choice that trusted lookup's rate as last priced
    # (rule `hold_model`, removed) kept the model up to 8 rounds here, and on the gemma pair's copy
    # prompts 9 rounds (docs/bench/controller.md)
    rng = np.random.default_rng(0)
    ctrl = _shared_warm_controller(rng)
    for _ in range(20):
        _lookup_round(ctrl, right=False)
    ctrl.begin(prefilled=[])
    picks = [_lookup_round(ctrl).drafter for _ in range(8)]
    assert "lookup" in picks[:4], picks
    assert picks[4:].count("lookup") >= 3, picks


def test_a_free_drafters_first_proposals_of_a_generation_are_checked_by_the_draft_model() -> None:
    # lookup right every round of a first prompt: on the next, its grade-3 proposals are chosen,
    # and the first `check_rounds` of them carry the model that checks their first token (at the
    # K the model would run); once this generation has judged that many, lookup runs unchecked.
    # (The schedule, whatever a check pays: rule `check_pricing` off; it is the next test's.)
    rng = np.random.default_rng(0)
    ctrl = _shared_warm_controller(rng, ControlSettings(check_pricing=False))
    for _ in range(20):
        _lookup_round(ctrl)
    ctrl.begin(prefilled=[])
    picks = [_lookup_round(ctrl) for _ in range(6)]
    assert all(c.drafter == "lookup" for c in picks)
    k_model = ctrl.best_len("m", lo=1, cap=8)
    assert k_model is not None and k_model[0] >= 6
    assert [c.check for c in picks] == ["m"] * ControlSettings().check_rounds + [None] * (6 - ControlSettings().check_rounds)
    assert all(c.check_len == k_model[0] for c in picks[:3])
    # scored proposals count as judged too: where the model ran the first rounds, none is left to check
    ctrl.begin(prefilled=[])
    for _ in range(3):
        _shared_round(ctrl, _agreeing(rng))
        ctrl.observe(Round(choice=Choice("m", 8), drafted=8, accepted=8, emitted=9, round_s=_verify(8) + 8 * 0.45 * A,
                     draft_s=8 * 0.45 * A, scored={"lookup": Scored(8, 8, 3)}))
    assert _lookup_round(ctrl).check is None


def test_a_check_runs_only_where_it_pays() -> None:
    # rule `check_pricing`: a proposal whose first draft the target keeps almost always (lookup
    # right every round before) is not checked: each check would be a model call that agrees;
    # one right 60% of the time is (a disagreeing check turns a lost round into the model's).
    # Priced by the verify line (rule measured_verify off): this model's verify is linear, and
    # what its K = 8 rounds measured, 2% under the line, puts the 60% case at the check's
    # break-even, checked or not by the seed
    for right, checked in ((1.0, False), (0.6, True)):
        rng = np.random.default_rng(0)
        ctrl = _shared_warm_controller(rng, ControlSettings(measured_verify=False))
        for _ in range(20):
            _lookup_round(ctrl, right=rng.random() < right)
        ctrl.begin(prefilled=[])
        picks = [_lookup_round(ctrl, right=rng.random() < right) for _ in range(6)]
        assert any(c.drafter == "lookup" for c in picks)
        assert any(c.check == "m" for c in picks) is checked, (right, picks)


def test_no_check_without_a_draft_model_in_step_or_when_switched_off() -> None:
    for settings, backlog, kv_shared in ((ControlSettings(), 30, False), (ControlSettings(check_rounds=0), 0, True)):
        ctrl = DraftController(settings=settings)
        ctrl.observe(Round(choice=Choice(None, 0), drafted=0, accepted=0, emitted=1, round_s=A))
        for _ in range(30):
            _lookup_round(ctrl, backlog=backlog, kv_shared=kv_shared)
        ctrl.begin(prefilled=[])
        c = _lookup_round(ctrl, backlog=backlog, kv_shared=kv_shared)
        assert c.drafter == "lookup" and c.check is None
    lone = DraftController()  # lookup alone: nothing to check with
    lone.observe(Round(choice=Choice(None, 0), drafted=0, accepted=0, emitted=1, round_s=A))
    c = lone.choose(drafters=[Candidate("lookup", free=True, match_len=8, grade=3)], draft_max=8)
    assert c.check is None


def test_a_checks_seconds_are_the_sources_cost_not_the_verifys() -> None:
    # the same rounds told with and without a check's seconds: the verify line is the same, and
    # lookup's realized rate pays for the check
    plain, checked = DraftController(), DraftController()
    for ctrl, check_s in ((plain, 0.0), (checked, 0.4 * A)):
        ctrl.observe(Round(choice=Choice(None, 0), drafted=0, accepted=0, emitted=1, round_s=A))
        for _ in range(6):
            ctrl.observe(Round(choice=Choice("lookup", 8, grade=3, check="m", check_len=8), drafted=8, accepted=8, emitted=9,
                         round_s=_verify(8) + check_s, free=True, check_s=check_s))
    assert checked.verify_s(8) == pytest.approx(plain.verify_s(8))
    rate = {n: c.throughput("lookup#3", None) for n, c in (("plain", plain), ("checked", checked))}
    assert rate["checked"] == pytest.approx(rate["plain"] * _verify(8) / (_verify(8) + 0.4 * A), rel=1e-6)


def test_lookups_continuation_of_a_full_model_draft_is_appended_as_far_as_it_pays() -> None:
    # a model kept whole at K = 8 (9 tokens in V(8) + 8 b: 1.66 tokens a target step), and lookup's
    # grade-3 continuations of its drafts (4 tokens appended each round) kept `right` tokens: the
    # continuation's curve is learned from those rounds, and a token is appended while
    # pi_model(8) * pi(e) / R pays for a verify row (0.06 a here, so while pi(e) >= ~0.1)
    def warm(model_kept: int, right: int) -> DraftController:
        ctrl = DraftController()
        ctrl.observe(Round(choice=Choice(None, 0), drafted=0, accepted=0, emitted=1, round_s=_verify(0)))
        for _ in range(30):
            acc = model_kept + (right if model_kept == 8 else 0)
            ctrl.observe(Round(choice=Choice("m", 8), drafted=12, accepted=acc, emitted=acc + 1,
                         round_s=_verify(12) + 8 * 0.45 * A, draft_s=8 * 0.45 * A,
                         extended=4, extended_by="lookup", extended_grade=3))
        return ctrl

    ctrl = warm(8, 2)
    assert ctrl.extend("m", draft_len=8, free="lookup", grade=3, match_len=4) == 2
    assert ctrl.extend("m", draft_len=8, free="lookup", grade=3, match_len=1) == 1
    assert warm(8, 4).extend("m", draft_len=8, free="lookup", grade=3, match_len=4) == 4
    assert warm(8, 0).extend("m", draft_len=8, free="lookup", grade=3, match_len=4) == 0
    # a model rarely kept whole: its continuation is seldom judged, and seldom worth a row
    assert warm(1, 4).extend("m", draft_len=8, free="lookup", grade=3, match_len=4) == 0
    # a grade never appended: the prior curve (alpha0 = 0.6 a token; 0.6^4 = 0.13 still pays a
    # row this cheap), and at the default pair's costs (v = 0.17 a, 1.5 tokens a step) two tokens
    assert ctrl.extend("m", draft_len=8, free="lookup", grade=2, match_len=4) == 4
    # this generation's counts decide, the pooled curve their prior: a new prompt on which the
    # continuation is kept whole appends all of it after 3 rounds
    ctrl.begin(prefilled=[])
    for _ in range(3):
        ctrl.observe(Round(choice=Choice("m", 8), drafted=12, accepted=12, emitted=13, round_s=_verify(12) + 8 * 0.45 * A,
                     draft_s=8 * 0.45 * A, extended=4, extended_by="lookup", extended_grade=3))
    assert ctrl.extend("m", draft_len=8, free="lookup", grade=3, match_len=4) == 4


def test_on_a_cuda_graph_an_extension_is_priced_by_its_rows_alone() -> None:
    # rule switch_cost measures S, what a change of the target's rows costs on a CUDA graph; an
    # extension does not pay it (rule extend_switch, removed: on the H200 it lost 1.1% in lockstep)
    def warm(switch_cost: bool, back_s: float) -> DraftController:
        ctrl = DraftController(settings=ControlSettings(switch_cost=switch_cost))
        for _ in range(3):
            ctrl.observe(Round(choice=Choice(None, 0), drafted=0, accepted=0, emitted=1, round_s=_verify(0)))
        for _ in range(30):
            ctrl.observe(Round(choice=Choice("m", 8), drafted=12, accepted=12, emitted=13,
                         round_s=_verify(12) + 8 * 0.45 * A, draft_s=8 * 0.45 * A,
                         extended=4, extended_by="lookup", extended_grade=3))
        for extra in (back_s, back_s, 0.0, 0.0):  # back to one row: two rounds without the graph
            ctrl.observe(Round(choice=Choice(None, 0), drafted=0, accepted=0, emitted=1, round_s=_verify(0) + extra))
        return ctrl

    for switch_cost in (False, True):
        for back_s in (0.0, 0.01 * A, 10 * A):  # 10 steps a: 4 tokens kept whole are worth less than S
            assert warm(switch_cost, back_s).extend("m", draft_len=8, free="lookup", grade=3, match_len=4) == 4


def test_an_extended_rounds_extra_rows_are_verify_rows_not_the_models_drafts() -> None:
    # a round of 8 model drafts and 3 tokens of lookup's continuation, all kept: the model's curve
    # counts 8 positions, the verify line a sample at 11 rows, the draft cost 8 tokens
    ctrl = DraftController()
    ctrl.observe(Round(choice=Choice(None, 0), drafted=0, accepted=0, emitted=1, round_s=A))
    ctrl.observe(Round(choice=Choice("m", 8), drafted=11, accepted=11, emitted=12, round_s=_verify(11) + 8 * 0.45 * A,
                 draft_s=8 * 0.45 * A, extended=3))
    m = ctrl._drafters["m"]
    assert len(m.drafted_at) == 8 and m.accepted_at == m.drafted_at
    assert list(ctrl._verify) == [11] and len(ctrl._verify[11]) == 1
    assert ctrl.per_token_s("m") == pytest.approx(0.45 * A)


def test_a_draft_that_cannot_pay_even_fully_accepted_is_left_and_rarely_retried() -> None:
    # a draft step dearer than the target's (a 135M pair on a GPU is close): every draft accepted, a round
    # of K still costs more than K + 1 target steps, so no acceptance can make it pay
    a = 0.010
    hopeless = Sim(b=1.5 * a, alpha=1.0)
    ctrl = DraftController()
    choices, _ = simulate(ctrl, 1000, a=a, drafters={"m": hopeless}, rng=np.random.default_rng(0))
    ran = [i for i, c in enumerate(choices) if c.drafter == "m"]
    late = [i for i in ran if i >= 200]
    # after the first measurements, retries at least retry x spacing rounds apart
    assert all(j - i >= ctrl.settings.retry * ctrl.settings.spacing for i, j in zip(late, late[1:]))
    assert len(late) <= 800 / (ctrl.settings.retry * ctrl.settings.spacing) + 1
    assert not ctrl.wants("m", backlog=100, remaining=128)  # nor prefilled with the next prompt
    # the same costs with a draft step that can pay: drafted most rounds
    ctrl = DraftController()
    choices, _ = simulate(ctrl, 300, a=a, drafters={"m": Sim(b=0.2 * a, alpha=0.9)}, rng=np.random.default_rng(0))
    assert share(choices[100:], "m") > 0.8


@pytest.mark.parametrize("seed", range(2))
def test_a_clear_choice_of_the_target_alone_holds_without_re_estimating(seed: int) -> None:
    # where every K loses clearly, most rounds reuse the last choice (rule `hold`) instead of
    # pricing every source again, and the retries still come: the choices are the re-estimating
    # controller's until a retry that it ran (a hold ends before a retry falls due at the interval
    # it saw; one that a changed interval brings forward waits for its end, and a hopeless
    # model's interval moves with the measured costs), and as many retries run, give or take one
    class Counted(DraftController):  # (compiled, a method cannot be replaced on an instance)
        priced = 0

        def best_len(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            self.priced += 1
            return super().best_len(*args, **kwargs)

    def run(hold: int) -> tuple[list, int]:
        ctrl = Counted(settings=ControlSettings(hold=hold))
        bad = Sim(b=0.012, alpha=0.5)  # 0.7x at its best K: a clear loss
        choices, _ = simulate(ctrl, 400, a=0.010, drafters={"m": bad}, rng=np.random.default_rng(seed))
        return [(c.drafter, c.draft_len) for c in choices], ctrl.priced

    held, priced_held = run(8)
    every, priced_every = run(0)
    first = next((i for i, (x, y) in enumerate(zip(held, every)) if x != y), None)
    assert first is None or every[first][0] == "m", first
    drafted = [i for i, (d, _) in enumerate(held) if d is not None]
    assert abs(len(drafted) - sum(d is not None for d, _ in every)) <= 1, drafted
    assert priced_held < 0.5 * priced_every, (priced_held, priced_every)


@pytest.mark.parametrize("seed", range(3))
def test_held_rounds_observed_later_leave_the_choices_and_estimates_as_observed_at_once(seed: int) -> None:
    # a held round's bookkeeping is queued and replayed at the next read of the estimates: the
    # same choices round after round and the same estimates as a controller that observes each
    # round when it ends (with lookup's proposals scored in the held rounds), generations included
    class Counted(DraftController):  # (compiled, a method cannot be replaced on an instance)
        def __init__(self, *, defer: bool) -> None:
            super().__init__()
            self.defer, self.queued = defer, 0

        def _defers(self, r):  # type: ignore[no-untyped-def]
            return super()._defers(r) if self.defer else False

        def replay(self) -> None:
            self.queued += len(self._pending)
            super().replay()

    def run(defer: bool) -> tuple[list, list, int]:
        ctrl = Counted(defer=defer)
        rng, choices = np.random.default_rng(seed), []
        for _ in range(3):
            ctrl.begin()
            got, _ = simulate(ctrl, 150, a=0.010, drafters={"m": Sim(b=0.012, alpha=0.5),
                                                             "lookup": Sim(b=0.0, alpha=0.3, free=True, p_match=0.3)},
                              rng=rng)
            choices += [(c.drafter, c.draft_len, c.retry) for c in got]
        state = [ctrl.base_s(), ctrl.verify_s(4), ctrl.draft_cost_s("m", 4), ctrl.round,
                 ctrl.prefix_accept("lookup", 4), ctrl.throughput("m", None), ctrl.throughput("none", None)]
        return choices, state, ctrl.queued

    later, later_state, queued = run(True)
    now, now_state, none_queued = run(False)
    assert later == now
    assert later_state == now_state
    assert none_queued == 0 and queued > 200, queued  # most rounds held, their bookkeeping queued


# ---- a CPU target whose first verify row costs most of a step -------------------------------------
#
# A target on a CPU's batched kernels (the smollm2-as-1b stand-in on 2 cores: a = 47-53 ms, two
# rows 85-91 ms, nine 185-234 ms) against a draft model that does not share its cache: K = 1 can
# never pay, K = 8 pays where the draft agrees 90% of the time or more.


def _first_row_dear(k: int) -> float:
    return A * (2.1 + 0.05 * k) if k else A


def test_a_model_is_judged_for_the_next_prompt_at_its_own_K_not_at_the_generations_tail() -> None:
    # the last rounds of a generation cap K at the tokens left (draft_max = remaining - 1). Judged
    # there, at K = 1, the model's ceiling 2 / T(1) is under the target alone's rate, and a model
    # that had led the whole prompt (every draft kept: 2.7x) was called hopeless and not
    # prefilled with the next prompt (on the stand-in, for four prompts of 128 tokens)
    ctrl = DraftController()
    run_prompt(ctrl, 1.0, np.random.default_rng(0), verify=_first_row_dear, b=0.1 * A)
    assert ctrl.ceiling_rate("m", lo=1, cap=1) < 1 / A < ctrl.ceiling_rate("m", lo=1, cap=8)
    c = ctrl.choose(drafters=[Candidate("m", backlog=1)], draft_max=1, remaining=2)  # the last round
    k = c.draft_len
    ctrl.observe(Round(choice=c, drafted=k, accepted=k, emitted=k + 1, round_s=_first_row_dear(k) + 0.1 * A * k,
                       draft_s=0.1 * A * k))
    assert ctrl.wants("m", backlog=40, remaining=128)


def _cold_start(settings: ControlSettings, *, prompts: int = 3) -> list[int]:
    """A fresh controller on `prompts` prompts where the draft agrees 95% of the time (K = 8: ~1.8x
    the target alone at `_first_row_dear` costs), but whose first 3 drafted rounds are all rejected
    (a cold start's bad luck); the model's rounds of each prompt."""
    ctrl, rng = DraftController(settings=settings), np.random.default_rng(1)
    runs, bad = [], 3
    for _ in range(prompts):
        prefilled = ctrl.wants("m", backlog=100, remaining=128)
        ctrl.begin(prefilled=["m"] if prefilled else [])
        backlog, gen, n = (0 if prefilled else 100), 0, 0
        while gen < 128:
            left = 128 - gen
            c = ctrl.choose(drafters=[Candidate("m", backlog=backlog)], draft_max=min(8, left - 1), remaining=left)
            k = c.draft_len if c.drafter else 0
            acc = 0
            if k and bad:
                bad -= 1
            else:
                while acc < k and rng.random() < 0.95:
                    acc += 1
            caught = backlog if c.drafter and backlog > SYNCED else 0
            ctrl.observe(Round(choice=c, drafted=k, accepted=acc, emitted=acc + 1,
                               round_s=_first_row_dear(k) + k * 0.1 * A, draft_s=k * 0.1 * A,
                               catchup_tokens=caught, catchup_s=caught * 0.05 * A))
            n += c.drafter is not None
            backlog = (SYNCED if acc == k else 1) if c.drafter else backlog + acc + 1
            gen += acc + 1
        runs.append(n)
    return runs


def test_a_cold_starts_bad_luck_does_not_decide_for_prompts_on_end() -> None:
    # rule `unsettled`: a model run fewer than retry / 2 rounds is judged by a few rounds' luck, so
    # its retry is priced with the prior's optimism (here: alpha0 = 0.8 at K = 8, 1.4x the target
    # alone) against the catch-up, and prefilled with the next prompt once due. Without it the
    # model, behind after its 3 rejected openings, was never retried: its catch-up "did not pay"
    # at the estimate those 3 rounds made, for this prompt and the next ones
    off = _cold_start(ControlSettings(unsettled=False))
    on = _cold_start(ControlSettings())
    assert off == [3, 0, 0]
    assert on[0] > 3 and min(on[1:]) >= 10


def _slow_start_sim(ctrl: DraftController, rounds: int, *, rng: np.random.Generator, allow_none: bool,
                    slow: int = 2, slow_b: float = 0.021) -> list[int]:
    """The 7B stand-in on the H200 (a = 7.32 ms, 0.82 ms a verify row, a draft step b = 1.17 ms
    after a first call of 2.42): the first `slow` rounds that make later draft calls cost `slow_b`
    more a call (a first use, a busy moment); returns each round's K (0: the target alone)."""
    a, v, f, b, alpha = 0.00732, 0.00082, 0.00242, 0.00117, 0.9
    ks = []
    for _ in range(rounds):
        c = ctrl.choose(drafters=[Candidate("m", kv_shared=True)], draft_max=8, allow_none=allow_none)
        k = c.draft_len if c.drafter is not None else 0
        acc = _kept(rng, k, alpha)
        jitter = rng.lognormal(0.0, 0.05)
        later = b + (slow_b if k >= 2 and slow > 0 else 0.0)
        slow -= k >= 2
        first = f * jitter
        draft_s = (f + (k - 1) * later) * jitter if k else 0.0
        ctrl.observe(Round(choice=c, drafted=k, accepted=acc, emitted=acc + 1,
                           round_s=(a + v * k) * jitter + draft_s, draft_s=draft_s,
                           draft_first_s=first if k else None, draft_calls=k))
        ks.append(k)
    return ks


@pytest.mark.parametrize("allow_none", [True, False])
def test_one_slow_start_of_the_draft_does_not_hold_k_1_or_the_target_alone(allow_none: bool) -> None:
    # The fourth H200 run's first generation of the draft model under a fresh controller ran K = 1
    # in 59 of 65 rounds (157 tok/s; K = 8 and 294 in the next repeat). A slow measurement of b (a
    # draft call after a round's first) makes K = 1 the best length, and K = 1 never measures b
    # again; where it makes every K lose, the model is judged hopeless for D(8) / (1% a) rounds.
    # Rule probe_b: K probes and retries draft >= 2 tokens, come every 4 n rounds while b was
    # measured n < 4 times (always-draft's one candidate too), b from so few is their fastest, and
    # a model judged on one measurement of b is retried every retry x spacing rounds
    def tail_ks(probe_b: bool, seed: int) -> list[int]:
        ctrl = DraftController(settings=ControlSettings(probe_b=probe_b))
        return _slow_start_sim(ctrl, 400, rng=np.random.default_rng(seed), allow_none=allow_none)[-100:]

    # (K = 3..8 are within 6% of the best here, K = 6; K = 1 is 0.71 of it, the target alone 0.54)
    for seed in range(3):
        ks = tail_ks(True, seed)
        assert sum(k >= 3 for k in ks) > 90, ks
    stuck = [tail_ks(False, seed) for seed in range(3)]
    assert any(sum(k >= 3 for k in ks) < 10 for ks in stuck), stuck  # (the failure the rule removes)


def _first_rounds(settings: ControlSettings, *, slow_first: float, rounds: int = 60) -> str:
    """A fresh controller and a draft model that loses (the target's own weights as draft: a draft
    token costs a, every draft kept; a verify of K drafts a (2 + 0.45 (K - 1)), the Q4_1 SmolLM2 on
    a 2-core EPYC: K = 8 delivers 9 tokens in 13.2 a, 0.68 x the target alone); the process's first
    round of the target alone `slow_first` times its cost. Each round's K, '.' the target alone."""
    a = 0.008
    ctl = DraftController(settings=settings)
    ctl.begin(prefilled=["m"])
    out = []
    for i in range(rounds):
        c = ctl.choose(drafters=[Candidate("m", kv_shared=True)], draft_max=8)
        k = c.draft_len if c.drafter else 0
        round_s = a * (2.0 + 0.45 * (k - 1)) + k * a if k else a * (slow_first if i == 0 else 1.0)
        ctl.observe(Round(choice=c, drafted=k, accepted=k, emitted=k + 1, round_s=round_s, draft_s=k * a,
                          draft_first_s=a if k else None, draft_calls=k))
        out.append(str(k) if k else ".")
    return "".join(out)


@pytest.mark.parametrize("slow_first", [1.0, 1.5, 2.0])
def test_one_slow_first_round_does_not_set_a_for_a_retry_interval(slow_first: float) -> None:
    # Rule calibrate. With a measured by one round, a first round 1.5x slow priced the target alone
    # at 1 / 1.5 a and this losing draft ran 32 rounds on end, at 2x all 60 (in the q4_1 regime's
    # lockstep A/B, once in ~140 fresh controllers: the draft model in 35 of 36 rounds over three
    # prompts, 0.63x the target alone). Where a drafter leads by less than 1.5x on one sample of a,
    # a second comes first now (a is the faster): the draft runs its opening and a round, no more
    # (stalls up to ~2.2x here: the draft's 0.68x times the stall stays under 1.5x).
    rounds = _first_rounds(ControlSettings(), slow_first=slow_first)
    assert sum(c != "." for c in rounds) <= 4 and rounds.endswith("." * 50), rounds
    if slow_first >= 1.5:
        off = _first_rounds(ControlSettings(calibrate=1), slow_first=slow_first)
        assert sum(c != "." for c in off) >= 30, off


def test_a_drafter_that_wins_clearly_does_not_wait_for_a_second_sample_of_a() -> None:
    # Rule calibrate's cost where drafting pays: a draft that leads by more than 1.5x on the first
    # sample of a runs on without a second round of the target alone (a second one cost a fresh
    # controller's first generation 1.4% on the default pair: 0.986 [0.974-0.999], 24 passes)
    ctl = DraftController()
    a, b = 0.020, 0.002  # a cheap draft that keeps every token: ~3-4x the target alone
    picks = []
    for _ in range(40):
        c = ctl.choose(drafters=[Candidate("m", kv_shared=True)], draft_max=8)
        k = c.draft_len if c.drafter else 0
        ctl.observe(Round(choice=c, drafted=k, accepted=k, emitted=k + 1, round_s=a * (1.0 + 0.1 * k) + k * b,
                          draft_s=k * b, draft_first_s=b if k else None, draft_calls=k))
        picks.append(k)
    assert picks[0] == 0 and all(picks[1:32]), picks
