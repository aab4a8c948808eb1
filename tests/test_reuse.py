"""Prefix reuse in the loop, on pure-Python fakes (tests/fakes.py): a generation starts from the
longest common prefix of its prompt with what the caches hold, decodes only the rest, and gives
the same tokens as a fresh run, after rollback, cancellation, stop strings, a full context and
errors. The fake models here score the WHOLE prefix (order 64), so a cache that holds a wrong
token anywhere shows as different logits, not only in the asserts on the token lists.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pytest
from fakes import FakeClock, FakeModel, FakeVocab, greedy_reference, letters_vocab, ngram_lm
from hypothesis import given, settings
from hypothesis import strategies as st

from ggufspec.errors import UserError
from ggufspec.loop import clock
from ggufspec.loop.drafters import common_prefix
from ggufspec.loop.model_drafter import ModelDrafter
from ggufspec.loop.lookup import LookupDrafter
from ggufspec.loop.engine import Generation, generate
from ggufspec.loop.speculation import DraftLengthSettings, SpeculativeSettings

V = 40
VOCAB = letters_vocab(V)
ORDER = 64  # logits depend on the whole prefix (prompts here stay shorter)


def _ds(drafter):
    """One drafter, or None for the target alone, as generate(drafters=) takes it."""
    return () if drafter is None else (drafter,)


@pytest.fixture(autouse=True)
def fake_clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    c = FakeClock()
    monkeypatch.setattr(clock, "now", c.now)
    return c


def models(*, seed: int = 0, noise: float = 0.8, n_ctx: int = 256) -> tuple[FakeModel, FakeModel]:
    target = FakeModel(ngram_lm(n_vocab=V, seed=seed, order=ORDER), VOCAB, n_ctx=n_ctx)
    draft = FakeModel(ngram_lm(n_vocab=V, seed=seed, order=ORDER, noise=noise), VOCAB, n_ctx=n_ctx)
    return target, draft


def spec(draft_max: int = 4) -> SpeculativeSettings:
    return SpeculativeSettings(length=DraftLengthSettings(draft_max=draft_max, fixed=True))


def fresh(target: FakeModel, prompt: Sequence[int], *, max_tokens: int, stop: Sequence[str] = ()) -> Generation:
    """The same request on new, empty caches: what a reused run must reproduce."""
    t = FakeModel(target.lm, target.vocab, n_ctx=target.n_ctx)
    return generate(target=t, prompt=prompt, max_tokens=max_tokens, stop=stop).run()


def consistent(target: FakeModel, draft: FakeModel | None, history: Sequence[int], *, draft_max: int = 4) -> None:
    """The target's cache holds a prefix of the greedy history (with accepted tokens not yet
    emitted when a generation stopped mid-round); the draft's, such a prefix and at most one
    round's drafts (it drops rejected ones when it next syncs)."""
    assert target.kv == list(history[: len(target.kv)])
    if draft is not None:
        assert len(draft.kv) - common_prefix(draft.kv, history) <= draft_max - 1


def turn(history: list[int], new: Sequence[int]) -> list[int]:
    return [*history, *new]


def test_common_prefix() -> None:
    assert common_prefix([], [1]) == 0
    assert common_prefix([1, 2, 3], [1, 2, 4]) == 2
    assert common_prefix([1, 2], [1, 2, 3]) == 2
    assert common_prefix((1, 2, 3), [1, 2, 3]) == 3
    assert common_prefix([5], [6]) == 0


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 3), max_size=60), st.lists(st.integers(0, 3), max_size=60), st.booleans())
def test_common_prefix_is_the_naive_scan(a: list[int], b: list[int], as_tuple: bool) -> None:
    naive = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    assert common_prefix(tuple(a) if as_tuple else a, b) == naive
    assert common_prefix(a, a + b) == len(a)


@pytest.mark.parametrize("kind", ["model", "lookup", "none"])
def test_three_turns_reuse_the_prefix_and_decode_only_the_suffix(kind: str) -> None:
    target, draft = models(seed=1)
    drafter = {"model": ModelDrafter(draft), "lookup": LookupDrafter(), "none": None}[kind]
    prompt = [1, 2, 3, 4, 5, 6]
    for i, new in enumerate(([7, 8], [9, 10, 11], [12])):
        prompt = turn(prompt, new) if i else prompt
        target.decodes.clear()
        draft.decodes.clear()
        cached_before = common_prefix(target.kv, prompt)
        draft_before = common_prefix(draft.kv, prompt[:-1])
        gen = generate(target=target, prompt=prompt, drafters=_ds(drafter), max_tokens=12, speculative=spec()).run()
        assert gen.tokens == fresh(target, prompt, max_tokens=12).tokens
        assert gen.tokens == greedy_reference(target.lm, VOCAB, prompt, max_tokens=12, n_ctx=256)
        # all of the last turn but its last emitted token (never decoded: a generation ends on it)
        assert gen.stats.cached_tokens == cached_before == (0 if i == 0 else len(prompt) - len(new) - 1)
        assert gen.stats.prompt_tokens == len(prompt)
        # the prefill decoded the suffix only, on the target and on the draft model
        assert target.decodes[0] == (len(prompt) - cached_before, "last")
        if kind == "model":
            assert draft.decodes[0] == (len(prompt) - 1 - draft_before, "none")
            assert draft_before >= (0 if i == 0 else len(prompt) - len(new) - 1 - 3)
        consistent(target, draft if kind == "model" else None, [*prompt, *gen.tokens])
        assert len(target.kv) == len(prompt) + len(gen.tokens) - 1
        prompt = [*prompt, *gen.tokens]


