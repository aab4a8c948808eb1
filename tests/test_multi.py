"""A multi-sequence context (serve --parallel) on the real default target: a merged decode whose
sequences leave a gap is filled with a throwaway token of the idle sequence, and every sequence's
logits stay bit-identical to a one-sequence context's (the exact kernels, a q8_0 cache)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from ggufspec.llama.context import Context
from ggufspec.llama.model import Model
from ggufspec.llama.multi import MultiContext, _Chunk
from ggufspec.loop.batcher import Request
from ggufspec.loop.drafters import common_prefix
from ggufspec.models.embedded import exact_target_quant, resolve_embedded
from ggufspec.settings import ContextSettings

pytestmark = pytest.mark.slow
SETTINGS = ContextSettings(n_ctx=256, cache_type_k="q8_0", cache_type_v="q8_0")


@pytest.fixture(scope="module")
def model():
    m = Model(resolve_embedded("smollm2", exact_target_quant()))
    yield m
    m.close()


def _one_row(multi: MultiContext, seqs: list[int], tokens: dict[int, int]) -> dict[int, np.ndarray]:
    """One merged decode of one token for each of `seqs` (what the batcher hands `_run`)."""
    reqs = [Request(key=s, tokens=(tokens[s],), payload=_Chunk(s, multi.views[s].n_past, (True,))) for s in seqs]
    multi._run(reqs)
    for s in seqs:
        multi.views[s]._tokens.append(tokens[s])
    return {r.key: r.result[0] for r in reqs}


def test_a_gap_between_sequences_is_filled_and_leaves_every_cache_exact(model) -> None:
    multi = MultiContext(model, settings=SETTINGS, n_seq=3, lock=threading.Lock())
    prompts = {s: model.tokenize(text, add_special=True, parse_special=False) for s, text in
               enumerate(("The printing press spread across Europe", "Photosynthesis is the process by which",
                          "Once upon a time, in a small village"))}
    refs = {s: Context(model, settings=SETTINGS) for s in prompts}
    try:
        for s, p in prompts.items():
            multi.views[s].decode(p, logits="last")
            refs[s].decode(p, logits="last")
        nxt = {s: int(np.argmax(refs[s].logits(-1))) for s in prompts}
        # sequences 0 and 2 go on while 1 sits idle: each decode takes a throwaway token of 1
        for _ in range(4):
            rows = _one_row(multi, [0, 2], nxt)
            for s in (0, 2):
                refs[s].decode([nxt[s]], logits="last")
                assert np.array_equal(rows[s], refs[s].logits(-1)), s
                nxt[s] = int(np.argmax(rows[s]))
        assert multi.filled == 4
        assert multi.views[1].n_past == len(prompts[1])
        # sequence 1 resumes where it was: its cache holds its prompt only, bit for bit
        for _ in range(3):
            rows = _one_row(multi, [1], nxt)
            refs[1].decode([nxt[1]], logits="last")
            assert np.array_equal(rows[1], refs[1].logits(-1))
            nxt[1] = int(np.argmax(rows[1]))
        rows = _one_row(multi, [0, 1, 2], nxt)  # no gap: nothing filled
        assert multi.filled == 4
        for ctx in (*refs.values(), *multi.views):  # what a draft model asks of a cache each round
            held = list(ctx.tokens)
            for seq in (held, [*held, 7], held[:-2], [*held[:3], held[3] + 1, *held[4:]], []):
                assert ctx.common_prefix(seq) == common_prefix(held, seq)
    finally:
        for r in refs.values():
            r.close()
        multi.close()
