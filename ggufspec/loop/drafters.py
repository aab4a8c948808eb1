"""Who proposes tokens: a draft model or prompt lookup.

A drafter sees the whole token history (prompt + emitted, the last token not yet in any KV
cache) and returns up to `draft_len` proposed tokens with, when they were sampled, the draft
distributions q they were drawn from (None = deterministic, q one-hot).

The draft length a round asks for is `draft_len` (ggufspec.loop.speculation names the rest).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np

from ggufspec.loop import clock
from ggufspec.loop.kvshare import import_pays
from ggufspec.loop.sampling import SamplingSettings, probabilities, sample
from ggufspec.loop.target import Target
from ggufspec.settings import LookupSettings


@dataclass(frozen=True, slots=True)
class Draft:
    tokens: tuple[int, ...]
    q_rows: tuple[np.ndarray | None, ...]  # one per token; None = deterministic (one-hot)
    decode_s: float = 0.0  # time spent in the draft model's decode calls
    catchup_s: float = 0.0  # part of decode_s spent catching up on history (several tokens at once)
    decode_calls: int = 0  # draft decode calls outside catch-up (one per drafted token, roughly)
    catchup_tokens: int = 0  # history tokens decoded in catch-up (in catchup_s)
    # seconds of the first decode call outside catch-up, with the KV sync before it when that was
    # no catch-up (a draft model's round: first_s + (decode_calls - 1) one-row decodes; None for a
    # free drafter). The first call costs more than the others: it imports the target's cache and
    # decodes the 1-2 tokens the last round left (Xeon, Q4_1: 4.9 ms more than a 10.1 ms step)
    first_s: float | None = None
    # a free drafter's class of this proposal, a function of the history (lookup: the n-gram
    # length its match came from); the controller keeps one acceptance curve per class
    grade: int = 0


class Drafter(Protocol):
    """What the loop asks of a drafter; every ability is declared here, none is probed for.

    `free`: no model and no cost, a deterministic function of the history (prompt lookup): the
    loop asks it every round before choosing, scores it against what the target emitted, and asks
    it to continue a draft model's proposal (`continue_after`). `kv_shared`: a draft model that
    imports the target's KV cache (ggufspec.loop.kvshare): never behind the history."""

    name: str  # shown in -v and in `RunStats.drafter_rounds`; distinct among a generation's drafters
    free: bool
    kv_shared: bool

    def prefill(self, prompt: Sequence[int]) -> float:
        """Prepare for a new sequence; returns seconds spent decoding."""
        ...

    def backlog(self, history: Sequence[int]) -> int:
        """History tokens it must decode before it can draft (0 for a free drafter)."""
        ...

    def propose(
        self,
        history: Sequence[int],
        *,
        draft_len: int,
        draft_p_min: float,
        sampled: bool,
        sampling: SamplingSettings,
        rng: np.random.Generator,
    ) -> Draft:
        """Up to `draft_len` tokens to follow `history`. `sampled`: draw them from q shaped by
        `sampling` (rejection sampling needs q); else argmax (q one-hot). Stop early when the
        draft's top probability falls below `draft_p_min`."""
        ...

    def continue_after(self, history: Sequence[int], drafts: Sequence[int], *, draft_len: int) -> Draft:
        """Up to `draft_len` tokens to follow `history` + `drafts` (another drafter's proposal, not
        yet verified), a function of them alone (q one-hot); a drafter that cannot: none."""
        ...

    def reset(self) -> None: ...


def top_probability(logits: np.ndarray, top: int) -> float:
    """The probability of token `top`, the argmax of `logits`, at temperature 1 (what a greedy
    draft's --draft-p-min compares): 1 / sum(exp(logits - logits[top]))."""
    return 1.0 / float(np.exp(logits - logits[top]).sum())


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences.

    Asked several times a round over the whole history: slices compare in C, and the usual
    answer (one is a prefix of the other, or they part near the end) takes one comparison; else
    a bisection over prefix equality, O(n log n) in C instead of n steps of Python. Copies
    only what it must (a tuple's whole slice, and tuple() of a tuple, are the tuple itself):
    each copy touches every token object, and on a CPU a decode has just evicted them all."""
    n = min(len(a), len(b))
    a, b = a[:n], b[:n]
    if type(a) is not type(b):  # a list never equals a tuple
        a, b = tuple(a), tuple(b)
    if a == b:
        return n
    lo, hi = 0, n - 1  # a[:lo] == b[:lo]; a[:hi + 1] != b[:hi + 1]
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


# ---- a draft model -------------------------------------------------------------------------


class KVSource(Protocol):
    """A context whose KV cache a draft model may import (ggufspec.loop.kvshare): the target's."""

    @property
    def tokens(self) -> Sequence[int]: ...

    @property
    def n_past(self) -> int: ...

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
        # two caches' lengths, the answer); each `_reach` copies both token lists (~10 us a round)
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
        own = common_prefix(self.ctx.tokens, history)
        if self.kv_source is not None:
            held = self.kv_source.tokens
            c = common_prefix(held, history)
            if import_pays(gained=c - own, held=len(held)):
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


# ---- prompt lookup -------------------------------------------------------------------------


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
