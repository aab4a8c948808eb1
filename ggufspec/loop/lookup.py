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
        self.grades = tuple(range(self.ngram_min, self.ngram_max + 1))  # a proposal's grade: its n-gram's length
        self._index: dict[tuple[int, ...], int] = {}  # n-gram -> end position of its latest occurrence
        self._indexed = 0  # history[:self._indexed] has its n-grams in the index
        self._history: list[int] = []
        self._source: Sequence[int] | None = None  # the history object last indexed (kept: its id stays its own)

    def reset(self) -> None:
        self._index.clear()
        self._indexed = 0
        self._history = []
        self._source = None

    def prefill(self, prompt: Sequence[int]) -> float:
        self.reset()
        return 0.0

    def backlog(self, history: Sequence[int]) -> int:
        return 0

    def _update(self, history: Sequence[int]) -> None:
        # Histories only grow between rounds; a different one (new request) rebuilds the index.
        # The object indexed last round, no shorter, is taken to have grown by appending (the
        # engine's history: a list it only appends to); another object is compared with the
        # indexed prefix (`_history`, a copy of it), O(history) a round: at a 3,000-token prompt
        # that comparison was 0.1 ms a round, at 200 tokens ~3 us. (A wrong guess costs only the
        # proposals' quality: they are verified, and a function of past histories only.)
        k = self._indexed
        if history is not self._source or len(history) < k:
            head = history[:k]
            if len(head) < k or self._history != (head if isinstance(head, list) else list(head)):
                self.reset()
                k = 0
            self._source = history
        self._history.extend(history[k:])
        # Index every n-gram that ends strictly before the last token (so a match has a continuation):
        # history[end - n:end] -> end, later ends overwriting earlier ones, built by zip in C (a
        # 3,000-token prompt: ~9,000 n-grams, 3.6 ms as a Python loop, 2.1 ms so)
        # (a round's few new tokens: the plain loop, cheaper for a handful)
        start, stop = max(self._indexed, 1), len(history)
        if stop - start <= 16:
            for end in range(start, stop):
                for n in range(self.ngram_min, min(self.ngram_max, end) + 1):
                    self._index[tuple(history[end - n:end])] = end
        else:
            for n in range(self.ngram_min, self.ngram_max + 1):
                lo = max(start, n)  # the first end with a whole n-gram before it
                if lo < stop:
                    seg = history[lo - n:stop - 1]  # seg[j:j + n] is the n-gram ending at lo + j
                    self._index.update(zip(zip(*(seg[i:i + stop - lo] for i in range(n))), range(lo, stop)))
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
