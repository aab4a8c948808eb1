"""The expected speedup of Leviathan et al. 2023 (Theorem 3.8) and the alpha it takes (pure).

    E(K)     = 1 + a + ... + a^K = (1 - a^(K+1)) / (1 - a)      tokens per target call (eq. 1)
    speedup  = E(K) / (cK + v)                                   v = 1 in the theorem
    partial  = (s E(K) + (1 - s)) / (s (cK + v) + (1 - s))       a drafter proposing in a share s of rounds

One formula, `expected_speedup_partial`; the other two are its cases s = 1 (and v = 1).
"""

from __future__ import annotations

from dataclasses import dataclass


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


@dataclass(frozen=True)
class MeasuredBound:
    """Theorem 3.8 priced with what a run measured: `alpha` (estimate_alpha), `k` the mean drafts of
    a drafting round, `c` a drafted token's seconds over a target step, `verify` a drafting round's
    verify in target steps (None: not measured, priced as 1), `share` of rounds that drafted."""

    alpha: float
    k: float
    c: float
    verify: float | None
    share: float
    speedup: float


def verify_steps(*, verify_s: float, rounds: int, plain_rounds: int, step_s: float) -> float | None:
    """A drafting round's verify in target steps: the verify seconds of `rounds` rounds, less one
    step for each of the `plain_rounds` that drafted nothing, over the rounds that drafted (None:
    none drafted, or nothing measured)."""
    drafting = rounds - plain_rounds
    left = verify_s - plain_rounds * step_s
    return left / drafting / step_s if drafting > 0 and step_s > 0 and left > 0 else None


def measured_bound(*, accepted: int, rejections: int, drafted: int, drafting_rounds: int, rounds: int,
                   draft_s: float, verify_s: float, step_s: float) -> MeasuredBound | None:
    """Theorem 3.8 at one run's (or a pool of runs') own costs, the rounds that drafted nothing
    counted as plain steps (`expected_speedup_partial`); `step_s`: the target alone's decode seconds
    a step (llama.cpp's, as `verify_s` and `draft_s` are: our Python is left out, as the theory
    leaves it). None where nothing was drafted or no step was measured."""
    if drafted <= 0 or drafting_rounds <= 0 or rounds <= 0 or step_s <= 0:
        return None
    alpha = estimate_alpha(accepted=accepted, rejections=rejections)
    k, c = drafted / drafting_rounds, draft_s / drafted / step_s
    v = verify_steps(verify_s=verify_s, rounds=rounds, plain_rounds=rounds - drafting_rounds, step_s=step_s)
    share = drafting_rounds / rounds
    return MeasuredBound(alpha, k, c, v, share,
                         expected_speedup_partial(a=alpha, k=k, c=c, share=share, v=1.0 if v is None else v))
