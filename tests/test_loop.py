"""The draft/verify loop on pure-Python fake models (tests/fakes.py): no llama.cpp, no weights.

Greedy output is checked against an independent reference (an argmax loop written here, not
ggufspec's loop with K = 0), so a bug in shared code cannot cancel out; sampled output against
the exact distribution of the target alone, enumerated; the draft controller against a simulated clock.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hst
from fakes import CudaGraph, FakeClock, FakeModel, FakeVocab, assert_follows, greedy_reference, letters_vocab, ngram_lm

from ggufspec.errors import UserError
from ggufspec.loop import clock
from ggufspec.loop.acceptance import AcceptRule, Variant
from ggufspec.loop.control import ControlSettings, DraftController
from ggufspec.loop.drafters import Draft, SharedPrefix, common_prefix
from ggufspec.loop.model_drafter import ModelDrafter
from ggufspec.loop.lookup import LookupDrafter
from ggufspec.loop.engine import Generation, generate
from ggufspec.loop.rounds import Choice, Round, Source
from ggufspec.loop.sampling import SamplingSettings, probabilities
from ggufspec.loop.speculation import DraftLengthSettings, SpeculativeSettings

V = 40
VOCAB = letters_vocab(V)


@pytest.fixture(autouse=True)
def fake_clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    c = FakeClock()
    monkeypatch.setattr(clock, "now", c.now)
    return c


def pair(*, seed: int = 0, noise: float = 0.6, n_ctx: int = 256, vocab: FakeVocab = VOCAB, n_vocab: int = V,
         fake_clock: FakeClock | None = None, draft_cost: float = 0.002, order: int = 2):
    """A fake target and a fake draft model that agrees with it more or less (noise)."""
    t_lm = ngram_lm(n_vocab=n_vocab, seed=seed, order=order)
    d_lm = ngram_lm(n_vocab=n_vocab, seed=seed, order=order, noise=noise)
    target = FakeModel(t_lm, vocab, n_ctx=n_ctx, clock=fake_clock)
    draft = FakeModel(d_lm, vocab, n_ctx=n_ctx, clock=fake_clock, t_1=draft_cost, t_row=draft_cost / 4)
    return target, draft


def spec(draft_max: int = 4, *, fixed: bool = False, always_draft: bool = False, draft_extend: int = 4,
         **kw) -> SpeculativeSettings:
    return SpeculativeSettings(length=DraftLengthSettings(draft_max=draft_max, fixed=fixed, always_draft=always_draft,
                                                          draft_extend=draft_extend), **kw)


def check_caches(gen: Generation, target: FakeModel, draft: FakeModel | None, prompt: Sequence[int]) -> None:
    history = [*prompt, *gen.tokens]
    # the target's cache holds the history but its last token (decoded with the next round)
    assert target.kv == history[: len(target.kv)] and len(target.kv) >= len(history) - 1 - 8
    if gen.stats.stop_reason in ("length", "eog", "stop", "context"):
        assert target.kv == history[:-1]
    if draft is not None:
        assert draft.kv == history[: len(draft.kv)]  # the draft never keeps a rejected token


# ---- greedy: token-identical to the target alone ----------------------------------------------


@pytest.mark.parametrize("drafter_kind", ["model", "lookup"])
def test_greedy_equals_an_independent_reference(drafter_kind: str, fake_clock: FakeClock) -> None:
    configs = list(itertools.product((1, 2, 3, 8), (True, False), (True, False)))
    accepted = 0
    for seed in range(12):
        target, draft = pair(seed=seed, fake_clock=fake_clock)
        prompt = [seed % V, (3 * seed + 1) % V, 5]
        ref = greedy_reference(target.lm, VOCAB, prompt, max_tokens=48, n_ctx=target.n_ctx)
        for draft_max, fixed, always in configs:
            drafter = ModelDrafter(draft) if drafter_kind == "model" else LookupDrafter()
            gen = generate(target=target, prompt=prompt, drafters=[drafter], max_tokens=48,
                           speculative=spec(draft_max, fixed=fixed, always_draft=always)).run()
            assert gen.tokens == ref, (seed, draft_max, fixed, always)
            assert gen.text == VOCAB_text(ref)
            # a draft model that sat out the last rounds keeps its cache until it drafts again
            check_caches(gen, target, draft if drafter_kind == "model" and fixed else None, prompt)
            accepted += gen.stats.accepted
    assert accepted > 100  # drafts really were accepted, the loop did not run the target alone


def VOCAB_text(tokens: Sequence[int]) -> str:
    return b"".join(VOCAB.token_bytes(t) for t in tokens).decode("utf-8", errors="replace")


def test_target_as_its_own_draft_accepts_everything() -> None:
    target, _ = pair(seed=3)
    own = FakeModel(target.lm, VOCAB)
    gen = generate(target=target, prompt=[1, 2], drafters=[ModelDrafter(own)], max_tokens=41,
                   speculative=spec(4, fixed=True)).run()
    assert gen.stats.accepted == gen.stats.drafted == 32 and gen.stats.rounds == 8
    # each round: 4 draft tokens then one bonus; the first token is the target's own
    assert gen.sources[0] is Source.TARGET
    assert gen.sources[1:] == [Source.DRAFT] * 4 + [Source.BONUS] + ([Source.DRAFT] * 4 + [Source.BONUS]) * 7
    # every verify scored K + 1 = 5 rows in one batch
    assert [rows for rows, mode in target.decodes[1:]] == [5] * 8


def test_rejected_drafts_are_rolled_back_and_replaced_by_the_target() -> None:
    target, draft = pair(seed=5, noise=1.5)  # a poor draft: many rejections
    prompt = [7, 8, 9]
    gen = generate(target=target, prompt=prompt, drafters=[ModelDrafter(draft)], max_tokens=60,
                   speculative=spec(6, fixed=True)).run()
    assert gen.tokens == greedy_reference(target.lm, VOCAB, prompt, max_tokens=60, n_ctx=256)
    assert Source.CORRECTION in gen.sources and gen.stats.accepted < gen.stats.drafted
    check_caches(gen, target, draft, prompt)


# ---- where a generation ends -----------------------------------------------------------------


def scripted(script: Sequence[int], n_vocab: int):
    """An lm whose argmax after a prefix of length n is script[n] (then token 0)."""

    def lm(prefix: Sequence[int]) -> np.ndarray:
        z = np.zeros(n_vocab, dtype=np.float32)
        n = len(prefix)
        z[script[n] if n < len(script) else 0] = 5.0
        return z

    return lm


def test_stop_strings_cut_the_text_and_never_leak_a_prefix() -> None:
    vocab = FakeVocab([b"x", b"ab", b"c", b"S", b"TO", b"P", b"d"])
    # prompt [0]; output: ab c S TO d ab S TO P c ... -> "abcSTOdabSTOPc"; the stop "STOP" spans 3 tokens
    script = [0, 1, 2, 3, 4, 6, 1, 3, 4, 5, 2, 2, 2, 2]
    lm = scripted(script, 7)
    for draft_max, kind in itertools.product((1, 3, 8), ("model", "lookup", "none")):
        target = FakeModel(lm, vocab)
        drafter = {"model": ModelDrafter(FakeModel(lm, vocab)), "lookup": LookupDrafter(), "none": None}[kind]
        gen = generate(target=target, prompt=[0], drafters=[drafter] if drafter else [], max_tokens=30, stop=["STOP"],
                       speculative=spec(draft_max, fixed=True))
        pieces = [step.text for step in gen]
        assert gen.text == "".join(pieces) == "abcSTOdab"
        assert gen.stats.stop_reason == "stop"
        assert all("STOP" not in "".join(pieces[: i + 1]) for i in range(len(pieces)))
        assert gen.tokens == script[1:10]  # ends on the token that completed the stop string


def test_utf8_split_over_tokens_is_released_whole() -> None:
    vocab = letters_vocab(V)  # tokens V-2, V-1 are the two bytes of 'é'
    lm = scripted([0, 0, V - 2, V - 1, 1, V - 2, V - 1], V)
    gen = generate(target=FakeModel(lm, vocab), prompt=[0], max_tokens=6)
    texts = [step.text for step in gen]
    assert gen.text == "aéb" + "é" and "\ufffd" not in gen.text
    assert texts[1] == "" and texts[2] == "é"  # the first byte is held back


def test_end_of_generation_token_stops_identically() -> None:
    lm = scripted([0, 1, 2, 3, 4, 5, 9, 6, 6], 10)
    vocab = FakeVocab([bytes([97 + i]) for i in range(10)], eog=[9])
    for draft_max in (1, 2, 8):
        gen = generate(target=FakeModel(lm, vocab), prompt=[0], drafters=[ModelDrafter(FakeModel(lm, vocab))],
                       max_tokens=20, speculative=spec(draft_max, fixed=True)).run()
        assert gen.tokens == [1, 2, 3, 4, 5, 9] and gen.stats.stop_reason == "eog"


def test_context_fills_up_identically_and_a_too_long_prompt_is_refused() -> None:
    for draft_max in (1, 4, 8):
        target, draft = pair(seed=2, n_ctx=40, noise=0.3)
        prompt = [1, 2, 3, 4, 5]
        gen = generate(target=target, prompt=prompt, drafters=[ModelDrafter(draft)], max_tokens=1000,
                       speculative=spec(draft_max, fixed=True)).run()
        assert gen.stats.stop_reason == "context"
        assert len(prompt) + len(gen.tokens) == 40
        assert gen.tokens == greedy_reference(target.lm, VOCAB, prompt, max_tokens=1000, n_ctx=40)
    with pytest.raises(UserError, match="the prompt is 40 tokens but the context holds 40"):
        generate(target=FakeModel(target.lm, VOCAB, n_ctx=40), prompt=list(range(40)))
    with pytest.raises(UserError, match="prompt is empty"):
        generate(target=target, prompt=[])


@pytest.mark.parametrize("one_row", [False, True])
def test_a_one_row_draft_decodes_one_row_at_a_time_and_drafts_the_same(one_row: bool) -> None:
    # one_row (a draft on a GPU: its CUDA graph keeps one shape) splits a full accept's 2-token
    # catch-up into two one-row decodes, each with a logits row (a decode without one is another
    # graph); the drafts, the output and the caches stay the same
    target, draft = pair(seed=5, noise=0.1)
    gen = generate(target=target, prompt=[1, 2, 3], drafters=[ModelDrafter(draft, one_row=one_row)], max_tokens=80,
                   speculative=spec(4, fixed=True)).run()
    assert gen.tokens == greedy_reference(target.lm, VOCAB, [1, 2, 3], max_tokens=80, n_ctx=256)
    check_caches(gen, target, draft, [1, 2, 3])
    shapes = Counter(draft.decodes[1:])  # (rows, logits) after the prompt's prefill: its graph's shape
    assert gen.stats.accepted > 40
    assert (set(shapes) == {(1, "last")}) if one_row else (shapes[(2, "last")] > 5)


def test_a_cancelled_generation_leaves_the_next_one_exact() -> None:
    target, draft = pair(seed=4)
    drafter = ModelDrafter(draft)
    gen = generate(target=target, prompt=[1, 2, 3], drafters=[drafter], max_tokens=50)
    for _ in range(7):
        next(gen)
    gen.close()
    assert gen.stats.stop_reason == "cancelled"
    again = generate(target=target, prompt=[3, 2, 1], drafters=[drafter], max_tokens=30).run()
    assert again.tokens == greedy_reference(target.lm, VOCAB, [3, 2, 1], max_tokens=30, n_ctx=256)


# ---- the controller in the loop (ggufspec.loop.control; its pure tests are in test_control.py) ------


class ScriptedDrafter:
    """Proposes the target's greedy continuation, wrong at the positions a script says; records
    the length each round asked for."""

    name = "scripted"
    free = False
    grades = ()
    kv_shared = False

    def __init__(self, lm, wrong_at: Sequence[int | None]) -> None:
        self.lm, self.wrong_at, self.asked = lm, list(wrong_at), []

    def prefill(self, prompt: Sequence[int]) -> float:
        return 0.0

    def backlog(self, history: Sequence[int]) -> int:
        return 0  # it needs no cache

    def reset(self) -> None:
        pass

    def continue_after(self, history, drafts, *, draft_len) -> Draft:
        return Draft((), ())

    def propose(self, history, *, draft_len, draft_p_min=0.0, sampled=False, sampling=None, rng=None) -> Draft:
        self.asked.append(draft_len)
        wrong = self.wrong_at[len(self.asked) - 1] if len(self.asked) <= len(self.wrong_at) else None
        h, out = list(history), []
        for i in range(draft_len):
            tok = int(np.argmax(self.lm(h)))
            if i == wrong:
                tok = (tok + 1) % V
            out.append(tok)
            h.append(tok)
        return Draft(tuple(out), (None,) * len(out))


def test_fixed_drafts_draft_max_every_round_and_always_draft_never_pauses() -> None:
    target, _ = pair(seed=8)
    d = ScriptedDrafter(target.lm, [None, None, None, 0, 2, None, 1])
    gen = generate(target=target, prompt=[1, 2], drafters=[d], max_tokens=200, speculative=spec(6, fixed=True)).run()
    assert set(d.asked[:-3]) == {6} and gen.stats.paused_rounds == 0  # the last rounds: what budget is left
    d = ScriptedDrafter(target.lm, [0] * 1000)  # always wrong at its first token: drafting never pays
    gen = generate(target=target, prompt=[1, 2], drafters=[d], max_tokens=200, speculative=spec(6, always_draft=True)).run()
    assert gen.stats.paused_rounds == 0
    # the last round has no budget left to draft: the only round of the target alone
    assert gen.stats.k_hist[0] == gen.stats.drafter_rounds["none"] == 1
    assert gen.stats.drafter_rounds["scripted"] == gen.stats.rounds - 1


def test_the_controller_runs_the_target_alone_when_the_draft_costs_as_much(fake_clock: FakeClock) -> None:
    target, draft = pair(seed=1, noise=1.2, fake_clock=fake_clock, draft_cost=0.010)  # c = 1, a ~ 0.3
    target.t_row = 0.008  # compute-bound: a verify costs what its rows do
    controller = DraftController()
    prompts = [[1, 2], [3, 4, 5], [6, 7], [8, 9, 10], [2, 1], [4, 3], [7, 6]] * 3
    tried = []
    for i, prompt in enumerate(prompts):
        before = len(draft.decodes)
        gen = generate(target=target, prompt=prompt, drafters=[ModelDrafter(draft)], max_tokens=120,
                       controller=controller).run()
        assert gen.tokens == greedy_reference(target.lm, VOCAB, prompt, max_tokens=120, n_ctx=256)
        if i == 0:
            continue
        assert gen.stats.paused_rounds > 0.8 * gen.stats.rounds
        # within a generation its catch-up never pays, and its prefill pays only for exploration
        # (a 2-3-token prompt is a cheap prefill); it opens the prompt in step: its opening
        # rounds and a confirmation at most
        runs = gen.stats.drafter_rounds.get("model", 0)
        assert runs <= 1 + controller.settings.confirm
        tried.append(runs > 0)
        assert all(n <= len(prompt) for n, _ in draft.decodes[before:])  # no catch-up: prefill and drafts only
    # a losing choice is tried again, not at every prompt: this draft cannot pay even fully
    # accepted (rule `hopeless`), so within its budgeted interval (its retry's draft is at most 1%
    # of the time between two) plus a prompt
    st = controller.settings
    interval = max(st.retry * st.spacing,
                   controller.draft_cost_s("model", 8) / (st.hopeless_share * controller.base_s()))  # ~840 here
    at = [i for i, t in enumerate(tried) if t]
    assert 2 <= len(at) < len(tried) // 2, tried
    assert max(b - a for a, b in zip([-1, *at], at)) <= interval / 120 + 2, (str(tried), interval)


def test_the_controller_keeps_drafting_when_it_pays(fake_clock: FakeClock) -> None:
    target, draft = pair(seed=1, noise=0.05, fake_clock=fake_clock, draft_cost=0.001)  # c = 0.1, a high
    gen = generate(target=target, prompt=[1, 2], drafters=[ModelDrafter(draft)], max_tokens=200).run()
    assert gen.stats.paused_rounds <= 1 + gen.stats.rounds // 32  # calibration, then the retries
    assert gen.stats.accepted > 0.7 * gen.stats.drafted
    assert gen.stats.generated_tokens / gen.stats.gen_s > 1.5 / target.t_1  # faster than the target alone


def test_the_targets_prompt_prefill_floors_the_verify_lines_prior(fake_clock: FakeClock) -> None:
    # rule prefill_slope through the loop: a compute-bound target (a = 10 ms, 8 ms an extra row)
    # prefills a 20-token prompt in 10 + 19 x 8 ms; the controller is told, and before any verify
    # is measured it prices a row at that prefill's 8.1 ms a token, not at the prior's 0.2 a
    target, _ = pair(seed=1, fake_clock=fake_clock)
    target.t_row = 0.008
    prompt = list(range(1, 21))
    runs = {}
    for on in (True, False):
        ctrl = DraftController(settings=ControlSettings(prefill_slope=on))
        generate(target=target, prompt=prompt, drafters=[LookupDrafter()], max_tokens=3, controller=ctrl,
                 cache_prompt=False).run()
        a = ctrl.base_s()
        runs[on] = (ctrl.verify_s(8) - a) / a
    p = (0.010 + 19 * 0.008) / 20 / 0.010
    assert runs[True] == pytest.approx(0.3 + 8 * p)
    assert runs[False] == pytest.approx(0.3 + 8 * 0.2)
    # a prompt mostly in the cache prefills a few tokens: they measure the call, not a row
    ctrl = DraftController()
    generate(target=target, prompt=prompt, drafters=[LookupDrafter()], max_tokens=3, controller=ctrl).run()
    generate(target=target, prompt=prompt + [30, 31], drafters=[LookupDrafter()], max_tokens=3, controller=ctrl).run()
    assert (ctrl.verify_s(8) - ctrl.base_s()) / ctrl.base_s() == pytest.approx(0.3 + 8 * 0.2)


def test_the_pair_controller_keeps_its_estimates_across_generations(fake_clock: FakeClock) -> None:
    target, draft = pair(seed=1, noise=1.2, fake_clock=fake_clock, draft_cost=0.010)
    target.t_row = 0.008
    controller = DraftController()
    drafter = ModelDrafter(draft)
    generate(target=target, prompt=[1, 2], drafters=[drafter], max_tokens=200, controller=controller).run()
    again = generate(target=target, prompt=[2, 1], drafters=[drafter], max_tokens=60, controller=controller).run()
    # no calibration and no probing from scratch: the second generation pauses from its first round
    assert again.stats.paused_rounds >= again.stats.rounds - 2


# ---- several drafters --------------------------------------------------------------------------


def test_several_drafters_greedy_equals_an_independent_reference(fake_clock: FakeClock) -> None:
    used: Counter = Counter()
    for seed in range(10):
        target, draft = pair(seed=seed, fake_clock=fake_clock, order=1 + seed % 2)
        prompt = [seed % V, (3 * seed + 1) % V, 5, seed % V, (3 * seed + 1) % V]
        ref = greedy_reference(target.lm, VOCAB, prompt, max_tokens=64, n_ctx=target.n_ctx)
        controller = DraftController()
        for draft_max, fixed, always in itertools.product((1, 3, 8), (True, False), (True, False)):
            drafters = [ModelDrafter(draft), LookupDrafter()] if seed % 3 else [LookupDrafter(), ModelDrafter(draft)]
            gen = generate(target=target, prompt=prompt, drafters=drafters, max_tokens=64, controller=controller,
                           speculative=spec(draft_max, fixed=fixed, always_draft=always)).run()
            assert gen.tokens == ref, (seed, draft_max, fixed, always)
            check_caches(gen, target, draft if fixed and drafters[0].name == "model" else None, prompt)
            s = gen.stats
            assert sum(s.k_hist.values()) == sum(s.drafter_rounds.values()) == s.rounds
            assert sum(k * n for k, n in s.k_hist.items()) == s.drafted
            used.update({k: v for k, v in s.drafter_rounds.items()})
            used.update(checks=s.checks, checks_failed=s.checks_failed)
    assert used["model"] > 100 and used["lookup"] > 100  # both drafters really proposed
    # lookup's first proposals of a generation were checked by the model's first token, and some
    # checks sent the round to the model (the output is the target's either way)
    assert used["checks"] > used["checks_failed"] > 0


def test_steps_name_the_drafter_that_proposed_them(fake_clock: FakeClock) -> None:
    target, draft = pair(seed=3, fake_clock=fake_clock, noise=0.3)
    gen = generate(target=target, prompt=[1, 2, 1, 2], drafters=[ModelDrafter(draft), LookupDrafter()], max_tokens=120,
                   speculative=spec(6, always_draft=True))
    steps = list(gen)
    assert {s.drafter for s in steps if s.source is Source.DRAFT} <= {"model", "lookup"}
    assert all(s.drafter is None for s in steps if s.source is not Source.DRAFT)
    per = Counter(s.drafter for s in steps if s.source is Source.DRAFT)
    assert sum(per.values()) == gen.stats.accepted and per["model"] > 0


def test_lookup_in_the_mix_beats_a_draft_model_that_does_not_pay(fake_clock: FakeClock) -> None:
    # a draft model as slow as the target (drafting with it loses) and prompt lookup on text that
    # repeats (an order-1 target cycles): the controller drafts with lookup where it matches
    def run(drafters) -> tuple[float, Generation]:
        target, draft = pair(seed=5, fake_clock=fake_clock, draft_cost=0.010, order=1, noise=0.8)
        target.t_row = 0.004
        ds = [ModelDrafter(draft) if d == "model" else LookupDrafter() for d in drafters]
        gen = generate(target=target, prompt=[1, 2, 3], drafters=ds, max_tokens=200).run()
        return gen.stats.generated_tokens / gen.stats.gen_s, gen

    alone, _ = run([])
    model, _ = run(["model"])
    both, gen = run(["model", "lookup"])
    assert gen.stats.drafter_rounds["lookup"] > 0.3 * gen.stats.rounds
    assert both > 1.2 * max(alone, model)


# ---- sampling: the target's distribution, exactly -----------------------------------------------


def _target_alone_distribution(lm, prompt: Sequence[int], n: int, sampling: SamplingSettings) -> dict[tuple, float]:
    out: dict[tuple, float] = {(): 1.0}
    for _ in range(n):
        nxt: dict[tuple, float] = {}
        for seq, pr in out.items():
            p = probabilities(lm([*prompt, *seq]), sampling)
            for t in np.flatnonzero(p):
                nxt[(*seq, int(t))] = pr * float(p[t])
        out = nxt
    return out


@pytest.mark.parametrize(
    "rule, variant",
    [(AcceptRule.REJECTION, Variant.LEVIATHAN), (AcceptRule.REJECTION, Variant.CHEN), (AcceptRule.MATCH, Variant.LEVIATHAN)],
    ids=["leviathan", "chen", "match"],
)
def test_sampled_sequences_follow_the_target_alone(rule: AcceptRule, variant: Variant) -> None:
    n_vocab, n_tokens, runs = 5, 3, 4000
    vocab = FakeVocab([bytes([97 + i]) for i in range(n_vocab)])
    t_lm = ngram_lm(n_vocab=n_vocab, seed=11, peak=1.0)
    d_lm = ngram_lm(n_vocab=n_vocab, seed=11, peak=1.0, noise=1.0)
    sampling_kw = {"temperature": 0.8, "top_p": 0.95}
    exact = _target_alone_distribution(t_lm, [1, 2], n_tokens, SamplingSettings(**sampling_kw))
    counts: Counter = Counter()
    target, draft = FakeModel(t_lm, vocab), FakeModel(d_lm, vocab)
    drafter = ModelDrafter(draft)
    for seed in range(runs):
        gen = generate(target=target, prompt=[1, 2], drafters=[drafter], max_tokens=n_tokens,
                       sampling=SamplingSettings(seed=seed, **sampling_kw),
                       speculative=spec(2, fixed=True, accept=rule, variant=variant)).run()
        counts[tuple(gen.tokens)] += 1
    assert_follows(counts, exact, runs)


@pytest.mark.parametrize("timed", [False, True], ids=["seeded-counted", "unseeded-timed"])
def test_several_drafters_keep_the_target_distribution(
    timed: bool, fake_clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the controller picks model, lookup or none each round from past rounds only (timed: from a
    # simulated clock whose costs change run to run), so the output is still the target's
    n_vocab, n_tokens, runs = 3, 5, 4000
    vocab = FakeVocab([bytes([97 + i]) for i in range(n_vocab)])
    t_lm = ngram_lm(n_vocab=n_vocab, seed=11, peak=1.0)
    d_lm = ngram_lm(n_vocab=n_vocab, seed=11, peak=1.0, noise=1.0)
    prompt = [1, 2, 0, 1, 2]  # lookup proposes 0, 1, 2 after the prompt's last 2
    sampling_kw = {"temperature": 0.8, "top_p": 0.95}
    exact = _target_alone_distribution(t_lm, prompt, n_tokens, SamplingSettings(**sampling_kw))
    counts: Counter = Counter()
    target = FakeModel(t_lm, vocab, clock=fake_clock)
    drafters = [ModelDrafter(FakeModel(d_lm, vocab, clock=fake_clock, t_1=0.004)), LookupDrafter()]
    controller = DraftController(settings=ControlSettings(check_pricing=False))  # checks whenever due (the path under test)
    seeds = iter(range(runs))
    if timed:  # seed None (the timed controller), the test's own seeds underneath
        monkeypatch.setattr(SamplingSettings, "rng", lambda self: np.random.default_rng(next(seeds)))
    used: Counter = Counter()
    for i in range(runs):
        target.t_row = 0.001 * (i % 7)
        sampling = SamplingSettings(seed=None if timed else i, **sampling_kw)
        gen = generate(target=target, prompt=prompt, drafters=drafters, max_tokens=n_tokens, sampling=sampling,
                       controller=controller, speculative=spec(2)).run()
        counts[tuple(gen.tokens)] += 1
        used.update(gen.stats.drafter_rounds)
        used.update(checks=gen.stats.checks, checks_failed=gen.stats.checks_failed)
    # model, lookup and the target alone all ran; lookup's proposals were checked by the model's
    # first (sampled) token, kept where it agreed (its q row the model's) and replaced where not
    assert {"model", "lookup", "none"} <= set(used)
    assert used["checks"] > used["checks_failed"] > 0, used
    assert_follows(counts, exact, runs)


class _AlwaysCheck(DraftController):
    """Every round lookup's proposal, when it has one, checked by the model (the path under test)."""

    def choose(self, *, drafters, draft_max, draft_min=0, allow_none=True, remaining=None):  # type: ignore[override]
        look = next((c for c in drafters if c.free and c.match_len), None)
        if look is None:
            return super().choose(drafters=drafters, draft_max=draft_max, draft_min=draft_min,
                                  allow_none=allow_none, remaining=remaining)
        return Choice("lookup", min(draft_max, look.match_len), grade=look.grade, check="model", check_len=draft_max,
                      extend=self.extend)


