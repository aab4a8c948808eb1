"""The controller's running estimates (pure): timing samples with their robust median, a source's
discounted realized throughput over all generations and over this one, and a drafter's accept
counts and costs. `ggufspec.loop.control` decides from them."""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass, field

# nominal costs in units of a target step (priors; the only costs of a counted controller)
B_MODEL = 0.25  # a draft model's step (c; a prior, and the optimism of a retry)
B_FREE = 0.0  # a free drafter's proposal
ALPHA_MODEL = 0.8  # prior per-token accept rate of a draft model
ALPHA_FREE = 0.6  # ... of prompt lookup, where it found a match


class Samples:
    """The last `window` timing samples; their median, preferring those of the last `horizon` rounds."""

    def __init__(self, window: int) -> None:
        self._items: deque[tuple[int, float]] = deque(maxlen=window)
        # the last answer: the rounds it holds for [first, last] (none: first > last), what it
        # answered (horizon, low, expire) and its value (fields, not a tuple: asked many times a round)
        self._first: int = 1
        self._last: float = 0.0
        self._value: float | None = None
        self._horizon: int = 0
        self._low: bool = False
        self._expire: float = 0.0

    def __reduce__(self) -> tuple[object, ...]:  # (compiled, pickled through __init__ and then its state)
        return Samples, (self._items.maxlen,), self.__getstate__()

    def add(self, now: int, value: float) -> None:
        self._items.append((now, value))
        self._first, self._last = 1, 0.0

    def median(self, now: int, horizon: int, *, low: bool = False, expire: float = math.inf) -> float | None:
        """The low median (`low`: the minimum) of the fresh samples, or of all when none is fresh;
        samples more than `expire` rounds old are gone (None: none left)."""
        if not self._items:
            return None
        if (self._first <= now <= self._last and self._horizon == horizon and self._low == low
                and self._expire == expire):  # asked several times a round, and rounds on end
            return self._value
        items = self._items
        if now - items[0][0] > expire:  # (rare: some samples expired)
            kept = [(r, v) for r, v in items if now - r <= expire]
            if not kept:
                return None
            items = kept  # type: ignore[assignment]
        if now - items[0][0] <= horizon:  # (the usual case: samples come in round order, all fresh)
            last: float = float(items[0][0] + horizon)
            values = [v for _, v in items]
        else:
            fresh = [(r, v) for r, v in items if now - r <= horizon]
            # the answer holds until the oldest fresh sample ages out (none fresh: until the next sample)
            last = fresh[0][0] + horizon if fresh else math.inf
            values = [v for _, v in fresh] if fresh else [v for _, v in items]
        last = min(last, items[0][0] + expire)  # ... or the oldest sample expires
        # a timing is only ever slowed by noise (a stall, llama.cpp's first decode of a new
        # batch shape), never sped up: the low median, or the minimum for the target alone
        value = min(values) if low else statistics.median_low(values)
        self._first, self._last, self._value = now, last, value
        self._horizon, self._low, self._expire = horizon, low, expire
        return value

    def fresh(self, now: int, horizon: int) -> list[float]:
        """The samples of the last `horizon` rounds."""
        return [v for r, v in self._items if now - r <= horizon]

    def __bool__(self) -> bool:
        return bool(self._items)

    def __len__(self) -> int:
        return len(self._items)


@dataclass
class Realized:
    """Discounted sums of one source's rounds: over all generations (`tokens`, `seconds`: aged
    lazily to `at` per round of any source, and per round of its own) and over this generation's
    (`cur_tokens`, `cur_seconds`: per round of its own)."""

    tokens: float = 0.0
    seconds: float = 0.0
    rounds: float = 0.0  # discounted as `tokens` and `seconds`: seconds / rounds is its mean round
    cur_tokens: float = 0.0
    cur_seconds: float = 0.0
    at: int = 0
    last: int | None = None  # round it last ran
    runs: int = 0  # rounds it ran

    def decay_to(self, now: int, gamma: float) -> None:
        if now > self.at:
            w = gamma ** (now - self.at)
            self.tokens *= w
            self.seconds *= w
            self.rounds *= w
            self.at = now

    def round_s(self, default: float) -> float:
        """Seconds of one of its rounds, the discounted mean (`default` before it has run)."""
        return self.seconds / self.rounds if self.rounds > 0 and self.seconds > 0 else default

    def charge(self, seconds: float) -> None:
        """More seconds for its last round (a cost it left to the rounds after it)."""
        self.seconds += seconds
        self.cur_seconds += seconds

    def add(self, tokens: float, seconds: float, *, pool: float, current: float) -> None:
        """A round of this source: earlier rounds weigh `pool` (`current`) less."""
        self.runs += 1
        self.tokens = self.tokens * pool + tokens
        self.seconds = self.seconds * pool + seconds
        self.rounds = self.rounds * pool + 1.0
        self.cur_tokens = self.cur_tokens * current + tokens
        self.cur_seconds = self.cur_seconds * current + seconds


def fit_line(points: list[tuple[float, float, float]]) -> tuple[float, float]:
    """(y0, slope): weighted least squares of y = y0 + slope * x through (x, y, weight) points,
    neither negative (more rows never cost less: a flat line through the weighted mean; nor does
    the first cost less than nothing: a line through the origin)."""
    sw = sx = sxx = sy = sxy = 0.0
    for x, y, w in points:  # (one pass: the controller fits this line every round)
        sw += w
        sx += w * x
        sxx += w * x * x
        sy += w * y
        sxy += w * x * y
    det = sw * sxx - sx * sx
    slope = (sw * sxy - sx * sy) / det if det > 0 else 0.0
    y0 = (sy - slope * sx) / sw if sw > 0 else 0.0
    if slope < 0.0:
        slope, y0 = 0.0, (sy / sw if sw > 0 else 0.0)
    if y0 < 0.0:
        y0, slope = 0.0, (max(0.0, sxy / sxx) if sxx > 0 else 0.0)
    return y0, slope


@dataclass
class DrafterModel:
    free: bool
    drafted_at: list[float] = field(default_factory=list)  # discounted rounds that judged draft i (the drafts before it accepted)
    accepted_at: list[float] = field(default_factory=list)  # ... that accepted it
    per_token: Samples = field(default_factory=lambda: Samples(16))  # draft seconds per call after the first
    first: Samples = field(default_factory=lambda: Samples(16))  # draft seconds of a round's first call
    catchup: Samples = field(default_factory=lambda: Samples(16))  # catch-up seconds per token
    prefill: Samples = field(default_factory=lambda: Samples(16))  # prompt prefill seconds per token
    at: int = 0
    gen_drafted_at: list[float] = field(default_factory=list)  # a free drafter's: as drafted_at, this generation's only (undiscounted)
    gen_accepted_at: list[float] = field(default_factory=list)  # ... accepted_at
    # a draft model's full proposals and a free drafter's continuation of them (rule `extend_k`),
    # discounted as drafted_at: (proposals, continuation rows verified, proposals whose drafts were
    # all kept, continuation tokens kept in those); `gen_continued` the same, this generation's only
    continued: list[float] = field(default_factory=lambda: [0.0] * 4)
    gen_continued: list[float] = field(default_factory=lambda: [0.0] * 4)

    def __reduce__(self) -> tuple[object, ...]:  # (compiled, pickled through __init__ and then its state)
        return DrafterModel, (self.free,), self.__getstate__()

    @property
    def alpha0(self) -> float:
        return ALPHA_FREE if self.free else ALPHA_MODEL

    @property
    def b_prior(self) -> float:
        return B_FREE if self.free else B_MODEL