def test_the_same_prompt_twice_redecodes_only_its_last_token() -> None:
    target, draft = models(seed=2)
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    first = generate(target=target, prompt=prompt, drafters=(ModelDrafter(draft),), max_tokens=10).run()
    target.decodes.clear()
    again = generate(target=target, prompt=prompt, drafters=(ModelDrafter(draft),), max_tokens=10).run()
    assert again.tokens == first.tokens
    assert again.stats.cached_tokens == len(prompt) - 1 and target.decodes[0] == (1, "last")


def test_cache_prompt_false_clears_both_caches_and_decodes_everything() -> None:
    target, draft = models(seed=3)
    drafter = ModelDrafter(draft)
    prompt = [5, 4, 3, 2, 1]
    generate(target=target, prompt=prompt, drafters=_ds(drafter), max_tokens=8).run()
    target.decodes.clear()
    draft.decodes.clear()
    gen = generate(target=target, prompt=prompt, drafters=_ds(drafter), max_tokens=8, cache_prompt=False).run()
    assert gen.stats.cached_tokens == 0
    assert target.decodes[0] == (len(prompt), "last") and draft.decodes[0] == (len(prompt) - 1, "none")


def test_reuse_after_rollback_of_rejected_drafts() -> None:
    target, draft = models(seed=5, noise=2.0)  # a poor draft: rejections in most rounds
    drafter = ModelDrafter(draft)
    prompt = [7, 8, 9]
    first = generate(target=target, prompt=prompt, drafters=_ds(drafter), max_tokens=40, speculative=spec(6)).run()
    assert first.stats.accepted < first.stats.drafted
    history = [*prompt, *first.tokens]
    consistent(target, draft, history, draft_max=6)
    nxt = turn(history, [1, 2])
    gen = generate(target=target, prompt=nxt, drafters=_ds(drafter), max_tokens=30, speculative=spec(6)).run()
    assert gen.stats.cached_tokens == len(history) - 1  # all but the last emitted token (never decoded)
    assert gen.tokens == fresh(target, nxt, max_tokens=30).tokens


@pytest.mark.parametrize("steps", [1, 2, 5, 9])
def test_reuse_after_a_cancelled_generation(steps: int) -> None:
    target, draft = models(seed=4)
    drafter = ModelDrafter(draft)
    prompt = [1, 2, 3]
    gen = generate(target=target, prompt=prompt, drafters=_ds(drafter), max_tokens=50, speculative=spec(4))
    for _ in range(steps):
        next(gen)
    gen.close()
    assert gen.stats.stop_reason == "cancelled"
    # the caches hold a prefix of prompt + what was generated so far, and no draft past it
    full = fresh(target, prompt, max_tokens=50).tokens
    consistent(target, draft, [*prompt, *full])
    nxt = turn([*prompt, *gen.tokens], [11])
    cached = common_prefix(target.kv, nxt)
    again = generate(target=target, prompt=nxt, drafters=_ds(drafter), max_tokens=20).run()
    assert again.stats.cached_tokens == min(cached, len(nxt) - 1) >= len(prompt)
    assert again.tokens == fresh(target, nxt, max_tokens=20).tokens


def test_reuse_after_a_stop_string() -> None:
    vocab = FakeVocab([bytes([97 + i]) for i in range(V)])
    lm = ngram_lm(n_vocab=V, seed=6, order=ORDER)
    target = FakeModel(lm, vocab)
    drafter = ModelDrafter(FakeModel(lm, vocab))  # accepts everything: the stop lands mid-round
    prompt = [0, 1, 2]
    probe = fresh(target, prompt, max_tokens=30).tokens
    stop = "".join(chr(97 + t) for t in probe[10:12])  # two tokens of the text: a stop string
    gen = generate(target=target, prompt=prompt, drafters=_ds(drafter), max_tokens=30, stop=[stop],
                   speculative=spec(8)).run()
    assert gen.stats.stop_reason == "stop" and stop not in gen.text
    # the caller goes on with the text before the stop, as a chat history would
    kept = gen.tokens[: len(gen.tokens) - 2]
    nxt = turn([*prompt, *kept], [5, 6])
    consistent(target, drafter.ctx, [*prompt, *probe], draft_max=8)  # type: ignore[arg-type]
    again = generate(target=target, prompt=nxt, drafters=_ds(drafter), max_tokens=20).run()
    assert again.stats.cached_tokens == len(prompt) + len(kept)
    assert again.tokens == fresh(target, nxt, max_tokens=20).tokens


