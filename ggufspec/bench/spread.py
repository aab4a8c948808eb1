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

The interval is the (1 - level) / 2 and (1 + level) / 2 quantiles of the drawn ratios.
`paired` (a lockstep bench, ggufspec.bench.lockstep): every configuration's runs of one (repeat,
prompt) block ran side by side and share that block's slow or fast seconds, so a draw resamples
the blocks, the same repeats for every configuration, instead of each configuration's runs apart
(which would count the shared noise as if it were each run's own). The
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
    draws: int = 2000, level: float = 0.9, seed: int = 0, paired: bool = False,
) -> tuple[float, float] | None:
    """The `level` bootstrap interval of default / max(1, best rival) over `prompts` (see the
    module docstring). Prompts the default or the baseline did not run are left out, and so is a
    rival missing any of the rest; None when no prompt is left. paired: samples[c][p][i] is
    repeat i's for every configuration c (0: not run), and the repeats are drawn together."""
    if not 0 < level < 1 or draws < 1:
        raise ValueError(f"level must be in (0, 1) and draws >= 1, got {level}, {draws}")

    def has(cfg: str, p: str) -> bool:
        return any(x > 0 for x in samples.get(cfg, {}).get(p, ()))

    ids = [p for p in prompts if has(default, p) and has(baseline, p)]
    if not ids:
        return None
    rivals = [r for r in rivals if r != default and all(has(r, p) for p in ids)]
    rng = np.random.default_rng(seed)
    if paired:  # the repeats every configuration ran, per prompt, and one draw of them for all
        keep = {p: [i for i in range(len(samples[default][p]))
                    if all(i < len(samples[c][p]) and samples[c][p][i] > 0 for c in (default, baseline, *rivals))]
                for p in ids}
        ids = [p for p in ids if keep[p]]
        if not ids:
            return None
        shared = {p: np.asarray(keep[p])[rng.integers(0, len(keep[p]), size=(draws, len(keep[p])))] for p in ids}

    def repeat_medians(cfg: str) -> np.ndarray:
        """(draws, P): each prompt's median tok/s over its resampled repeats."""
        out = np.empty((draws, len(ids)))
        for j, p in enumerate(ids):
            if paired:
                out[:, j] = np.median(np.asarray(samples[cfg][p], dtype=float)[shared[p]], axis=1)
                continue
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


def geomean_interval(ratios: Sequence[float], *, draws: int = 2000) -> tuple[float, float, float]:
    """(geometric mean of `ratios`, its 90% bootstrap interval): the paired A/B scripts' figure
    (`scripts/code_ab.py`, `scripts/control_ab.py`), the ratios resampled with replacement, draw s
    seeded with s (the same ratios give the same interval). Where `ratio_interval` resamples a
    bench's repeats, this resamples the paired ratios themselves (prompts, or runs)."""
    def gm(v: Sequence[float]) -> float:
        return float(np.exp(np.mean(np.log(v))))

    import random

    boot = sorted(gm(random.Random(s).choices(list(ratios), k=len(ratios))) for s in range(draws))
    return gm(ratios), boot[draws // 20], boot[draws - draws // 20 - 1]
