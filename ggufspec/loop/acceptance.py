"""Which drafted tokens the target keeps; pure numpy, no model.

Notation, per drafted position i = 0..K-1:
    x_i     the drafted token
    q_i     the draft's distribution that x_i was drawn from (None: a deterministic draft,
            i.e. q_i = one-hot(x_i): prompt lookup, or a greedy draft)
    p_i     the target's distribution at the same position, shaped by the same settings
    p_K     the target's distribution after all K drafted tokens (the bonus row)

Rules (tests/test_acceptance.py checks each one's output distribution by enumeration):
    greedy     keep x_i while x_i = argmax p_i; first mismatch -> argmax p_i; all kept -> argmax p_K.
    rejection  keep x_i with probability min(1, p_i(x_i) / q_i(x_i)); at the first rejection draw
               from norm(max(0, p_i - q_i)) and stop; all kept -> draw from p_K.
               Emitted tokens are distributed exactly as draws from p (Leviathan et al. 2023,
               Theorem 3.5; Chen et al. 2023, Theorem 1).
    match      draw y_i ~ p_i and keep x_i while y_i = x_i; the first y_i != x_i is emitted
               (llama.cpp's rule). Also exact, but keeps x_i with probability p_i(x_i) <= min(1, p/q).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np

from ggufspec.errors import UserError
from ggufspec.loop.sampling import sample


class AcceptRule(str, enum.Enum):
    GREEDY = "greedy"
    REJECTION = "rejection"
    MATCH = "match"

    @classmethod
    def parse(cls, text: str) -> "AcceptRule":
        try:
            return cls(text.lower())
        except ValueError:
            names = ", ".join(r.value for r in cls)
            raise UserError(f"unknown acceptance rule {text!r}; choose one of: {names}") from None


class Variant(str, enum.Enum):
    """Two statements of the rejection rule; same distribution, different random streams."""

    LEVIATHAN = "leviathan"  # Leviathan et al. 2023 (Google): draw r_1..r_K up front, keep while r_i <= p/q
    CHEN = "chen"  # Chen et al. 2023 (DeepMind): per position, keep if r < min(1, p/q), else resample

    @classmethod
    def parse(cls, text: str) -> "Variant":
        try:
            return cls(text.lower())
        except ValueError:
            raise UserError(f"unknown rejection variant {text!r}; choose leviathan or chen") from None


@dataclass(frozen=True, slots=True)
class Verdict:
    """Outcome of one verify: the first `n_accepted` drafted tokens are kept, then `token`."""

    n_accepted: int
    token: int  # the correction (n_accepted < K) or the bonus token (n_accepted == K)
    bonus: bool


class Rows(Protocol):
    """Indexable rows, possibly computed lazily (the engine shapes target rows on demand)."""

    def __getitem__(self, i: int) -> np.ndarray: ...


# ---- the maths, shared by the samplers below and by the exact-distribution tests ----------


def acceptance_probability(p: np.ndarray, q: np.ndarray | None, x: int) -> float:
    """min(1, p(x) / q(x)); a deterministic draft (q None) is one-hot, so p(x)."""
    if q is None:
        return float(p[x])
    qx = float(q[x])
    if qx <= 0.0:  # x could not have been drafted from q; never keep it
        return 0.0
    return min(1.0, float(p[x]) / qx)


def residual(p: np.ndarray, q: np.ndarray | None, x: int) -> np.ndarray:
    """norm(max(0, p - q)): where to draw from after rejecting x.

    With q one-hot at x this is p with x removed, renormalized. If p <= q everywhere (only when
    p == q, in which case rejection has probability 0) fall back to p.
    """
    if q is None:
        r = p.copy()
        r[x] = 0.0
    else:
        r = np.maximum(p - q, 0.0)
    total = r.sum()
    return r / total if total > 0.0 else p


# ---- samplers ------------------------------------------------------------------------------


def accept_greedy(drafted: Sequence[int], target_argmax: Sequence[int]) -> Verdict:
    """Greedy: keep the longest prefix where drafted[i] == argmax p_i.

    Args:
        drafted: x_0..x_{K-1}.
        target_argmax: argmax of the K+1 target rows (each asked once, in order, up to the first
            rejection: a lazy sequence computes only those).
    """
    for i, x in enumerate(drafted):
        top = target_argmax[i]
        if x != top:
            return Verdict(n_accepted=i, token=int(top), bonus=False)
    k = len(drafted)
    return Verdict(n_accepted=k, token=int(target_argmax[k]), bonus=True)


def accept_rejection(
    drafted: Sequence[int],
    *,
    q_rows: Sequence[np.ndarray | None],
    p_rows: Rows,
    rng: np.random.Generator,
    variant: Variant = Variant.LEVIATHAN,
) -> Verdict:
    """Speculative sampling: the emitted tokens are distributed exactly as draws from p."""
    k = len(drafted)
    if variant is Variant.LEVIATHAN:
        # Algorithm 1: r_1..r_K ~ U(0,1) up front; n = first i with r_i > p_i(x_i)/q_i(x_i).
        r = rng.random(k)
        for i, x in enumerate(drafted):
            p = p_rows[i]
            if r[i] > acceptance_probability(p, q_rows[i], x):
                return Verdict(n_accepted=i, token=sample(residual(p, q_rows[i], x), rng), bonus=False)
    else:
        # Chen et al. Algorithm 2: for each position, r ~ U[0,1]; keep if r < min(1, p/q).
        for i, x in enumerate(drafted):
            p = p_rows[i]
            if not rng.random() < acceptance_probability(p, q_rows[i], x):
                return Verdict(n_accepted=i, token=sample(residual(p, q_rows[i], x), rng), bonus=False)
    # All K kept: the bonus token comes from the (K+1)-th target row.
    return Verdict(n_accepted=k, token=sample(p_rows[k], rng), bonus=True)


def accept_match(drafted: Sequence[int], *, p_rows: Rows, rng: np.random.Generator) -> Verdict:
    """llama.cpp's rule: y_i ~ p_i; keep x_i while y_i == x_i; emit the first y_i that differs."""
    for i, x in enumerate(drafted):
        y = sample(p_rows[i], rng)
        if y != x:
            return Verdict(n_accepted=i, token=y, bonus=False)
    k = len(drafted)
    return Verdict(n_accepted=k, token=sample(p_rows[k], rng), bonus=True)
