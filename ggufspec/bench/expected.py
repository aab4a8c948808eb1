"""The expected speedup of Leviathan et al. 2023 (Theorem 3.8) and the alpha it takes (pure).

    E(K)     = 1 + a + ... + a^K = (1 - a^(K+1)) / (1 - a)      tokens per target call (eq. 1)
    speedup  = E(K) / (cK + v)                                   v = 1 in the theorem
    partial  = (s E(K) + (1 - s)) / (s (cK + v) + (1 - s))       a drafter proposing in a share s of rounds

One formula, `expected_speedup_partial`; the other two are its cases s = 1 (and v = 1).
"""

from __future__ import annotations


def expected_tokens(a: float, k: float) -> float:
    """E(K) = 1 + a + ... + a^K = (1 - a^(K+1)) / (1 - a); K may be fractional (a mean over rounds)."""
    return k + 1.0 if a >= 1.0 else (1.0 - a ** (k + 1.0)) / (1.0 - a)


def expected_tokens_per_round(*, a: float, k: float) -> float:
    """E[tokens emitted per target call] with K drafts each accepted with probability a:
    1 + a + a^2 + ... + a^K = (1 - a^(K+1)) / (1 - a)  (Leviathan et al. 2023, eq. 1)."""
    if not 0.0 <= a <= 1.0:
        raise ValueError(f"accept rate must be in [0, 1], got {a}")
    return expected_tokens(a, k)


def expected_speedup(*, a: float, k: float, c: float) -> float:
    """Leviathan et al. 2023, Theorem 3.8: the expected walltime improvement factor
    (1 - a^(K+1)) / ((1 - a)(cK + 1)): tokens per round over the cost of a round (K draft steps
    at c target steps each, plus one target call that is assumed to cost one plain step).

    Args:
        a: per-token acceptance probability (alpha), in [0, 1].
        k: draft length K (may be fractional: a mean over rounds).
        c: draft step time / target step time.
    """
    if c < 0 or k < 0:
        raise ValueError("K and c must be >= 0")
    return expected_speedup_partial(a=a, k=k, c=c, share=1.0)


def expected_speedup_measured_verify(*, a: float, k: float, c: float, v: float) -> float:
    """Theorem 3.8 with the target call priced as measured: a verify of K+1 rows costs `v`
    plain target steps (v = 1 in the theorem; on a CPU it grows with K)."""
    return expected_speedup_partial(a=a, k=k, c=c, share=1.0, v=v)


def expected_speedup_partial(*, a: float, k: float, c: float, share: float, v: float = 1.0) -> float:
    """Theorem 3.8 for a drafter that proposes in only a `share` of rounds (prompt lookup finds
    no match in the others: those rounds are plain target steps, one token for one step).
    With share = 1 and v = 1 it is Theorem 3.8."""
    share = min(1.0, max(0.0, share))
    tokens = share * expected_tokens_per_round(a=a, k=k) + (1.0 - share)
    cost = share * (c * k + v) + (1.0 - share)
    return tokens / cost


def estimate_alpha(*, accepted: int, rejections: int) -> float:
    """Per-token acceptance probability: of the draft tokens the target judged (every accepted one
    and the first rejected one of each round), the share it kept."""
    judged = accepted + rejections
    return accepted / judged if judged else 0.0
