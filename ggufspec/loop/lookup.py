"""Prompt lookup as drafter: n-gram matches in the history, no second model."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ggufspec.loop.drafters import Draft
from ggufspec.loop.sampling import SamplingSettings
from ggufspec.settings import LookupSettings


class LookupDrafter:
    """Prompt lookup (n-gram) drafting: no second model.

    Find the most recent earlier occurrence of the history's last n tokens (n from ngram_max
    down to ngram_min) and propose the tokens that followed it. Deterministic: q is one-hot.
    The proposal's `grade` is n: how much a match is worth depends on it (replayed over the
    bench's greedy outputs, a 3-gram match's proposal kept 3.3-5.0 tokens on average in the
    chat, code, summarise and maths prompts, a 1-gram match's 0.3-0.9).
    """

    name = "lookup"
    free = True
    kv_shared = False

    def __init__(self, settings: LookupSettings = LookupSettings()) -> None:
        self.ngram_max = settings.ngram_max
        self.ngram_min = settings.ngram_min
        self._index: dict[tuple[int, ...], int] = {}  # n-gram -> end position of its latest occurrence
        self._indexed = 0  # history[:self._indexed] has its n-grams in the index
        self._history: list[int] = []

    def reset(self) -> None:
        self._index.clear()
        self._indexed = 0
        self._history = []

    def prefill(self, prompt: Sequence[int]) -> float:
        self.reset()
        return 0.0

    def backlog(self, history: Sequence[int]) -> int:
        return 0

    def _update(self, history: Sequence[int]) -> None:
        # Histories only grow between rounds; a different one (new request) rebuilds the index.
        # (`_history` is the indexed prefix: one copy of it to compare, and the new tokens appended)
        k = self._indexed
        head = history[:k]
        if len(head) < k or self._history != (head if isinstance(head, list) else list(head)):
            self.reset()
            k = 0
        self._history.extend(history[k:])
        # Index every n-gram that ends strictly before the last token (so a match has a continuation).
        for end in range(max(self._indexed, 1), len(history)):
            for n in range(self.ngram_min, self.ngram_max + 1):
                if end - n >= 0:
                    self._index[tuple(history[end - n : end])] = end
        self._indexed = max(self._indexed, len(history))

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
        if draft_len <= 0 or len(history) < 2:
            return Draft((), ())
        self._update(history)
        return self._match(history, (), draft_len)

    def continue_after(self, history: Sequence[int], drafts: Sequence[int], *, draft_len: int) -> Draft:
        """Up to `draft_len` tokens to follow `history` + `drafts` (a draft model's proposal, not
        yet verified): the continuation of its last n-gram's latest occurrence, matched in the
        index of `history` alone (the drafts are not indexed: they may be rejected)."""
        if draft_len <= 0 or not drafts or len(history) < 2:
            return Draft((), ())
        self._update(history)
        return self._match(history, drafts, draft_len)

    def _match(self, history: Sequence[int], drafts: Sequence[int], draft_len: int) -> Draft:
        """The continuation of history + drafts' last n-gram (n longest first) at its latest
        occurrence in the index of `history`; it runs on into the drafts. Only the tail an n-gram
        reads is copied, not the history."""
        tail = [*history[-self.ngram_max:], *drafts]
        for n in range(self.ngram_max, self.ngram_min - 1, -1):
            if len(tail) < n:
                continue
            end = self._index.get(tuple(tail[-n:]))
            if end is not None:
                cont = (*history[end:end + draft_len], *drafts[:max(0, end + draft_len - len(history))])
                if cont:
                    return Draft(cont, (None,) * len(cont), grade=n)
        return Draft((), ())
