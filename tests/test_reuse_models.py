"""Prefix reuse on real llama.cpp contexts: tiny generated models (Q8_0, batch-invariant on the
CPU, see conftest.py) and the embedded default pair. A conversation's later turns decode only
their new suffix and give the same tokens as a pair that clears its caches (cache_prompt=False);
the logits after a reused prefix are bit-identical to those of the whole prompt decoded at once.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ggufspec.loop.lookup import LookupDrafter
from ggufspec.loop.speculation import DraftLengthSettings, SpeculativeSettings
from ggufspec.runtime import PAIR_DRAFTERS, SpeculativePair, load_pair
from ggufspec.settings import ContextSettings, PairSettings

QUESTIONS = [
    "Hi! Can you tell me a joke about cats?",
    "Now tell me one about dogs, please.",
    "Which of the two was funnier, and why?",
]
SPEC = SpeculativeSettings(length=DraftLengthSettings(draft_max=4, always_draft=True))


def _open(target: Path, draft: Path | str | None, n_ctx: int = 512) -> SpeculativePair:
    return load_pair(target=str(target), draft=str(draft) if draft else "none",
                     settings=PairSettings(context=ContextSettings(n_ctx=n_ctx, n_threads=1)))


def conversation(pair: SpeculativePair, *, cache_prompt: bool, max_tokens: int = 24, drafters=PAIR_DRAFTERS) -> list:
    """Three chat turns; each turn's prompt is the whole conversation so far."""
    messages: list[dict] = []
    outs = []
    for q in QUESTIONS:
        messages.append({"role": "user", "content": q})
        gen = pair.generate(messages=messages, max_tokens=max_tokens, speculative=SPEC, cache_prompt=cache_prompt,
                            drafters=drafters)
        gen.run()
        outs.append(gen)
        messages.append({"role": "assistant", "content": gen.text})
    return outs


@pytest.mark.parametrize("draft", ["model", "lookup", "none"])
def test_a_three_turn_conversation_reuses_its_prefix_and_matches_a_cold_one(tiny_target_q8, tiny_draft_q8,
                                                                             draft: str) -> None:
    with _open(tiny_target_q8, tiny_draft_q8 if draft == "model" else draft) as pair:
        warm = conversation(pair, cache_prompt=True)
        cold = conversation(pair, cache_prompt=False, drafters=())  # the target alone, cold
    assert [g.tokens for g in warm] == [g.tokens for g in cold]
    assert [g.stats.cached_tokens for g in cold] == [0, 0, 0]
    assert warm[0].stats.cached_tokens == 0
    for prev, g in zip(warm, warm[1:]):
        # the previous turn's prompt at least (the rendered reply may re-tokenize differently)
        assert g.stats.cached_tokens >= prev.stats.prompt_tokens
        assert g.stats.cached_tokens < g.stats.prompt_tokens


def test_reuse_after_a_cancelled_generation_and_a_stop_string(tiny_target_q8, tiny_draft_q8) -> None:
    with _open(tiny_target_q8, tiny_draft_q8) as pair:
        prompt = pair.encode(prompt="Once upon a time, in a small village by the sea,")
        gen = pair.generate(prompt_tokens=prompt, max_tokens=40, speculative=SPEC)
        for _ in range(5):
            next(gen)
        gen.close()
        follow = [*prompt, *gen.tokens, *pair.encode(prompt=" then")[1:]]
        warm = pair.generate(prompt_tokens=follow, max_tokens=30, speculative=SPEC).run()
        assert warm.stats.cached_tokens >= len(prompt) + len(gen.tokens) - 1
        stop = warm.text[10:14]
        stopped = pair.generate(prompt_tokens=follow, max_tokens=30, speculative=SPEC, stop=[stop]).run()
        assert stopped.stats.stop_reason == "stop"
        after = [*follow, *pair.target_model.tokenize(stopped.text, add_special=False, parse_special=False)]
        warm2 = pair.generate(prompt_tokens=after, max_tokens=30, speculative=SPEC).run()
        assert warm2.stats.cached_tokens >= len(follow)
        cold = pair.generate(prompt_tokens=follow, max_tokens=30, speculative=SPEC, cache_prompt=False).run()
        cold2 = pair.generate(prompt_tokens=after, max_tokens=30, speculative=SPEC, cache_prompt=False).run()
    assert warm.tokens == cold.tokens and warm2.tokens == cold2.tokens


def test_reset_clears_the_target_and_every_drafter(tiny_target_q8, tiny_draft_q8) -> None:
    with _open(tiny_target_q8, tiny_draft_q8) as pair:
        pair.generate(prompt="Hello there", max_tokens=8, speculative=SPEC).run()
        assert pair.target_ctx.tokens and pair.drafters[0].ctx.tokens  # type: ignore[union-attr]
        pair.reset()
        assert pair.target_ctx.tokens == () and pair.target_ctx.n_past == 0
        assert pair.drafters[0].ctx.tokens == ()  # type: ignore[union-attr]
        again = pair.generate(prompt="Hello there", max_tokens=8).run()
        assert again.stats.cached_tokens == 0


