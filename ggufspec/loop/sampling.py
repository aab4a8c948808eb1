"""Logits -> probabilities, shaped the way llama.cpp's default chain shapes them; pure numpy.

The same shaping is applied to a target row and to the draft row at the same position, so the
acceptance rules (ggufspec.loop.acceptance) compare like with like: a rule is exact for the p and q
it is given, so both must be the distributions the target and the draft really sample from.

Order, as llama.cpp's sampler chain applies them: top-k -> top-p -> min-p -> temperature.
Temperature 0 means greedy: the distribution is one-hot on the argmax (lowest id on ties).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ggufspec.errors import UserError

#: The largest seed, everywhere (--seed, a server request's seed): llama.cpp's seeds are 64-bit
#: and -1 means "random", so a signed 64-bit value.
MAX_SEED = 2**63 - 1


@dataclass(frozen=True, kw_only=True)
class SamplingSettings:
    """How a logits row becomes a distribution. Defaults are greedy."""

    temperature: float = 0.0
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1.0 = off
    min_p: float = 0.0  # 0.0 = off
    seed: int | None = None  # None (or -1, as in llama.cpp) = fresh entropy

    def __post_init__(self) -> None:
        if not (self.temperature >= 0 and math.isfinite(self.temperature)):
            raise UserError(f"temperature must be >= 0, got {self.temperature}; use 0 for greedy")
        if self.top_k < 0:
            raise UserError(f"top-k must be >= 0, got {self.top_k}; use 0 to turn it off")
        if not (0.0 < self.top_p <= 1.0):
            raise UserError(f"top-p must be in (0, 1], got {self.top_p}; use 1 to turn it off")
        if not (0.0 <= self.min_p < 1.0):
            raise UserError(f"min-p must be in [0, 1), got {self.min_p}; use 0 to turn it off")
        if self.seed is not None and not -1 <= self.seed <= MAX_SEED:
            raise UserError(f"seed must be in [0, {MAX_SEED}] (2^63 - 1), or -1 for a random seed, got {self.seed}")
        if self.seed == -1:  # llama.cpp's LLAMA_DEFAULT_SEED: one spelling of "unseeded" from here on
            object.__setattr__(self, "seed", None)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def rng(self) -> np.random.Generator:
        """The run's one source of randomness: seeded runs are reproducible, -1 or None draw fresh entropy."""
        return np.random.default_rng(None if self.seed in (None, -1) else self.seed)


def probabilities(logits: np.ndarray, settings: SamplingSettings) -> np.ndarray:
    """Shape one logits row (V,) into a float64 distribution (V,) with zeros where filtered.

    Args:
        logits: raw logits of one position, shape (V,), any float dtype (may be a view into
            llama.cpp's buffer: it is never written).
        settings: the sampling settings.

    Returns:
        p (V,) float64, sums to 1.
    """
    vocab = logits.shape[-1]
    if settings.greedy:
        p = np.zeros(vocab, dtype=np.float64)
        p[int(np.argmax(logits))] = 1.0
        return p

    # Candidates: all ids, or the k largest in O(V) (no full sort); ties at the boundary go to
    # the lowest ids, as argmax breaks them, so top-k=1 agrees with greedy.
    k = settings.top_k if 0 < settings.top_k < vocab else vocab
    if k < vocab:
        kth = np.partition(logits, vocab - k)[vocab - k]
        above = np.flatnonzero(logits > kth)
        ids = np.concatenate([above, np.flatnonzero(logits == kth)[: k - len(above)]])
    else:
        ids = np.arange(vocab)
    z = logits[ids].astype(np.float64)

    # top-p and min-p are computed at temperature 1 (as llama.cpp does, temp comes last).
    if settings.top_p < 1.0 or settings.min_p > 0.0:
        order = np.argsort(-z, kind="stable")
        ids, z = ids[order], z[order]
        w = np.exp(z - z[0])
        pr = w / w.sum()
        keep = len(pr)
        if settings.top_p < 1.0:
            # smallest prefix whose mass reaches top_p (keep at least one)
            keep = min(keep, int(np.searchsorted(np.cumsum(pr), settings.top_p)) + 1)
        if settings.min_p > 0.0:
            # keep tokens with p >= min_p * p_max (sorted, so a prefix)
            keep = min(keep, max(1, int(np.count_nonzero(pr >= settings.min_p * pr[0]))))
        ids, z = ids[:keep], z[:keep]

    z = z / settings.temperature
    w = np.exp(z - z.max())
    p = np.zeros(vocab, dtype=np.float64)
    p[ids] = w / w.sum()
    return p


def sample(p: np.ndarray, rng: np.random.Generator) -> int:
    """Draw one token id from distribution p (V,) by inverse CDF with one uniform."""
    c = np.cumsum(p)
    # u in [0, c[-1]); searchsorted 'right' skips zero-probability ids.
    idx = int(np.searchsorted(c, rng.random() * c[-1], side="right"))
    return min(idx, len(p) - 1)
