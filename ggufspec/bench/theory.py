"""A configuration's runs priced by Theorem 3.8 (pure): the target's step, the draft cost c and the
verify cost, from the microbenchmark where it priced the drafter, else as the runs measured them
(ggufspec.bench.expected has the formulas; ggufspec.bench.summary puts these beside the speedups)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ggufspec.bench.configs import BASELINE, LOOKUP, Config
from ggufspec.bench.expected import expected_speedup, expected_speedup_partial, verify_steps
from ggufspec.bench.results import RunRecord


def _alone(runs: Sequence[RunRecord], temperature: float) -> list[RunRecord]:
    """Our target alone's runs at `temperature`."""
    return [r for r in runs if r.engine == "ggufspec" and r.draft == BASELINE and r.temperature == temperature]


def pooled_step(runs: Sequence[RunRecord], *, temperature: float) -> float | None:
    """Seconds per generated token of our target alone, pooled over runs (the first token is prefill's)."""
    rs = _alone(runs, temperature)
    n = sum(r.generated_tokens - 1 for r in rs)
    return sum(r.gen_s for r in rs) / n if n else None


def pooled_decode_step(runs: Sequence[RunRecord], *, temperature: float) -> float | None:
    """Seconds of one decode of our target alone (llama.cpp's: its verify seconds a round, our Python
    left out), pooled over runs; None where the runs did not time it."""
    rs = _alone(runs, temperature)
    n = sum(r.rounds for r in rs)
    s = sum(r.verify_s for r in rs)
    return s / n if n and s > 0 else None


def verify_cost_runs(rs: Sequence[RunRecord], step_s: float | None) -> float | None:
    """A drafting round's verify in target steps, as it happened in the runs `rs` (`verify_steps`)."""
    if not step_s:
        return None
    return verify_steps(verify_s=sum(r.verify_s for r in rs), rounds=sum(r.rounds for r in rs),
                        plain_rounds=sum(r.k_hist.get(0, 0) for r in rs), step_s=step_s)


def verify_cost_micro(micro: Mapping, k_eff: float) -> float | None:
    """Verify cost of K+1 rows in plain steps, interpolated at a fractional K."""
    vc = {int(k): v for k, v in micro.get("verify_cost", {}).items()}
    if not vc:
        return None
    ks = sorted(vc)
    if k_eff <= ks[0]:
        return vc[ks[0]] if k_eff >= ks[0] else 1.0 + (vc[ks[0]] - 1.0) * (k_eff / ks[0] if ks[0] else 0)
    for lo, hi in zip(ks, ks[1:]):
        if lo <= k_eff <= hi:
            w = (k_eff - lo) / (hi - lo)
            return vc[lo] * (1 - w) + vc[hi] * w
    return vc[ks[-1]]


def priced(cfg: Config, rs: Sequence[RunRecord], *, alpha: float, k_eff: float, drafted: int, draft_rounds: int,
           rounds: int, micro: Mapping, base_step: float | None, decode_step: float | None) -> dict[str, Any]:
    """Configuration `cfg`'s costs (c, the verify) and Theorem 3.8's expected speedups from its runs
    `rs` (their `drafted` tokens in `draft_rounds` of `rounds`), as bench.json's fields."""
    out: dict[str, Any] = {}
    c = micro.get("c", {}).get(cfg.draft)
    # c as it happened in the runs: draft decode time per drafted token / a target step (llama.cpp's
    # decode where the runs timed it, else the target alone's seconds a token)
    step = decode_step or base_step
    c_runs = (sum(r.draft_s for r in rs) / drafted) / step if drafted and step else None
    v = verify_cost_micro(micro, k_eff)
    v_runs = verify_cost_runs(rs, decode_step)
    out.update(c=c, c_runs=c_runs, verify_cost=v, verify_cost_runs=v_runs)
    # where the microbenchmark priced no such drafter (the default's model + lookup, or a bench
    # without it: --regimes) the bound takes the costs as they happened in the runs
    out["costs_from"] = "microbenchmark" if c is not None else "runs" if c_runs is not None else None
    c = c if c is not None else c_runs
    v = v if v is not None else v_runs
    if c is not None and draft_rounds:
        # a drafter proposes only in some rounds (lookup where it finds a match; under the
        # controller, where it did not choose the target alone): the other rounds are plain steps
        share = (draft_rounds / rounds if rounds else 1.0) if cfg.draft == LOOKUP or not cfg.fixed else 1.0
        out["expected_speedup"] = expected_speedup_partial(a=alpha, k=k_eff, c=c, share=share)
        if v is not None:
            out["expected_speedup_measured_verify"] = expected_speedup_partial(a=alpha, k=k_eff, c=c, share=share, v=v)
        best = max(range(1, 17), key=lambda kk: expected_speedup(a=alpha, k=kk, c=c))
        out["best_k_expected"] = {"k": best, "speedup": expected_speedup(a=alpha, k=best, c=c)}
    return out
