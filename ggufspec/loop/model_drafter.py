"""A draft model as drafter: a small model that drafts autoregressively, its KV cache kept in step
with the history (or imported from the target's: ggufspec.loop.kvshare)."""

from __future__ import annotations

from typing import Protocol, Sequence

import numpy as np

from ggufspec.loop import clock
from ggufspec.loop.drafters import Draft, common_prefix, top_probability
from ggufspec.loop.kvshare import import_pays
from ggufspec.loop.sampling import SamplingSettings, probabilities, sample
from ggufspec.loop.target import Target


class KVSource(Protocol):
    """A context whose KV cache a draft model may import (ggufspec.loop.kvshare): the target's."""

    @property
    def tokens(self) -> Sequence[int]: ...

    @property
    def n_past(self) -> int: ...

    def common_prefix(self, seq: Sequence[int]) -> int:
        """How many leading tokens of `seq` its cache holds (`Target.common_prefix`)."""
        ...

    def state(self) -> bytes:
        """Its KV cache as llama.cpp serialises one sequence."""
        ...


class ModelDrafter:
    """A small model that drafts autoregressively, keeping its KV cache in step with the history.

    Its KV cache holds `ctx.tokens` (a prefix of some history, kept by the context itself); each
    round, and at prefill, it rolls back to the longest prefix shared with the new history,
    brings in what is missing, then drafts (a new prompt reuses what the cache holds; `reset()`
    empties it). What is missing it decodes itself, or, with a `kv_source` (the target's context,
    for a draft that is the same network: ggufspec.loop.kvshare), imports from the target's cache
    where that spares it decoding (`kvshare.import_pays`): a prompt's prefill, a catch-up after
    rounds it sat out, and the last accepted draft token of a fully accepted round.
    Drafts are argmax unless the round asks for sampled ones (rejection sampling at T > 0),
    drawn from q shaped by the same sampling settings as the target's p (then kept as q rows).
    """

    free = False
    grades = ()

    def __init__(self, context: Target, *, name: str = "model", kv_source: KVSource | None = None,
                 one_row: bool = False) -> None:
        self.ctx = context  # the draft model's context (llama.Context, or a fake in tests)
        self.name = name
        self.kv_source = kv_source
        # one_row: the 2 tokens a fully accepted round leaves go in as two one-row decodes, each
        # with its logits row, so every drafting decode has the same graph. For a draft on a GPU
        # (ggufspec.pairload.draft_one_row): llama.cpp's CUDA backend re-warms its graph (runs
        # uncaptured, then captures again) each time a decode's shape changes (rows, or outputs),
        # and a launch-bound draft pays that every round.
        self.one_row = one_row
        self.imports = 0  # imports of the target's cache so far
        # `backlog`'s answer for the `_sync` of the same round, once: (history, its length, the
        # two caches' lengths, the answer): a round asks both caches once, not twice
        self._reached: tuple[Sequence[int], int, int, int, tuple[int, int]] | None = None

    @property
    def kv_shared(self) -> bool:
        return self.kv_source is not None

    def copy(self, context: Target, *, kv_source: KVSource | None) -> ModelDrafter:
        """This drafter (its name and settings) on another context of the same model."""
        return ModelDrafter(context, name=self.name, kv_source=kv_source, one_row=self.one_row)

    def continue_after(self, history: Sequence[int], drafts: Sequence[int], *, draft_len: int) -> Draft:
        return Draft((), ())  # a model's continuation is its next round: drafting costs

    def reset(self) -> None:
        self.ctx.clear()
        self._reached = None

    def prefill(self, prompt: Sequence[int]) -> float:
        # Everything but the last prompt token, which is decoded with the first draft step, unless
        # the target's cache brought it in. What the cache already holds is kept (prefix reuse).
        t = clock.now()
        pending, _ = self._sync(prompt)
        self.ctx.decode(pending[:-1], logits="none")
        return clock.now() - t

    def backlog(self, history: Sequence[int]) -> int:
        reach = self._reach(history)
        self._reached = (history, len(history), self.ctx.n_past, self._source_len(), reach)
        return len(history) - reach[1]

    def _source_len(self) -> int:
        return -1 if self.kv_source is None else self.kv_source.n_past

    def _reach(self, history: Sequence[int]) -> tuple[int, int]:
        """(how much of `history` its own cache holds, how much it can hold without decoding:
        more where importing the target's cache pays)."""
        own = self.ctx.common_prefix(history)
        if self.kv_source is not None:
            c = self.kv_source.common_prefix(history)
            if import_pays(gained=c - own, held=self.kv_source.n_past):
                return own, c
        return own, own

    def _sync(self, history: Sequence[int]) -> tuple[list[int], int]:
        """Roll the KV cache back to the shared prefix, importing the target's where that pays;
        return (the history tokens still to decode, how many the import brought in)."""
        memo, self._reached = self._reached, None
        if (memo is not None and memo[0] is history and memo[1] == len(history) and memo[2] == self.ctx.n_past
                and memo[3] == self._source_len()):  # nothing decoded since `backlog` asked
            own, m = memo[4]
        else:
            own, m = self._reach(history)
        if m > own:
            src = self.kv_source
            assert src is not None
            if not self.ctx.load_state(src.state(), list(src.tokens)):  # type: ignore[attr-defined]
                raise RuntimeError(f"the draft model {self.name} refused the target's KV cache")
            self.imports += 1
        if m < self.ctx.n_past:
            self.ctx.truncate(m)
        return list(history[m:]), m - own

    def propose(
        self,
        history: Sequence[int],
        *,
        draft_len: int,
        draft_p_min: float = 0.0,
        sampled: bool = False,
        sampling: SamplingSettings = SamplingSettings(),
        rng: np.random.Generator | None = None,
    ) -> Draft:
        if draft_len <= 0:
            return Draft((), ())
        if sampled and rng is None:
            raise ValueError("sampled drafts need an rng")
        # Never draft past the context: the drafted tokens (all but the last) enter the KV cache.
        draft_len = min(draft_len, self.ctx.n_ctx - len(history))
        t = clock.now()
        pending, imported = self._sync(history)
        sync_s = clock.now() - t
        if not pending:  # history fully in the cache: re-decode its last token to get logits
            self.ctx.truncate(len(history) - 1)
            pending = [history[-1]]
        tokens: list[int] = []
        q_rows: list[np.ndarray | None] = []
        # an import that stood in for a catch-up is one (its seconds, its tokens); a round's own
        # (the last accepted token) is part of drafting
        decode_s, catchup_s = sync_s, (sync_s if imported > 2 else 0.0)
        calls, caught_up = 0, (imported if imported > 2 else 0)
        first_s: float | None = None
        sampled = sampled and not sampling.greedy
        while True:
            t = clock.now()
            if self.one_row and len(pending) == 2:
                # with a logits row (unread) like every other: a decode without one builds a graph
                # without the output layer, another shape (H200: ~3 ms a round re-warming)
                self.ctx.decode(pending[:1], logits="last", wait=False)
                self.ctx.decode(pending[1:], logits="last")
            else:
                self.ctx.decode(pending, logits="last")
            dt = clock.now() - t
            decode_s += dt
            if len(pending) > 2:  # history the cache missed during a pause (a full accept leaves 2)
                catchup_s += dt
                caught_up += len(pending)
            else:
                calls += 1
                if calls == 1:
                    first_s = dt + (sync_s if imported <= 2 else 0.0)
            if len(tokens) == draft_len:
                break
            logits = self.ctx.logits(-1)
            if sampled:
                q = probabilities(logits, sampling)  # shaped exactly as the target's p rows
                tok = sample(q, rng)  # type: ignore[arg-type]
                if draft_p_min > 0.0 and q.max() < draft_p_min:
                    break
                q_rows.append(q)
            else:
                tok = int(logits.argmax())  # (the method: np.argmax adds ~1 us a call around it)
                if draft_p_min > 0.0 and top_probability(logits, tok) < draft_p_min:
                    break
                q_rows.append(None)
            tokens.append(tok)
            if len(tokens) == draft_len:
                break  # the last drafted token is never decoded by the draft
            pending = [tok]
        return Draft(tuple(tokens), tuple(q_rows), decode_s, catchup_s, calls, caught_up, first_s=first_s)