def _sampled_runs(controller, *, prompt: Sequence[int], n_tokens: int, speculative: SpeculativeSettings,
                  monkeypatch: pytest.MonkeyPatch, runs: int = 4000):
    """`runs` sampled generations (T = 0.8, top-p 0.95) of a 3-token target, the model (a draft that
    half agrees with it) and lookup drafting under a fresh `controller()` each: (counts of each
    sequence, its exact probability under the target alone, the runs' stats). Seed None, so the
    given controller runs (a seeded run takes a counted controller of its own); the test's seeds
    underneath."""
    n_vocab = 3
    vocab = FakeVocab([bytes([97 + i]) for i in range(n_vocab)])
    t_lm = ngram_lm(n_vocab=n_vocab, seed=11, peak=1.0)
    d_lm = ngram_lm(n_vocab=n_vocab, seed=11, peak=1.0, noise=0.4)
    sampling = SamplingSettings(temperature=0.8, top_p=0.95)
    exact = _target_alone_distribution(t_lm, prompt, n_tokens, sampling)
    target = FakeModel(t_lm, vocab)
    drafters = [ModelDrafter(FakeModel(d_lm, vocab)), LookupDrafter()]
    seeds = iter(range(runs))
    monkeypatch.setattr(SamplingSettings, "rng", lambda self: np.random.default_rng(next(seeds)))
    counts: Counter = Counter()
    stats = []
    for _ in range(runs):
        gen = generate(target=target, prompt=prompt, drafters=drafters, max_tokens=n_tokens, controller=controller(),
                       sampling=sampling, speculative=speculative).run()
        counts[tuple(gen.tokens)] += 1
        stats.append(gen.stats)
    return counts, exact, stats


