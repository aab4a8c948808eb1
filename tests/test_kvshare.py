"""A draft model that takes the target's KV cache (ggufspec.loop.kvshare): when it may, when it pays,
and that the loop stays exact with it: on fakes (the loop, sampling) and on real tiny models."""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from fakes import FakeClock, FakeModel, FakeVocab, assert_follows, greedy_reference, letters_vocab, ngram_lm
from tiny_models import write_tiny_llama

from ggufspec.ggufinfo import read_model_info
from ggufspec.loop import clock
from ggufspec.loop.acceptance import AcceptRule
from ggufspec.loop.drafters import common_prefix
from ggufspec.loop.model_drafter import ModelDrafter
from ggufspec.loop.lookup import LookupDrafter
from ggufspec.loop.engine import generate
from ggufspec.loop.kvshare import IMPORT_TOKENS_PER_ROW, import_pays, shared_kv_refusal
from ggufspec.loop.sampling import SamplingSettings
from ggufspec.loop.speculation import DraftLengthSettings, SpeculativeSettings

V = 40
VOCAB = letters_vocab(V)


@pytest.fixture(autouse=True)
def fake_clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    c = FakeClock()
    monkeypatch.setattr(clock, "now", c.now)
    return c


def spec(draft_max: int, *, fixed: bool = False, always_draft: bool = False, **kw) -> SpeculativeSettings:
    return SpeculativeSettings(length=DraftLengthSettings(draft_max=draft_max, fixed=fixed, always_draft=always_draft), **kw)


# ---- when it may, when it pays (pure) -----------------------------------------------------------


def test_an_import_pays_when_it_spares_a_decode_row_per_2048_tokens_held() -> None:
    assert import_pays(gained=1, held=IMPORT_TOKENS_PER_ROW)  # the last accepted draft token
    assert not import_pays(gained=1, held=IMPORT_TOKENS_PER_ROW + 1)  # a long history: decode that one
    assert import_pays(gained=3, held=3 * IMPORT_TOKENS_PER_ROW)
    assert import_pays(gained=300, held=301)  # a prompt's prefill
    assert not import_pays(gained=0, held=10) and not import_pays(gained=-2, held=10)


def test_only_the_same_network_may_share_the_cache(tmp_path: Path) -> None:
    base = read_model_info(write_tiny_llama(tmp_path / "a.gguf", vocab="bytes", seed=0))
    other_weights = read_model_info(write_tiny_llama(tmp_path / "b.gguf", vocab="bytes", seed=3, noise=0.5))
    half = read_model_info(write_tiny_llama(tmp_path / "c.gguf", vocab="bytes", seed=0, dtype="F16"))
    deeper = read_model_info(write_tiny_llama(tmp_path / "d.gguf", vocab="bytes", seed=0, n_layer=3))
    fewer_kv = read_model_info(write_tiny_llama(tmp_path / "e.gguf", vocab="bytes", seed=0, n_head_kv=4))
    wider_ff = read_model_info(write_tiny_llama(tmp_path / "f.gguf", vocab="bytes", seed=0, n_ff=256))
    longer = read_model_info(write_tiny_llama(tmp_path / "g.gguf", vocab="bytes", seed=0, n_ctx_train=1024))
    assert shared_kv_refusal(base, half) is None  # another encoding of the same network
    assert shared_kv_refusal(base, other_weights) is None  # same network, other weights: the rate decides
    assert "layer count" in shared_kv_refusal(base, deeper)
    assert "KV heads" in shared_kv_refusal(base, fewer_kv)
    assert "tensors differ" in shared_kv_refusal(base, wider_ff)
    assert "trained context" in shared_kv_refusal(base, longer)


# ---- the loop with an importing draft model (fakes) ---------------------------------------------


def _pair(seed: int, *, noise: float = 0.6, n_ctx: int = 256, fake_clock: FakeClock | None = None):
    t_lm = ngram_lm(n_vocab=V, seed=seed)
    d_lm = ngram_lm(n_vocab=V, seed=seed, noise=noise)
    target = FakeModel(t_lm, VOCAB, n_ctx=n_ctx, clock=fake_clock)
    draft = FakeModel(d_lm, VOCAB, n_ctx=n_ctx, clock=fake_clock, t_1=0.002, t_row=0.0005)
    return target, draft


def test_an_importing_draft_decodes_only_its_own_proposals(fake_clock: FakeClock) -> None:
    for seed in range(8):
        target, draft = _pair(seed, fake_clock=fake_clock)
        prompt = [seed % V, (3 * seed + 1) % V, 5, 7, 11]
        ref = greedy_reference(target.lm, VOCAB, prompt, max_tokens=48, n_ctx=target.n_ctx)
        for draft_max, fixed, always in itertools.product((1, 3, 8), (True, False), (True, False)):
            target.clear()
            draft.clear()
            draft.decodes.clear()
            drafter = ModelDrafter(draft, kv_source=target)
            gen = generate(target=target, prompt=prompt, drafters=[drafter, LookupDrafter()], max_tokens=48,
                           speculative=spec(draft_max, fixed=fixed, always_draft=always), cache_prompt=False).run()
            assert gen.tokens == ref, (seed, draft_max, fixed, always)
            # no prefill and no catch-up: every decode of the draft is one token, its own proposal's
            # (or the round's last history token), and the history came from the target's cache
            assert draft.decodes and all(rows == 1 for rows, _ in draft.decodes), draft.decodes
            assert drafter.imports >= 1
            # it may still hold its last round's rejected proposals, until its next sync
            history = [*prompt, *gen.tokens]
            assert len(draft.kv) - common_prefix(draft.kv, history) <= max(0, draft_max - 1)


