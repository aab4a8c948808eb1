"""How far a bench ratio can be trusted: a bootstrap over the repeats of each run (pure).

A category's figure is a median over a handful of prompts (5-12) of per-prompt medians over 2-3
repeats, on hosts where one run of a prompt swings by 5-15% (the full bench of docs/bench: one
repeat's category median differs from the other's by 7.7%, median over cells). The default /
best ratio of a category (`summary.default_vs_best`) is then a ratio of such medians with a
maximum over rivals in its denominator, which also favours whichever rival was lucky. Its interval
says whether a 0.966 is a loss or a draw: how far the figure moves when the same prompts run
again.

Resampling, `draws` times (seeded: the same runs give the same interval), each (configuration,
prompt)'s repeats with replacement, the target alone's too; then, as the bench computes it,
speedup_c = median over the prompts of median(c's tok/s) / median(target alone's tok/s), and

    ratio = speedup_default / max(1, max over rivals r of speedup_r)

The interval is the (1 - level) / 2 and (1 + level) / 2 quantiles of the drawn ratios. The
maximum stays inside each draw, so the interval carries the best-of-n selection too. The prompts
are not resampled: the question is the run's noise, not other prompts (resampling them too widened
tuned code's 90% interval from 0.88-1.08 to 0.80-1.11 in the full bench). With 2 repeats a
prompt's median has three outcomes and the bootstrap understates the spread (its variance is
(n - 1) / n of the sample's): the interval is a lower bound on the uncertainty, not a test.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

Samples = Mapping[str, Mapping[str, Sequence[float]]]  # configuration -> prompt id -> tok/s per repeat


def ratio_interval(
    samples: Samples, *, default: str, rivals: Sequence[str], baseline: str, prompts: Sequence[str],
    draws: int = 2000, level: float = 0.9, seed: int = 0,
) -> tuple[float, float] | None:
    """The `level` bootstrap interval of default / max(1, best rival) over `prompts` (see the
    module docstring). Prompts the default or the baseline did not run are left out, and so is a
    rival missing any of the rest; None when no prompt is left."""
    if not 0 < level < 1 or draws < 1:
        raise ValueError(f"level must be in (0, 1) and draws >= 1, got {level}, {draws}")

    def has(cfg: str, p: str) -> bool:
        return any(x > 0 for x in samples.get(cfg, {}).get(p, ()))

    ids = [p for p in prompts if has(default, p) and has(baseline, p)]
    if not ids:
        return None
    rivals = [r for r in rivals if r != default and all(has(r, p) for p in ids)]
    rng = np.random.default_rng(seed)

    def repeat_medians(cfg: str) -> np.ndarray:
        """(draws, P): each prompt's median tok/s over its resampled repeats."""
        out = np.empty((draws, len(ids)))
        for j, p in enumerate(ids):
            v = np.asarray([x for x in samples[cfg][p] if x > 0], dtype=float)
            out[:, j] = np.median(v[rng.integers(0, len(v), size=(draws, len(v)))], axis=1)
        return out

    base = repeat_medians(baseline)

    def speedup(cfg: str) -> np.ndarray:
        """(draws,): the category's median speedup in each draw."""
        return np.median(repeat_medians(cfg) / base, axis=1)

    ratio = speedup(default) / np.maximum(1.0, np.max([speedup(r) for r in rivals], axis=0) if rivals else 1.0)
    lo, hi = np.quantile(ratio, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)