@pytest.mark.parametrize("rule", [AcceptRule.REJECTION, AcceptRule.MATCH], ids=["rejection", "match"])
def test_checked_lookup_rounds_keep_the_target_distribution(rule: AcceptRule, monkeypatch: pytest.MonkeyPatch) -> None:
    # every lookup proposal checked by the model's first (sampled) token: kept where they agree
    # (its first q row the model's), replaced by the model's round where not
    runs = 4000
    counts, exact, stats = _sampled_runs(_AlwaysCheck, prompt=[1, 2, 0, 1, 2], n_tokens=4,
                                         speculative=spec(3, accept=rule), monkeypatch=monkeypatch, runs=runs)
    used: Counter = Counter()
    for s in stats:
        used.update(checks=s.checks, checks_failed=s.checks_failed, **s.drafter_rounds)
    assert used["lookup"] > 400 and used["checks_failed"] > 1000, used
    assert_follows(counts, exact, runs)


def test_seeded_sampled_runs_are_reproducible(fake_clock: FakeClock) -> None:
    target, draft = pair(seed=6, fake_clock=fake_clock, order=1)
    controller = DraftController()  # a pair's, learning between the runs: a seeded run ignores it
    for drafters in ([ModelDrafter(draft)], [ModelDrafter(draft), LookupDrafter()]):
        runs = []
        for i in range(3):
            target.t_1 = 0.010 * (1 + i)  # other timings each run: a seeded run must not see them
            gen = generate(target=target, prompt=[1, 2], drafters=drafters, max_tokens=60, controller=controller,
                           sampling=SamplingSettings(temperature=0.8, seed=123)).run()
            runs.append((gen.tokens, gen.stats.k_hist, gen.stats.drafter_rounds))
        assert runs[0] == runs[1] == runs[2]
    assert runs[0][2].get("lookup", 0) > 0