def test_the_draft_decodes_what_it_lacks_where_an_import_would_cost_more() -> None:
    target, draft = _pair(1, n_ctx=8192)
    history = list(np.random.default_rng(0).integers(0, V, size=2 * IMPORT_TOKENS_PER_ROW + 10))
    target.decode(history[:-1], logits="none")
    draft.decode(history[:-3], logits="none")  # 2 tokens behind, the target holds > 4,096
    drafter = ModelDrafter(draft, kv_source=target)
    assert drafter.backlog(history) == 3
    drafter.propose(history, draft_len=1)
    assert drafter.imports == 0 and draft.decodes[-1][0] == 3  # decoded its 3 missing tokens itself
    draft.truncate(10)  # far behind: importing pays
    assert drafter.backlog(history) == 1
    drafter.propose(history, draft_len=1)
    assert drafter.imports == 1 and draft.decodes[-1][0] == 1


def test_a_sync_reaches_again_when_a_cache_moved_since_the_backlog_was_asked() -> None:
    # `backlog` keeps its answer for the same round's sync; a cache that moved in between voids it
    target, draft = _pair(1, n_ctx=256)
    history = list(np.random.default_rng(1).integers(0, V, size=60))
    target.decode(history[:-1], logits="none")
    draft.decode(history[:-1], logits="none")
    drafter = ModelDrafter(draft, kv_source=target)
    assert drafter.backlog(history) == 1
    draft.truncate(20)  # the draft's cache lost 39 tokens after the backlog was asked
    drafter.propose(history, draft_len=1)
    assert drafter.imports == 1 and draft.decodes[-1][0] == 1  # it imported them, as a fresh reach says
    assert draft.kv[:len(history)] == history
    history = [*history, *drafter.propose(history, draft_len=1).tokens, 3]
    assert drafter.backlog(history) == 2
    same = list(history)  # an equal history, another list: reached afresh, the same answer
    drafter.propose(same, draft_len=1)
    assert draft.kv[:len(same)] == same


def test_a_refused_cache_is_an_error_not_a_silent_cold_draft() -> None:
    target, draft = _pair(2, n_ctx=64)
    big = FakeModel(target.lm, VOCAB, n_ctx=128)
    big.decode(list(range(5)) * 20, logits="none")  # 100 tokens: more than the draft's context holds
    drafter = ModelDrafter(draft, kv_source=big)
    with pytest.raises(RuntimeError, match="refused the target's KV cache"):
        drafter.propose(list(range(5)) * 20 + [1], draft_len=2)


@pytest.mark.parametrize("rule", [AcceptRule.REJECTION, AcceptRule.MATCH], ids=["rejection", "match"])
def test_sampled_sequences_with_an_importing_draft_follow_the_target_alone(rule: AcceptRule, fake_clock: FakeClock) -> None:
    n_vocab, n_tokens, runs = 4, 4, 4000
    vocab = FakeVocab([bytes([97 + i]) for i in range(n_vocab)])
    t_lm = ngram_lm(n_vocab=n_vocab, seed=5, peak=1.0)
    d_lm = ngram_lm(n_vocab=n_vocab, seed=5, peak=1.0, noise=1.0)
    sampling_kw = {"temperature": 0.8, "top_p": 0.95}
    prompt = [1, 2, 0]
    exact: dict[tuple, float] = {(): 1.0}
    from ggufspec.loop.sampling import probabilities

    for _ in range(n_tokens):  # the target alone's distribution over sequences, enumerated
        nxt: dict[tuple, float] = {}
        for seq, pr in exact.items():
            p = probabilities(t_lm([*prompt, *seq]), SamplingSettings(**sampling_kw))
            for t in np.flatnonzero(p):
                nxt[(*seq, int(t))] = pr * float(p[t])
        exact = nxt
    target = FakeModel(t_lm, vocab, clock=fake_clock)
    drafter = ModelDrafter(FakeModel(d_lm, vocab, clock=fake_clock), kv_source=target)
    counts: Counter = Counter()
    for seed in range(runs):
        gen = generate(target=target, prompt=prompt, drafters=[drafter], max_tokens=n_tokens,
                       sampling=SamplingSettings(seed=seed, **sampling_kw),
                       speculative=spec(3, fixed=True, accept=rule)).run()
        counts[tuple(gen.tokens)] += 1
    assert drafter.imports > 0
    assert_follows(counts, exact, runs)


def test_a_draft_reports_its_first_call_apart_from_the_one_row_calls_after_it(fake_clock: FakeClock) -> None:
    # The controller prices K drafts at f + K b (ggufspec.loop.control): a round's first call decodes
    # what the last round left (2 rows after a full accept) and, sharing the target's cache, the
    # import; the calls after it decode one row each
    target, draft = _pair(0, fake_clock=fake_clock)
    prompt = [1, 2, 3, 4, 5]
    drafter = ModelDrafter(draft)
    drafter.prefill(prompt)
    d = drafter.propose(prompt, draft_len=4)
    assert d.decode_calls == 4 and d.first_s == pytest.approx(draft.t_1)
    assert d.decode_s - d.first_s == pytest.approx(3 * draft.t_1)
    # all 4 accepted, and the target's bonus token: the draft lacks its own last proposal and the bonus
    d2 = drafter.propose([*prompt, *d.tokens, 0], draft_len=3)
    assert d2.decode_calls == 3 and d2.first_s == pytest.approx(draft.t_1 + draft.t_row)
    assert d2.decode_s - d2.first_s == pytest.approx(2 * draft.t_1)
    # a free drafter has no first call
    assert LookupDrafter().propose([1, 2, 3, 1, 2], draft_len=2).first_s is None
