"""Who proposes tokens: the drafter protocol, a draft (`Draft`) and the helpers drafters share.
Two drafters: a draft model (ggufspec.loop.model_drafter) and prompt lookup (ggufspec.loop.lookup).

A drafter sees the whole token history (prompt + emitted, the last token not yet in any KV
cache) and returns up to `draft_len` proposed tokens with, when they were sampled, the draft
distributions q they were drawn from (None = deterministic, q one-hot).

The draft length a round asks for is `draft_len` (ggufspec.loop.speculation names the rest).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np

from ggufspec.loop.sampling import SamplingSettings


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
    grades: tuple[int, ...]  # a free drafter's: the grades its proposals may have (`Draft.grade`); a model's: ()

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
    if len(a) != n:  # (a list's whole slice is a copy: none where one side is the shorter)
        a = a[:n]
    if len(b) != n:
        b = b[:n]
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


class SharedPrefix:
    """How much of a history a cache's token list holds, asked every round: `ask(own, seq)` is
    `common_prefix(own, seq)`, but where `seq` is the object asked last time and no shorter (the
    engine's history, a list it only appends to), only the tokens past the last answer are
    compared: O(what changed), not O(history) (a 3,000-token history: ~20 us a call compared
    whole, on a CPU whose decode has just evicted it). The owner of `own` reports its changes
    that are not appends: `cut(n)` after truncating it to n tokens, `reset()` after replacing it.
    (A history edited in place, not appended to, would be misread: the engine never does that;
    the cost of a misreading would be the draft's, never the output's.)"""

    __slots__ = ("_seq", "_seen", "_k")

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._seq: Sequence[int] | None = None  # the history last asked (kept: its id stays its own)
        self._seen = 0  # its length then
        self._k = 0  # own[:k] == seq[:k]: the answer then, or less after a cut

    def cut(self, n: int) -> None:
        self._k = min(self._k, n)

    def ask(self, own: Sequence[int], seq: Sequence[int]) -> int:
        k = self._k
        if seq is self._seq and len(seq) >= self._seen:
            m = min(len(own), len(seq))
            if k < m:  # what the appends since may have added to the shared prefix
                k += common_prefix(own[k:m], seq[k:m])
        else:
            k = common_prefix(own, seq)
        self._seq, self._seen, self._k = seq, len(seq), k
        return k