@pytest.mark.parametrize("kind", ["model+lookup", "alone"])
def test_a_seeded_sampled_run_is_the_same_with_rounds_launched_ahead(
        fake_clock: FakeClock, kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # the draws come in the same order whether a round of the target alone is launched ahead or
    # not (its plan asks no random number; its token is drawn when its rows are read)
    def run(asynchronous: bool) -> tuple[list[int], dict]:
        target, draft = pair(seed=6, fake_clock=fake_clock, order=1, noise=1.5)
        target.t_row, target.asynchronous = 0.02, asynchronous
        drafters = [ModelDrafter(draft), LookupDrafter()] if kind == "model+lookup" else []
        gen = generate(target=target, prompt=[1, 2], drafters=drafters, max_tokens=80,
                       sampling=SamplingSettings(temperature=0.8, seed=7)).run()
        return gen.tokens, gen.stats.drafter_rounds

    from ggufspec.loop.round_runner import RoundRunner

    launched: list[int] = []
    land = RoundRunner._land

    def counted(self, *a, **k):
        launched.append(1)
        return land(self, *a, **k)

    tokens, by_source = run(False)
    monkeypatch.setattr(RoundRunner, "_land", counted)
    assert run(True) == (tokens, by_source)
    # (measured: 9 of 72 rounds with the draft model and lookup under the counted controller, 78 of 79 alone)
    assert len(launched) > {"model+lookup": 5, "alone": 70}[kind], (len(launched), by_source)


def test_sampled_draft_rows_are_shaped_like_the_target_rows() -> None:
    d_lm = ngram_lm(n_vocab=V, seed=2, peak=1.5)
    ctx = FakeModel(d_lm, VOCAB)
    sampling = SamplingSettings(temperature=0.5, top_p=0.8, top_k=20, min_p=0.01)
    history = [3, 4, 5]
    d = ModelDrafter(ctx).propose(history, draft_len=4, sampled=True, sampling=sampling, rng=np.random.default_rng(0))
    assert len(d.tokens) == len(d.q_rows) == 4
    h = list(history)
    for tok, q in zip(d.tokens, d.q_rows):
        expected = probabilities(d_lm(h), sampling)
        np.testing.assert_array_equal(q, expected)  # the same shaping, temperature included
        assert not np.allclose(q, probabilities(d_lm(h), SamplingSettings(temperature=1.0)))
        assert q[tok] > 0
        h.append(tok)
    greedy = ModelDrafter(FakeModel(d_lm, VOCAB)).propose(history, draft_len=3, sampled=False, sampling=sampling)
    assert greedy.q_rows == (None, None, None)  # argmax drafts: q one-hot


def test_lookup_grades_its_proposals_by_the_ngram_it_matched() -> None:
    d = LookupDrafter()
    p = d.propose([1, 2, 3, 9, 5, 6, 1, 2, 3], draft_len=4)  # the last 3 tokens occurred before
    assert p.tokens == (9, 5, 6, 1) and p.grade == 3
    d.reset()
    p = d.propose([1, 2, 3, 9, 4, 3], draft_len=4)  # only the last token did
    assert p.tokens == (9, 4, 3) and p.grade == 1
    d.reset()
    assert d.propose([1, 2, 3], draft_len=4).grade == 0  # no match, no proposal


def _proposals_from_scratch(history: list[int], draft_len: int) -> tuple[tuple[int, ...], int]:
    d = LookupDrafter()
    p = d.propose(list(history), draft_len=draft_len)
    return p.tokens, p.grade


@settings(max_examples=200, deadline=None)
@given(tokens=hst.lists(hst.integers(0, 4), min_size=2, max_size=90),
       steps=hst.lists(hst.integers(1, 30), min_size=1, max_size=12), copies=hst.lists(hst.booleans(), max_size=12))
def test_lookup_that_grows_with_its_history_proposes_what_one_built_afresh_would(
        tokens: list[int], steps: list[int], copies: list[bool]) -> None:
    # The index grows with the history round by round (a handful of tokens, or many at once), the
    # same list object taken as grown by appending, another one compared; either way each proposal
    # is the one a drafter that indexed the whole history at once makes.
    d = LookupDrafter()
    history: list[int] = []
    for i, step in enumerate(steps):
        history.extend(tokens[len(history):len(history) + step])
        seen = list(history) if i < len(copies) and copies[i] else history
        if len(seen) >= 2:
            p = d.propose(seen, draft_len=5)
            assert (p.tokens, p.grade) == _proposals_from_scratch(history, 5)
    other = [*tokens[:len(tokens) // 2], 9, 9]  # another history, not a continuation: indexed anew
    p = d.propose(other, draft_len=5)
    assert (p.tokens, p.grade) == _proposals_from_scratch(other, 5)


@settings(max_examples=300, deadline=None)
@given(ops=hst.lists(hst.tuples(hst.sampled_from(["append", "decode", "cut", "load", "ask", "ask_copy", "new", "shrink"]),
                                hst.integers(0, 12)), max_size=40))
def test_a_shared_prefix_answers_as_comparing_the_whole_lists_does(ops: list[tuple[str, int]]) -> None:
    # A cache's token list and an append-only history change as the loop changes them; every
    # answer equals common_prefix of the two whole lists.
    own: list[int] = []
    history: list[int] = [1, 2]
    shared = SharedPrefix()
    for op, x in ops:
        if op == "append":  # the history grows (the engine appends what a round emitted)
            history.extend([x % 3] * (x % 4 + 1))
        elif op == "decode":  # the cache appends some of the history, or its own drafts
            own.extend(history[len(own):len(own) + x] if x % 2 else [x % 3, 7][:x % 3])
        elif op == "cut":
            del own[x:]
            shared.cut(x)
        elif op == "load":  # the cache replaced (an import of the target's)
            own = list(history[:x])
            shared.reset()
        elif op == "new":  # another generation: a new history object
            history = [x % 3, 1, 2]
        elif op == "shrink":  # (not the engine's: a history cut short in place is compared afresh)
            del history[max(2, x):]
        seq = list(history) if op == "ask_copy" else history
        assert shared.ask(own, seq) == common_prefix(own, seq), (op, own, seq)


class _Recorder(DraftController):
    """The default controller, recording each round it is told of."""

    def __init__(self) -> None:
        super().__init__()
        self.told: list[tuple[str | None, int]] = []

    def observe(self, r: Round) -> None:
        self.told.append((r.choice.drafter, r.drafted))
        super().observe(r)


def test_every_round_is_told_to_the_controller_the_last_tokens_too(fake_clock: FakeClock) -> None:
    # a round with one token left cannot draft; it is still a round of the target alone, and its
    # seconds measure a for free (it resets the target alone's retry), so the controller is told
    target, draft = pair(seed=3, noise=0.0, fake_clock=fake_clock)
    ends = []
    for max_tokens in range(2, 24):
        ctl = _Recorder()
        gen = generate(target=target, prompt=[1, 2], drafters=[ModelDrafter(draft)], max_tokens=max_tokens,
                       controller=ctl, speculative=spec(4)).run()
        assert len(ctl.told) == gen.stats.rounds == sum(gen.stats.k_hist.values()), max_tokens
        assert ctl.told.count((None, 0)) == gen.stats.k_hist.get(0, 0)
        ends.append(ctl.told[-1])
    assert ends.count((None, 0)) >= 3  # runs that ended on a round of one token left


# ---- lookup's continuation appended to a model's draft (DraftController.extend) ---------------


class _AlwaysExtend(DraftController):
    """The model drafts every round (`k` tokens, or the controller's choice), and its full
    proposal takes lookup's whole continuation (the path under test)."""

    def __init__(self, k: int | None = None) -> None:
        super().__init__()
        self.k = k

    def choose(self, *, drafters, draft_max, draft_min=0, allow_none=True, remaining=None):  # type: ignore[override]
        if self.k is None:
            return super().choose(drafters=drafters, draft_max=draft_max, draft_min=draft_min,
                                  allow_none=allow_none, remaining=remaining)
        return Choice("model", min(self.k, draft_max), extend=self.extend)

    def extend(self, name, *, draft_len, free, grade, match_len):  # type: ignore[override]
        return match_len


def test_extended_drafts_greedy_equals_an_independent_reference(fake_clock: FakeClock) -> None:
    used: Counter = Counter()
    for seed in range(8):
        target, draft = pair(seed=seed, fake_clock=fake_clock, order=1 + seed % 2, noise=0.3)
        prompt = [seed % V, (3 * seed + 1) % V, 5, seed % V, (3 * seed + 1) % V]
        ref = greedy_reference(target.lm, VOCAB, prompt, max_tokens=64, n_ctx=target.n_ctx)
        for controller, extend in ((_AlwaysExtend(), 4), (_AlwaysExtend(3), 2), (DraftController(), 4)):
            gen = generate(target=target, prompt=prompt, drafters=[ModelDrafter(draft), LookupDrafter()], max_tokens=64,
                           controller=controller, speculative=spec(4, draft_extend=extend))
            steps = list(gen)
            assert gen.tokens == ref, (seed, extend)
            s = gen.stats
            assert sum(k * n for k, n in s.k_hist.items()) == s.drafted and max(s.k_hist) <= 4 + extend
            per = Counter(x.drafter for x in steps if x.source is Source.DRAFT)
            assert sum(per.values()) == s.accepted
            if "lookup" not in s.drafter_rounds:  # a model round's accepted continuation is lookup's
                assert per["lookup"] == s.extended_accepted
            used.update(extended=s.extended, kept=s.extended_accepted)
    assert used["extended"] > 100 and 0 < used["kept"] < used["extended"], used


@pytest.mark.parametrize("rule", [AcceptRule.REJECTION, AcceptRule.MATCH], ids=["rejection", "match"])
def test_extended_drafts_keep_the_target_distribution(rule: AcceptRule, monkeypatch: pytest.MonkeyPatch) -> None:
    # the model's sampled drafts (their q rows) and lookup's continuation of them (one-hot: a
    # function of the history and the drafts) in one verify: the output is still the target's
    runs = 4000
    counts, exact, stats = _sampled_runs(lambda: _AlwaysExtend(1), prompt=[1, 2, 0, 1, 2, 0], n_tokens=5,
                                         speculative=spec(1, accept=rule, draft_extend=3), monkeypatch=monkeypatch,
                                         runs=runs)
    extended, kept = sum(s.extended for s in stats), sum(s.extended_accepted for s in stats)
    assert extended > 2000 and kept > 500, (extended, kept)
    assert_follows(counts, exact, runs)


def test_lookups_continuation_is_the_match_of_history_and_drafts() -> None:
    # continue_after reads only the tail an n-gram needs; the answer is the latest occurrence's
    # continuation in history + drafts, running on into the drafts, as a plain match over the two
    rng = np.random.default_rng(0)
    for _ in range(2000):
        v = int(rng.choice([3, 5, 20]))
        history = [int(x) for x in rng.integers(0, v, size=int(rng.integers(2, 60)))]
        drafts = [int(x) for x in rng.integers(0, v, size=int(rng.integers(1, 9)))]
        n = int(rng.integers(1, 12))
        seq = history + drafts
        want: tuple[tuple[int, ...], int] = ((), 0)
        for g in range(3, 0, -1):  # the default n-gram lengths, longest first
            ends = [e for e in range(g, len(history) + 1) if history[e - g:e] == seq[-g:] and e < len(history)]
            if ends and seq[ends[-1]:ends[-1] + n]:
                want = (tuple(seq[ends[-1]:ends[-1] + n]), g)
                break
        got = LookupDrafter().continue_after(history, drafts, draft_len=n)
        assert (got.tokens, got.grade) == want, (history, drafts, n)


def test_a_check_the_model_declines_runs_the_free_proposal_unchecked(fake_clock: FakeClock) -> None:
    # --draft-p-min so high that the model never drafts a token: a checked lookup proposal has no
    # first token to meet, so it runs as it is (q one-hot: exact), not as an empty model round
    target, draft = pair(seed=5, fake_clock=fake_clock)
    prompt = [1, 2, 3, 1, 2, 3, 1, 2]
    gen = generate(target=target, prompt=prompt, drafters=[ModelDrafter(draft), LookupDrafter()], max_tokens=40,
                   controller=_AlwaysCheck(),
                   speculative=SpeculativeSettings(length=DraftLengthSettings(draft_max=4, draft_p_min=0.999999))).run()
    assert gen.tokens == greedy_reference(target.lm, VOCAB, prompt, max_tokens=40, n_ctx=256)
    assert gen.stats.checks > 0 and gen.stats.checks_failed == 0
    assert gen.stats.drafter_rounds.get("lookup", 0) == gen.stats.checks


@dataclass
class GraphTarget(FakeModel):
    """A target on a GPU whose decodes run a CUDA graph (fakes.CudaGraph: 2.6 ms a decode without
    it, 1 ms to capture it); replayed, t_1 + (rows - 1) t_row."""

    graph: CudaGraph = field(default_factory=lambda: CudaGraph(uncaptured=0.0026, capture=0.0010))

    def decode(self, tokens: Sequence[int], *, logits: str = "last", wait: bool = True) -> None:
        before = self.clock.t if self.clock is not None else 0.0
        super().decode(tokens, logits=logits)
        if self.clock is not None and tokens:
            self.clock.t = before + self.graph.cost(len(tokens), self.clock.t - before)


def _graph_world(fake_clock: FakeClock, *, switch_cost: bool | None) -> float:
    """Seconds of 8 generations of 96 tokens on GraphTarget (1.3 ms a one-row step) with a draft
    model that agrees nearly always but steps in 1.8 ms (a round of K = 8 costs a little more than
    its 9 tokens alone: nothing pays) and prompt lookup, under one controller; switch_cost None:
    the target alone."""
    vocab = letters_vocab(100)
    target = GraphTarget(ngram_lm(n_vocab=100, seed=21, order=5), vocab, n_ctx=512, clock=fake_clock,
                         t_1=0.0013, t_row=0.00025)
    draft = FakeModel(ngram_lm(n_vocab=100, seed=21, order=5, noise=0.05), vocab, n_ctx=512, clock=fake_clock,
                      t_1=0.0018, t_row=0.00045)
    drafters = [] if switch_cost is None else [ModelDrafter(draft, one_row=True), LookupDrafter()]
    controller = DraftController(settings=ControlSettings(switch_cost=bool(switch_cost)))
    start = fake_clock.t
    for i in range(8):
        target.clear()
        draft.clear()
        generate(target=target, prompt=[i % 100, (5 * i + 1) % 100, (7 * i + 3) % 100], drafters=drafters,
                 max_tokens=96, controller=controller).run()
    return fake_clock.t - start


def test_on_a_gpus_graph_the_controller_prices_the_switch_back_to_one_row(fake_clock: FakeClock) -> None:
    # Every change of the target's rows costs two decodes without the graph (H200, 135M target:
    # 2.6 ms against 1.3). Timing the target alone only right after drafting rounds, a controller
    # sees a at up to twice its cost and drafts where nothing pays; rule switch_cost measures a
    # after two rounds alone and charges the way back to the drafter (here 0.987 of the target
    # alone against 0.946 without; the recorded traces' replay: tests/test_trace_sim.py)
    alone = _graph_world(fake_clock, switch_cost=None)
    priced = alone / _graph_world(fake_clock, switch_cost=True)
    unpriced = alone / _graph_world(fake_clock, switch_cost=False)
    assert priced >= 0.97, (priced, unpriced)
    assert priced > unpriced + 0.02, (priced, unpriced)


def test_the_one_row_draft_and_the_switch_rule_are_for_cuda_graphs(monkeypatch: pytest.MonkeyPatch) -> None:
    # CUDA replays a captured graph of each decode and re-warms it at every change of shape; the
    # CPU, RPC workers and the other GPU backends capture none (there one_row would only add decodes)
    from types import SimpleNamespace

    from ggufspec import pairload
    from ggufspec.settings import ModelSettings

    def dev(name: str, kind: str) -> SimpleNamespace:
        return SimpleNamespace(name=name, kind=kind)

    monkeypatch.delenv("GGUFSPEC_DRAFT_ONE_ROW", raising=False)
    on, off = ModelSettings(n_gpu_layers=-1), ModelSettings(n_gpu_layers=0)
    assert pairload.runs_on_graphs(on, [dev("CUDA0", "gpu")])
    assert not pairload.runs_on_graphs(off, [dev("CUDA0", "gpu")])
    assert not pairload.runs_on_graphs(on, [dev("Metal", "gpu"), dev("Vulkan0", "gpu"), dev("RPC0", "rpc")])
    assert pairload.draft_one_row(on, [dev("CUDA0", "gpu")]) and not pairload.draft_one_row(on, [dev("Metal", "gpu")])


# ---- held rounds: the free drafters asked later (ggufspec.loop.late) ----------------------------


@settings(max_examples=200, deadline=None)
@given(tokens=hst.lists(hst.integers(0, 4), min_size=3, max_size=90),
       steps=hst.lists(hst.tuples(hst.integers(1, 9), hst.booleans(), hst.integers(1, 6)), min_size=1, max_size=14))
def test_proposals_asked_late_are_the_ones_asked_on_time(tokens: list[int], steps: list[tuple[int, bool, int]]) -> None:
    # rounds asked on time and rounds kept for later, mixed, over one growing history: each late
    # proposal is the one a drafter that indexed its round's history afresh makes, scored against
    # the token emitted after it; reading one score settles every round kept before it
    from ggufspec.loop.late import FreeView

    view = FreeView([LookupDrafter()], lambda d, h, n: d.propose(h, draft_len=n))
    history, late = tokens[:2], []
    for grow, on_time, draft_len in steps:
        if len(history) >= len(tokens):
            break
        token = tokens[len(history)]
        if on_time:
            p = view.drafters[0].propose(view(history), draft_len=draft_len)
            assert (p.tokens, p.grade) == _proposals_from_scratch(history, draft_len)
        else:
            late.append((view.later(history, draft_len=draft_len, token=token), list(history), draft_len, token))
        history.extend(tokens[len(history):len(history) + grow])
    view.settle()
    for scores, seen, draft_len, token in late:
        want, grade = _proposals_from_scratch(seen, draft_len)
        got = scores["lookup"]
        assert (got.proposed, got.grade) == (len(want), grade)
        assert got.matched == (1 if want[:1] == (token,) else 0)


class _ToldRounds(DraftController):
    """The default controller, keeping each round it is told of (read after the generations)."""

    def __init__(self) -> None:
        super().__init__()
        self.told: list[Round] = []

    def observe(self, r: Round) -> None:
        self.told.append(r)
        super().observe(r)


class _AskedEveryRound(LookupDrafter):
    """Lookup declaring a grade it never proposes: no hold stands whatever it would propose, so it
    is asked every round (the runner's way before ggufspec.loop.late)."""

    def __init__(self) -> None:
        super().__init__()
        self.grades = (*self.grades, 99)


def test_held_rounds_ask_lookup_later_and_the_controller_learns_what_it_would_have_on_time(
        fake_clock: FakeClock) -> None:
    # where nothing pays the target alone is held and lookup is asked after the rounds, not in
    # them: the same tokens, the same choice and the same lookup scores round after round, and the
    # same estimates, as a runner that asks lookup every round
    from ggufspec.loop.late import LateScores

    def run(lookup: LookupDrafter) -> tuple[list, list, list, int]:
        fake_clock.t = 0.0
        target, draft = pair(seed=1, noise=1.2, fake_clock=fake_clock, draft_cost=0.010)
        target.t_row = 0.02  # compute-bound, each verify row dear: no lookup grade pays for long
        ctl, drafters, tokens = _ToldRounds(), [ModelDrafter(draft), lookup], []
        for prompt in ([1, 2, 3, 1, 2], [3, 4, 5, 3, 4], [6, 7, 6, 7], [2, 1, 2]):
            tokens.append(generate(target=target, prompt=prompt, drafters=drafters, max_tokens=150,
                                   controller=ctl).run().tokens)
        late = [r.scored for r in ctl.told if isinstance(r.scored, LateScores)]
        assert all(s.settled for s in late)  # asked by the end of each generation, read or not
        told = [(r.choice, r.drafted, r.accepted, r.emitted, r.paused, dict(r.scored)) for r in ctl.told]
        state = [ctl.base_s(), ctl.verify_s(4), ctl.round, ctl.prefix_accept("lookup#1", 4),
                 ctl.prefix_accept("lookup#2", 4), ctl.throughput("none", None), ctl.throughput("model", None)]
        return tokens, told, state, len(late)

    tokens, told, state, late = run(LookupDrafter())
    tokens_now, told_now, state_now, none_late = run(_AskedEveryRound())
    assert tokens == tokens_now
    assert told == told_now
    assert state == state_now
    assert none_late == 0 and late > 0.5 * len(told), (late, len(told))


class _ReplayWatch(_ToldRounds):
    """... noting, at each replay of held rounds, how many there were and whether the target's
    decode was in flight (the bookkeeping ran while the device computed)."""

    def __init__(self, target: FakeModel) -> None:
        super().__init__()
        self.target = target
        self.replays: list[tuple[int, bool]] = []

    def replay(self) -> None:
        if self._pending:
            self.replays.append((len(self._pending), self.target.in_flight))
        super().replay()


@pytest.mark.parametrize("asynchronous", [False, True])
def test_on_an_asynchronous_target_held_rounds_are_kept_while_the_verify_computes(
        fake_clock: FakeClock, asynchronous: bool) -> None:
    # a GPU or an RPC worker: the verify is launched and the bookkeeping of the rounds held before
    # it (the controller's, lookup's asks) runs before its result is read, not in the next priced
    # round; the same tokens, choices, scores and estimates as on a synchronous target
    def run(asynchronous: bool) -> tuple[list, list, list, list]:
        fake_clock.t = 0.0
        target, draft = pair(seed=1, noise=1.2, fake_clock=fake_clock, draft_cost=0.010)
        target.t_row, target.asynchronous = 0.02, asynchronous
        ctl, drafters, tokens = _ReplayWatch(target), [ModelDrafter(draft), LookupDrafter()], []
        for prompt in ([1, 2, 3, 1, 2], [3, 4, 5, 3, 4], [6, 7, 6, 7], [2, 1, 2]):
            tokens.append(generate(target=target, prompt=prompt, drafters=drafters, max_tokens=150,
                                   controller=ctl).run().tokens)
        told = [(r.choice, r.drafted, r.accepted, r.emitted, r.paused, dict(r.scored)) for r in ctl.told]
        state = [ctl.base_s(), ctl.verify_s(4), ctl.round, ctl.prefix_accept("lookup#1", 4),
                 ctl.prefix_accept("lookup#2", 4), ctl.throughput("none", None), ctl.throughput("model", None)]
        return tokens, told, state, ctl.replays

    tokens, told, state, replays = run(asynchronous)
    assert (tokens, told, state) == run(not asynchronous)[:3]
    under = sum(n for n, in_flight in replays if in_flight)
    after = [n for n, in_flight in replays if not in_flight]
    if asynchronous:  # a priced round finds at most the round just before it left
        assert under > 300 and max(after) <= 1, (under, after)
    else:
        assert under == 0 and max(after) >= 4, after


class _Watched(FakeModel):
    """An asynchronous fake target that notes, at each step the engine yields, whether a decode is in flight."""

    def watch(self, gen: Generation) -> list[bool]:
        return [self.in_flight for _ in gen]


def _twins(seed: int, fake_clock: FakeClock, *, asynchronous: bool, stop_eog: bool = False) -> tuple[FakeModel, FakeModel]:
    target, draft = pair(seed=seed, noise=1.2, fake_clock=fake_clock, draft_cost=0.010)
    vocab = FakeVocab(VOCAB.pieces, eog=[7]) if stop_eog else VOCAB
    target = _Watched(target.lm, vocab, n_ctx=target.n_ctx, clock=fake_clock, t_row=0.02, asynchronous=asynchronous)
    draft.vocab = vocab
    return target, draft


@pytest.mark.parametrize("kind", ["model+lookup", "lookup", "alone"])
def test_on_an_asynchronous_target_the_next_round_of_the_target_alone_computes_while_tokens_are_emitted(
        fake_clock: FakeClock, kind: str) -> None:
    # where nothing pays (each verify row dear) the hold's rounds of the target alone are planned
    # at the end of the round before and launched at once: the engine emits while the device
    # computes. Tokens, stop reasons, caches, and every round the controller is told are those of
    # a synchronous target; stop strings, ends of generation, the last token and a client gone
    # leave the caches as they would
    def run(asynchronous: bool) -> tuple[list, list, float]:
        fake_clock.t = 0.0
        out, told, flights = [], [], []
        for seed in range(3):
            target, draft = _twins(seed, fake_clock, asynchronous=asynchronous, stop_eog=seed == 2)
            ctl = _ToldRounds()
            drafters = {"model+lookup": [ModelDrafter(draft), LookupDrafter()], "lookup": [LookupDrafter()],
                        "alone": []}[kind]
            for prompt, stop, close_at in (([1, 2, 3, 1, 2], (), None), ([3, 4, 5, 3, 4], ("dc",), None),
                                           ([6, 7, 6, 7], (), 40), ([2, 1, 2], ("a",), None)):
                gen = generate(target=target, prompt=prompt, drafters=drafters, max_tokens=120, stop=stop,
                               controller=ctl if drafters else None)
                if close_at is None:
                    flights += target.watch(gen)
                else:
                    for _ in zip(range(close_at), gen):
                        flights.append(target.in_flight)
                    gen.close()
                assert not target.in_flight  # (a round launched for nothing was waited for)
                check_caches(gen, target, None, prompt)
                out.append((gen.tokens, gen.text, gen.stats.stop_reason, gen.stats.rounds))
            told += [(r.choice, r.drafted, r.accepted, r.emitted, r.paused, dict(r.scored)) for r in ctl.told]
        return out, told, sum(flights) / len(flights)

    out, told, in_flight = run(True)
    out_sync, told_sync, none = run(False)
    assert out == out_sync and told == told_sync
    assert {stop for _, _, stop, _ in out} >= {"length", "cancelled", "stop"}
    # (measured: 0.54 with the draft model, 0.73 lookup alone, 0.97 the target alone)
    assert none == 0 and in_flight > {"model+lookup": 0.4, "lookup": 0.6, "alone": 0.9}[kind], in_flight


def test_in_lockstep_a_round_launched_ahead_is_timed_without_the_other_lanes(fake_clock: FakeClock) -> None:
    # two generations interleaved step by step on asynchronous targets (one clock: each decode
    # advances it): each lane waits for its own launched round inside its step, and a round
    # launched ahead keeps the other lane's steps out of its seconds, so every round is timed
    # as when its generation runs alone
    from ggufspec.bench.lockstep import interleave

    def lanes() -> list[tuple[FakeModel, _ToldRounds, list]]:
        out = []
        for seed in (0, 1):
            target, draft = _twins(seed, fake_clock, asynchronous=True)
            out.append((target, _ToldRounds(), [ModelDrafter(draft), LookupDrafter()]))
        return out

    def gens(ls):
        return [generate(target=t, prompt=[1, 2, 3, 1, 2], drafters=d, max_tokens=100, controller=c)
                for t, c, d in ls]

    alone = lanes()
    solo = [g.run() for g in gens(alone)]
    both = lanes()
    busy = interleave(gens(both), clock=fake_clock.now)
    for (_, c_alone, _), (target, c_both, _), b, g in zip(alone, both, busy, solo):
        assert [r.round_s for r in c_both.told] == pytest.approx([r.round_s for r in c_alone.told])
        assert sum(r.paused for r in c_both.told) > 50  # (the hold's rounds: launched ahead)
        assert not target.in_flight
        # each lane is charged its own decodes: what its generation took alone
        assert b == pytest.approx(g.stats.prompt_s + g.stats.gen_s)


def test_a_generation_closed_early_still_asks_lookup_for_its_held_rounds(fake_clock: FakeClock) -> None:
    # a client that goes away: the rounds held since the last pricing have lookup asked at the
    # close, at the histories they had, not left to the next generation (whose lookup is reset)
    from ggufspec.loop.late import LateScores

    target, draft = pair(seed=1, noise=1.2, fake_clock=fake_clock, draft_cost=0.010)
    target.t_row = 0.02
    ctl, drafters = _ToldRounds(), [ModelDrafter(draft), LookupDrafter()]
    generate(target=target, prompt=[1, 2, 3, 1, 2], drafters=drafters, max_tokens=150, controller=ctl).run()
    before = len(ctl.told)
    gen = generate(target=target, prompt=[3, 4, 5, 3, 4], drafters=drafters, max_tokens=150, controller=ctl)
    for _ in zip(range(90), gen):
        pass
    gen.close()
    late = [r.scored for r in ctl.told[before:] if isinstance(r.scored, LateScores)]
    assert len(late) > 30 and all(s.settled for s in late)
