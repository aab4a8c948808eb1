"""Speculative against the target alone, repeated (`ggufspec run --compare`).

One run of each is one draw on a shared machine: the same command gave 0.98x, 1.43x and 1.64x in
three consecutive runs (issue 12). So a comparison is `repeats` pairs of runs after an uncounted
warm-up of both, in one of two ways:
- in lockstep (`run_both`, the default of `run --compare`): each repeat runs both sides at once,
  interleaved token by token, each on its own contexts and timed on its own steps
  (ggufspec.bench.lockstep), so a slow second costs both alike;
- alternated (`run`, `--sequential`): one after the other, ABBA (repeat r runs speculative first
  when r is even, the target alone first when r is odd), so a slow minute or the order hits both
  sides alike on average.
Figures:

    speedup_r  = speculative gen tok/s / target-alone gen tok/s of the same repeat r
    median     = the median of speedup_r over repeats (the reported speedup)
    spread_pct = 100 * max(max_r / median - 1, 1 - min_r / median)
    noisy      = max_r > (1 + tol) * median  or  min_r < (1 - tol) * median   (tol = 0.10: +-10%)

Pure: the runs themselves come from a callable, so this is tested on fakes.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from ggufspec.sysload import describe_load

SPECULATIVE = "speculative"
ALONE = "alone"
NOISE_TOLERANCE = 0.10  # the speedups may spread +-10% around their median before we call it noisy


@dataclass(frozen=True, kw_only=True)
class Spread:
    """The speedups of a repeated comparison: median, range, and whether they spread too far."""

    median: float
    min: float
    max: float
    spread_pct: float  # 100 * max(max / median - 1, 1 - min / median)
    noisy: bool  # some speedup lies beyond (1 +- tolerance) * median
    tolerance_pct: float


def spread(speedups: Sequence[float], *, tolerance: float = NOISE_TOLERANCE) -> Spread:
    """Median, min, max of `speedups` and the noisy verdict (see the module docstring).

    Raises:
        ValueError: no speedups, or one that is not positive.
    """
    if not speedups:
        raise ValueError("spread of no speedups")
    if any(not s > 0 for s in speedups):
        raise ValueError(f"speedups must be positive, got {list(speedups)}")
    med = statistics.median(speedups)
    lo, hi = min(speedups), max(speedups)
    return Spread(
        median=med, min=lo, max=hi, spread_pct=100.0 * max(hi / med - 1.0, 1.0 - lo / med),
        noisy=hi > (1.0 + tolerance) * med or lo < (1.0 - tolerance) * med, tolerance_pct=100.0 * tolerance,
    )


def run_order(repeats: int) -> list[tuple[int, str]]:
    """(repeat, side) in the order they run: ABBA, speculative first in repeat 0."""
    order: list[tuple[int, str]] = []
    for r in range(repeats):
        pair = (SPECULATIVE, ALONE) if r % 2 == 0 else (ALONE, SPECULATIVE)
        order += [(r, side) for side in pair]
    return order


@dataclass(frozen=True, kw_only=True)
class Drafting:
    """What one run drafted: its rounds, the draft tokens it verified and kept, its rounds by
    drafter ("none": the target alone); 0 and empty where not told."""

    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    drafter_rounds: Mapping[str, int] = field(default_factory=dict)

    @property
    def drafting_rounds(self) -> int:
        """Rounds that verified drafts (not the target alone's)."""
        return self.rounds - self.drafter_rounds.get("none", 0) if self.drafter_rounds else 0

    def to_dict(self) -> dict[str, Any]:
        return {"rounds": self.rounds, "drafted": self.drafted, "accepted": self.accepted,
                "drafter_rounds": dict(self.drafter_rounds)}


@dataclass(frozen=True, kw_only=True)
class Measured:
    """What one counted run gave: its generation tok/s and tokens, and what it drafted."""

    gen_tps: float
    generated_tokens: int
    tokens: tuple[int, ...]
    drafting: Drafting = Drafting()


@dataclass(frozen=True, kw_only=True)
class CompareRun:
    repeat: int
    side: str  # SPECULATIVE | ALONE
    gen_tps: float
    generated_tokens: int
    drafting: Drafting = Drafting()

    def to_dict(self) -> dict[str, Any]:
        return {"repeat": self.repeat, "side": self.side, "gen_tps": round(self.gen_tps, 2),
                "generated_tokens": self.generated_tokens, **self.drafting.to_dict()}


@dataclass(frozen=True, kw_only=True)
class Comparison:
    """Every counted run in order, the per-repeat speedups and their spread."""

    runs: tuple[CompareRun, ...]
    speedups: tuple[float, ...]  # per repeat; a repeat whose target alone measured 0 tok/s is left out
    spread: Spread | None  # None when no repeat gave a speedup
    identical: bool | None  # greedy: every run's tokens equal the first target-alone run's; None when sampling
    warmup_tokens: int  # tokens of the uncounted warm-up of each side (0: none)
    lockstep: bool = False  # each repeat's two runs interleaved token by token (else one after the other)

    def tps(self, side: str) -> list[float]:
        """Generation tok/s of `side`, per repeat."""
        return [r.gen_tps for r in sorted(self.runs, key=lambda r: r.repeat) if r.side == side]

    def to_dict(self, *, load: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The `compare` object of `run --compare --json`."""
        sp = self.spread
        return {
            "repeats": len({r.repeat for r in self.runs}),
            "speedups": [round(x, 4) for x in self.speedups],
            "median": round(sp.median, 4) if sp else None,
            "min": round(sp.min, 4) if sp else None,
            "max": round(sp.max, 4) if sp else None,
            "spread_pct": round(sp.spread_pct, 2) if sp else None,
            "noisy": sp.noisy if sp else None,
            "tolerance_pct": sp.tolerance_pct if sp else 100.0 * NOISE_TOLERANCE,
            "speculative_tps": [round(x, 2) for x in self.tps(SPECULATIVE)],
            "alone_tps": [round(x, 2) for x in self.tps(ALONE)],
            "order": [f"{r.side}:{r.repeat}" for r in self.runs],
            "runs": [r.to_dict() for r in self.runs],  # each counted run, in order: what it drafted
            "lockstep": self.lockstep,
            "warmup_tokens": self.warmup_tokens,
            "identical": self.identical,
            "load": dict(load or {}),
        }


def compare(
    *,
    run: Callable[[int, str], Measured] | None = None,
    run_both: Callable[[int, tuple[str, str]], Mapping[str, Measured]] | None = None,
    repeats: int,
    greedy: bool,
    warmup: Callable[[], int] | None = None,
    tolerance: float = NOISE_TOLERANCE,
) -> Comparison:
    """Run `warmup` (uncounted; returns its tokens per side), then the repeats, and summarise.
    Give exactly one of `run(repeat, side)`, called in `run_order(repeats)`, and
    `run_both(repeat, sides)`, which runs repeat `repeat`'s two sides in lockstep (`sides`: their
    `run_order`, the first takes the first step) and returns each side's figures.

    Raises:
        ValueError: repeats < 1, or not exactly one of run and run_both.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    if (run is None) == (run_both is None):
        raise ValueError("give exactly one of run and run_both")
    warm = warmup() if warmup is not None else 0
    runs: list[CompareRun] = []
    by: dict[tuple[int, str], Measured] = {}
    order = run_order(repeats)
    for r in range(repeats):
        sides = (order[2 * r][1], order[2 * r + 1][1])  # (this repeat's, in run_order's order)
        got = run_both(r, sides) if run_both is not None else {side: run(r, side) for side in sides}  # type: ignore[misc]
        for side in sides:
            m = by[(r, side)] = got[side]
            runs.append(CompareRun(repeat=r, side=side, gen_tps=m.gen_tps, generated_tokens=m.generated_tokens,
                                   drafting=m.drafting))
    speedups = tuple(by[(r, SPECULATIVE)].gen_tps / by[(r, ALONE)].gen_tps for r in range(repeats)
                     if by[(r, ALONE)].gen_tps > 0 and by[(r, SPECULATIVE)].gen_tps > 0)
    identical = None
    if greedy:
        ref = by[(0, ALONE)].tokens
        identical = all(m.tokens == ref for m in by.values())
    return Comparison(runs=tuple(runs), speedups=speedups, spread=spread(speedups, tolerance=tolerance) if speedups else None,
                      identical=identical, warmup_tokens=warm, lockstep=run_both is not None)


def _pct(sp: Spread) -> str:
    """The spread in percent, whole unless that reads as the tolerance itself (10.4% is beyond 10%)."""
    return f"{sp.spread_pct:.1f}" if round(sp.spread_pct) == round(sp.tolerance_pct) else f"{sp.spread_pct:.0f}"


def report_lines(comparison: Comparison, *, load: Mapping[str, Any] | None) -> list[str]:
    """The human report of a repeated comparison: the median speedup and its range, each
    repeat's tok/s, the noisy note with the machine's load, greedy identity."""
    sp = comparison.spread
    n = len(comparison.tps(ALONE))
    if sp is None:
        lines = [f"speedup: not measured (the target alone generated too few tokens to time in {n} repeat(s))"]
    else:
        how = "in lockstep" if comparison.lockstep else "alternated"
        lines = [f"speedup {sp.median:.2f}x, median of {n} repeat(s) {how} (min {sp.min:.2f}x, max {sp.max:.2f}x, "
                 f"spread +-{_pct(sp)}%); warm-up of {comparison.warmup_tokens} tokens per side not counted"]
    spec, alone = comparison.tps(SPECULATIVE), comparison.tps(ALONE)
    lines.append("  tok/s per repeat: speculative " + " / ".join(f"{x:.1f}" for x in spec)
                 + "; target alone " + " / ".join(f"{x:.1f}" for x in alone))
    told = sorted((r for r in comparison.runs if r.side == SPECULATIVE and r.drafting.drafter_rounds), key=lambda r: r.repeat)
    if told:  # which repeats drafted: where drafting does not pay, the ones that paid for finding out
        lines.append("  rounds that drafted per repeat: "
                     + " / ".join(f"{r.drafting.drafting_rounds} of {r.drafting.rounds}" for r in told))
    if sp is not None and sp.noisy:
        lines.append(f"NOISY: the speedups spread +-{_pct(sp)}% around their median (beyond +-{sp.tolerance_pct:.0f}%); "
                     f"{describe_load(load)}: trust the median, or rerun on a quieter machine or with more --repeats")
    else:
        lines.append(f"  {describe_load(load)}")
    if comparison.identical is not None:
        lines.append("output identical to the target alone in every repeat" if comparison.identical
                     else "OUTPUT DIFFERS from the target alone (greedy)")
    return lines