def test_reuse_after_the_context_filled_up_and_a_refused_prompt_keeps_the_cache() -> None:
    target, draft = models(seed=7, n_ctx=40, noise=0.3)
    drafter = ModelDrafter(draft)
    prompt = [1, 2, 3, 4, 5]
    gen = generate(target=target, prompt=prompt, drafters=_ds(drafter), max_tokens=1000, speculative=spec(8)).run()
    assert gen.stats.stop_reason == "context" and len(target.kv) == 39
    held = list(target.kv)
    with pytest.raises(UserError, match="context holds 40"):
        generate(target=target, prompt=[*prompt, *gen.tokens, 3], drafters=_ds(drafter))
    assert target.kv == held  # refused before touching any cache
    nxt = [*prompt, *gen.tokens[:20], 9]  # a shorter conversation sharing the start
    again = generate(target=target, prompt=nxt, drafters=_ds(drafter), max_tokens=100, speculative=spec(8)).run()
    assert again.stats.cached_tokens == len(nxt) - 1
    assert again.tokens == fresh(target, nxt, max_tokens=100).tokens
    assert again.stats.stop_reason == "context"


class Flaky(FakeModel):
    """A fake whose n-th decode, or n-th logits read, raises (a llama.cpp error mid-generation)."""

    fail_decode_at: int = -1
    fail_logits_at: int = -1
    n_decode: int = 0
    n_logits: int = 0

    def decode(self, tokens, *, logits="last", wait=True) -> None:
        self.n_decode += 1
        if self.n_decode == self.fail_decode_at:
            raise RuntimeError("llama_decode failed")
        super().decode(tokens, logits=logits)

    def logits(self, i: int = -1) -> np.ndarray:
        self.n_logits += 1
        if self.n_logits == self.fail_logits_at:
            raise RuntimeError("no logits")
        return super().logits(i)


@pytest.mark.parametrize("where", ["target decode", "target logits", "draft decode"])
@pytest.mark.parametrize("at", [1, 3, 6])
def test_reuse_after_an_error_mid_generation(where: str, at: int) -> None:
    lm_t = ngram_lm(n_vocab=V, seed=8, order=ORDER)
    lm_d = ngram_lm(n_vocab=V, seed=8, order=ORDER, noise=1.0)
    target, draft = Flaky(lm_t, VOCAB), Flaky(lm_d, VOCAB)
    victim = draft if where == "draft decode" else target
    if where.endswith("logits"):
        victim.fail_logits_at = at + 1  # after a verify decode: the target still holds the drafts
    else:
        victim.fail_decode_at = at + 1
    drafter = ModelDrafter(draft)
    prompt = [4, 5, 6, 7]
    gen = generate(target=target, prompt=prompt, drafters=_ds(drafter), max_tokens=40, speculative=spec(4))
    with pytest.raises(RuntimeError):
        for _ in gen:
            pass
    # the fake's kv IS its cache: it holds the history so far, plus at most one round's drafts
    # when the error came between the verify decode and the rollback
    history = [*prompt, *gen.tokens]
    held = list(target.kv)
    assert len(held) - common_prefix(held, history) <= (4 if where == "target logits" else 0)
    assert common_prefix(held, history) >= len(prompt) - 1
    nxt = turn(history, [1])
    again = generate(target=target, prompt=nxt, drafters=_ds(drafter), max_tokens=20).run()
    assert again.stats.cached_tokens == min(common_prefix(held, nxt), len(nxt) - 1)
    assert again.tokens == fresh(target, nxt, max_tokens=20).tokens
    consistent(target, draft, [*nxt, *fresh(target, nxt, max_tokens=40).tokens])


def test_model_drafter_prefill_keeps_the_common_prefix_and_drops_stale_drafts() -> None:
    _, draft = models(seed=9)
    draft.decode([1, 2, 3, 30, 31], logits="none")  # a history, then drafts a verify rejected
    draft.decodes.clear()
    drafter = ModelDrafter(draft)
    drafter.prefill([1, 2, 3, 4, 5, 6])
    assert draft.kv == [1, 2, 3, 4, 5] and draft.decodes == [(2, "none")]
    drafter.reset()
    assert draft.kv == []