def test_a_failed_decode_leaves_the_cache_and_its_tokens_as_they_were(tiny_target_q8) -> None:
    from ggufspec.llama.context import Context
    from ggufspec.llama.model import Model

    model = Model(tiny_target_q8)
    settings = ContextSettings(n_ctx=256, n_batch=16, n_ubatch=16, cache_type_k="f16", cache_type_v="f16",
                               n_threads=1)
    ctx, ref = Context(model, settings=settings), Context(model, settings=settings)
    try:
        good = model.tokenize("The quick brown fox jumps over the lazy dog, again and again. " * 3)
        assert len(good) > 16
        bad = [*good[:20], model.n_vocab + 5]  # two chunks of 16: the second holds an invalid id
        with pytest.raises(RuntimeError, match="llama_decode failed"):
            ctx.decode(bad)
        assert ctx.tokens == tuple(good[:16]) and ctx.n_past == 16  # the first chunk decoded, no more
        ctx.decode(good[16:])  # continues at position 16: the cache really holds 16 tokens
        ref.decode(good)
        assert np.array_equal(ctx.logits(-1), ref.logits(-1))
    finally:
        ctx.close(), ref.close(), model.close()


# ---- the embedded default pair (real SmolLM2 weights) ----------------------------------------------


@pytest.mark.slow
def test_default_pair_logits_after_a_reused_prefix_are_bit_identical() -> None:
    from ggufspec.llama.context import Context
    from ggufspec.llama.model import Model
    from ggufspec.models.embedded import default_pair_paths

    model = Model(default_pair_paths()[0])
    settings = ContextSettings(n_ctx=1024, cache_type_k="q8_0", cache_type_v="q8_0", n_threads=2)
    whole, reused = Context(model, settings=settings), Context(model, settings=settings)
    try:
        prompt = model.tokenize("The history of the printing press begins with movable type. " * 40)[:600]
        other = model.tokenize(" A different ending that shares nothing with the first.", add_special=False)
        whole.decode(prompt)
        # a 300-token prefix (>= 256: the one-row path split per thread on an f16 cache) reused
        # from an earlier request that went elsewhere, then the suffix on its own
        reused.decode([*prompt[:300], *other])
        reused.truncate(300)
        reused.decode(prompt[300:])
        assert reused.tokens == whole.tokens == tuple(prompt)
        assert np.array_equal(reused.logits(-1), whole.logits(-1))
        # and the last token alone, as a generation does when the whole prompt is cached
        reused.truncate(len(prompt) - 1)
        reused.decode(prompt[-1:])
        assert np.array_equal(reused.logits(-1), whole.logits(-1))
    finally:
        whole.close(), reused.close(), model.close()


@pytest.mark.slow
def test_default_pair_three_turn_conversation_reuses_and_matches_a_fresh_pair() -> None:
    settings = PairSettings(context=ContextSettings(n_ctx=1024))
    with load_pair(settings=settings) as pair:
        warm = conversation(pair, cache_prompt=True, max_tokens=48)
        looked = conversation(pair, cache_prompt=True, max_tokens=48, drafters=(LookupDrafter(),))
    with load_pair(settings=settings) as fresh:
        cold = conversation(fresh, cache_prompt=False, max_tokens=48, drafters=())
    assert [g.tokens for g in warm] == [g.tokens for g in cold] == [g.tokens for g in looked]
    assert all(g.stats.cached_tokens >= p.stats.prompt_tokens for p, g in zip(warm, warm[1:]))
    # the lookup run started on the caches the first conversation left: turn 1 reused its prompt
    assert looked[0].stats.cached_tokens == looked[0].stats.prompt_tokens - 1
    assert sum(g.stats.drafted for g in warm) > 0


def test_a_logits_row_read_is_the_rows_values_whichever_view_it_reuses(tiny_target_q8) -> None:
    # a row's numpy view is kept per row address (llama.context.RowViews): after later decodes of
    # other shapes each row read must still be that row, as a fresh pointer read gives it
    import ctypes

    from ggufspec.llama.context import Context, RowViews
    from ggufspec.llama.devices import cpu_only
    from ggufspec.llama.lib import llama
    from ggufspec.llama.model import Model

    assert cpu_only()  # (no GPU, no RPC worker here: decodes run without llama_synchronize)
    model = Model(tiny_target_q8)
    settings = ContextSettings(n_ctx=256, n_batch=16, n_ubatch=16, cache_type_k="f16", cache_type_v="f16",
                               n_threads=1)
    ctx = Context(model, settings=settings)
    try:
        toks = model.tokenize("The quick brown fox jumps over the lazy dog, again and again. " * 2)
        for n, mode in ((1, "last"), (5, "all"), (1, "last"), (9, "all"), (3, "all")):
            ctx.decode(toks[ctx.n_past:ctx.n_past + n], logits=mode)
            for i in range(n if mode == "all" else 1):
                ptr = llama.llama_get_logits_ith(ctx._ptr, i if mode == "all" else -1)
                fresh = np.ctypeslib.as_array(ptr, shape=(model.n_vocab,)).copy()
                assert np.array_equal(ctx.logits(i if mode == "all" else -1), fresh)
        assert ctx.logits(0) is ctx.logits(0)  # one view per row, kept
    finally:
        ctx.close(), model.close()
    views = RowViews(4, keep=2)
    rows = (ctypes.c_float * 8)(*range(8))
    first = views(ctypes.addressof(rows))
    assert views(ctypes.addressof(rows)) is first and list(views(ctypes.addressof(rows) + 16)) == [4, 5, 6, 7]
    views(ctypes.addressof(rows) + 4)  # a third address: the kept views are dropped first
    assert views(ctypes.addressof(rows)) is not first and list(views(ctypes.addressof(rows))) == [0, 1, 2, 3]
