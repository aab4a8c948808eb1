"""When drafting pays: a cost model learned from the run's own timings (pure; no llama_cpp).

A round that drafts K tokens costs

    T(K) = K * t_draft + t_verify(K),    t_verify(K) ~= t_1 + K * t_row

and emits, with a per-token accept rate a, E(K) = (1 - a^(K+1)) / (1 - a) tokens (Leviathan et
al. 2023, Eq. 1). The target alone emits one token per t_1. Drafting pays when some K in
1..K_max has E(K) / T(K) > 1 / t_1. When none does (a draft model nearly as slow as the target,
or prompt lookup finding little), the pacer pauses drafting: the target runs alone, and a probe
round drafts again after a back-off that doubles each time drafting still does not pay.

The estimates outlive one generation (the pair keeps a pacer per drafter), so a server or a
benchmark learns the costs once. The pacer changes only how many tokens are drafted, never
which: greedy output stays the target's; sampled output keeps the target's distribution.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

_WINDOW = 5  # timings kept per estimate; the estimate is their median (one outlier cannot swing it)
_DECAY = 0.9  # per-round decay of the acceptance counts (recent text matters most)


@dataclass(frozen=True, slots=True)
class PacerEstimates:
    """What the pacer believes now (seconds; None = not measured yet)."""

    t_1: float | None  # one-row target decode (a plain round)
    t_row: float | None  # each extra row in a verify batch
    t_draft: float | None  # one drafted token
    accept_rate: float  # per-token accept rate a


def expected_tokens(a: float, k: float) -> float:
    """E(K) = 1 + a + ... + a^K = (1 - a^(K+1)) / (1 - a): tokens a round of K drafts emits (the
    +1 is the target's own); K may be fractional (a mean over rounds)."""
    return k + 1.0 if a >= 1.0 else (1.0 - a ** (k + 1.0)) / (1.0 - a)


@dataclass
class DraftPacer:
    """Decides each round whether to draft at all; learns from `observe`.

    `first_pause` and `max_pause` bound the back-off, in rounds of the target alone, while the
    accept rate decides; `hopeless_pause` is the pause when even an always-right draft would lose
    (its probe costs a catch-up of the draft's KV cache, so it comes rarely). A probe drafts at
    most `probe_len` tokens.
    """

    first_pause: int = 16
    max_pause: int = 256
    hopeless_pause: int = 2048
    probe_len: int = 4
    # drafting rounds to have seen before a hopeless verdict: one noisy first probe (a cold verify
    # batch, a busy machine) must not switch drafting off for the whole run
    hopeless_after: int = 3
    # prior of the accept rate: 2 accepted, 0.5 rejections (a = 0.8), so a first probe is not dismissed
    prior_accepted: float = 2.0
    prior_rejections: float = 0.5
    _t_1: deque = field(default_factory=lambda: deque(maxlen=_WINDOW), init=False, repr=False)
    _t_row: deque = field(default_factory=lambda: deque(maxlen=_WINDOW), init=False, repr=False)
    _t_draft: deque = field(default_factory=lambda: deque(maxlen=_WINDOW), init=False, repr=False)
    _accepted: float = field(default=0.0, init=False)
    _rejections: float = field(default=0.0, init=False)
    _pause_left: int = field(default=0, init=False)
    _next_pause: int = field(default=0, init=False)
    _probe: bool = field(default=False, init=False)
    _draft_rounds: int = field(default=0, init=False)
    paused_rounds: int = field(default=0, init=False)  # rounds this pacer has held drafting back

    def __post_init__(self) -> None:
        self._next_pause = self.first_pause

    @property
    def t_1(self) -> float | None:
        """One-row target decode, seconds (median of the last plain rounds)."""
        return statistics.median(self._t_1) if self._t_1 else None

    @property
    def t_row(self) -> float | None:
        """Each extra row of a verify batch, seconds."""
        return statistics.median(self._t_row) if self._t_row else None

    @property
    def t_draft(self) -> float | None:
        """One drafted token, seconds."""
        return statistics.median(self._t_draft) if self._t_draft else None

    @property
    def accept_rate(self) -> float:
        acc = self._accepted + self.prior_accepted
        return acc / (acc + self._rejections + self.prior_rejections)

    def estimates(self) -> PacerEstimates:
        return PacerEstimates(t_1=self.t_1, t_row=self.t_row, t_draft=self.t_draft, accept_rate=self.accept_rate)

    @property
    def pausing(self) -> bool:
        """True while drafting is held back (the next round runs the target alone)."""
        return self._pause_left > 0

    def best_gain(self, *, draft_max: int, accept_rate: float | None = None) -> tuple[int, float] | None:
        """(K, rate of drafting K / rate of the target alone) for the best K (K = 0: gain 1);
        None while unmeasured. `accept_rate` overrides the estimate (1.0: a perfect draft)."""
        if self.t_1 is None or self.t_row is None or self.t_draft is None or draft_max < 1:
            return None
        a = self.accept_rate if accept_rate is None else accept_rate
        best = (0, 1.0)
        for k in range(1, draft_max + 1):
            cost = max(k * self.t_draft + self.t_1 + k * self.t_row, 1e-12)  # a clock too coarse reads 0
            gain = expected_tokens(a, k) * self.t_1 / cost
            if gain > best[1]:
                best = (k, gain)
        return best

    def decide(self, *, draft_len: int, draft_max: int) -> int:
        """How many tokens to draft this round: `draft_len` (the length schedule's), or 0 to pause."""
        if draft_len <= 0:
            return 0
        if self.t_1 is None:  # calibrate: one plain round measures the target alone
            return 0
        if self._pause_left == 0 and not self._probe:
            best = self.best_gain(draft_max=draft_max)
            if best is not None and best[0] == 0:
                perfect = self.best_gain(draft_max=draft_max, accept_rate=1.0)
                if perfect is not None and perfect[0] == 0 and self._draft_rounds >= self.hopeless_after:
                    # even a draft that is always right loses: the costs, not the text, decide
                    self._pause_left = self.hopeless_pause
                else:
                    self._pause_left = self._next_pause
                    self._next_pause = min(self.max_pause, 2 * self._next_pause)
        if self._pause_left > 0:
            self._pause_left -= 1
            self._probe = self._pause_left == 0  # the round after a pause drafts, to re-measure
            self.paused_rounds += 1
            return 0
        probe, self._probe = self._probe, False
        return min(draft_len, self.probe_len) if probe else draft_len

    def observe(
        self, *, drafted: int, accepted: int, draft_s: float, verify_s: float, draft_calls: int | None = None
    ) -> None:
        """A round happened: `drafted` tokens draft_len (0 = plain), `accepted` kept, its timings.

        `draft_calls`: the draft's decode calls in `draft_s` (None: one per drafted token; 0: a
        drafter with no model, whose time per token is draft_s / drafted)."""
        if drafted == 0:
            self._t_1.append(verify_s)
            return
        self._draft_rounds += 1
        self._accepted = _DECAY * self._accepted + accepted
        self._rejections = _DECAY * self._rejections + (accepted < drafted)
        # t_draft per drafted token: a model drafter makes about one decode call per token, but a
        # round whose first call was a catch-up (not counted) must not look cheaper than it is
        per_draft = draft_s / (draft_calls or drafted)
        self._t_draft.append(per_draft)
        if self.t_1 is not None:
            self._t_row.append(max(0.0, (verify_s - self.t_1) / drafted))
        best = self.best_gain(draft_max=max(drafted, 1))
        if best is not None and best[0] > 0:
            self._next_pause = self.first_pause  # drafting pays again: a later pause starts short
