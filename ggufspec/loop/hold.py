"""Hold: a clear choice stands for a few rounds without pricing the sources (pure).

Rule `hold`: where the estimates chose a source by a clear margin, its rate R at least
1 + `hold_margin` times every other source's, that choice (the target alone, or a draft model:
rule `hold_model`) stands for up to `hold` rounds, as long as
- the draft models among the candidates are the same, `draft_min` and `allow_none` too;
- each free drafter's proposal is of a grade whose estimate, when last priced, R beat as clearly
  (a grade never priced ends the hold);
- no retry falls due: the hold ends the round before the first one (a source is due its
  `Exploration._interval` rounds after it last ran), nor the held model's K probe;
- a held draft model is in step (a backlog of at most SYNCED tokens), and the held rounds
  together (the one priced included) realize at least R / (1 + `hold_margin`), what made the
  choice clear: rejected drafts end its hold within a round or two, and the estimates decide
  again. Its K is still priced every round (`best_len`, as the estimates would): held at one K,
  the positions past it went unmeasured and K drifted down (docs/bench/controller.md);
and a new generation (`begin`) or a recalibration of a ends it. The estimates still learn from
every round (`observe`); only the pricing is skipped. Pricing every source every round was most
of our Python a round (docs/bench/overhead.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ggufspec.loop.controlsettings import SYNCED, ControlSettings
from ggufspec.loop.exploration import Exploration
from ggufspec.loop.rounds import NONE, Candidate, Choice


@dataclass
class Held:
    """`source` (NONE: the target alone) stands, with rate `rate`, through round `until`, among
    the draft models `models` with `lo` and `allow_none` as when chosen; a draft model's held
    rounds must realize `floor` together: `tokens` in `seconds` so far."""

    until: int
    models: tuple[str, ...]
    lo: int
    allow_none: bool
    rate: float
    source: str = NONE
    floor: float = 0.0
    tokens: float = 0.0
    seconds: float = 0.0


class Hold(Exploration):
    """The exploration schedule with clear choices held (module docstring)."""

    def __init__(self, *, timed: bool, settings: ControlSettings) -> None:
        super().__init__(timed=timed, settings=settings)
        self._recheck = False  # a is suspect: measure the target alone again (ends a hold)
        self._hold: Held | None = None
        self._rated: dict[str, float] = {}  # each source's estimate when last priced (a free drafter's by grade)

    def begin(self, *, prefilled: Sequence[str] = (), prefill: Mapping[str, tuple[int, float]] | None = None) -> None:
        self._hold = None  # a new prompt: its openings and candidates decide afresh
        super().begin(prefilled=prefilled, prefill=prefill)

    def _held(self, drafters: Sequence[Candidate], caps: Mapping[str, int], models: tuple[str, ...], lo: int,
              allow_none: bool) -> Choice | None:
        """The held choice, where a hold covers this round (module docstring)."""
        h = self._hold
        if h is None or self.round > h.until or (h.models, h.lo, h.allow_none) != (models, lo, allow_none) or self._recheck:
            return None
        if h.source != NONE and (h.source not in caps
                                 or next(c for c in drafters if c.name == h.source).backlog > SYNCED):
            return None
        bar = h.rate / (1.0 + self.settings.hold_margin)
        if not all(n == NONE or n in models or self._rated.get(n, math.inf) <= bar for n in caps):
            return None
        if h.source == NONE:
            return Choice(None, 0)
        cap = caps[h.source]
        best = self.best_len(h.source, lo=lo, cap=cap)  # its K as the estimates would price it
        return Choice(h.source, best[0] if best is not None else min(cap, max(lo, 4)))

    def _hold_choice(self, rates: Mapping[str, float], name: str, models: tuple[str, ...], lo: int,
                     allow_none: bool) -> None:
        """The estimates chose source `name` (NONE or a draft model) among the sources of `rates`:
        hold it if it won clearly (module docstring)."""
        st = self.settings
        others = [r for n, r in rates.items() if n != name]
        if (st.hold <= 0 or not others or rates[name] < (1.0 + st.hold_margin) * max(others) or self._confirm
                or (name != NONE and not st.hold_model)):
            return
        rounds = st.hold
        if name != NONE:  # ... nor its K probe (`_choose`: due `retry` rounds after the last)
            rounds = min(rounds, self._k_probe.get(name, 0) + st.retry - 1 - self.round)
        for n in rates:
            last = self._source(n).last
            if n == name or (n != NONE and self._drafters[n].free):
                continue  # (a free drafter is never retried)
            if last is None:
                if name == NONE:
                    continue  # (as the target alone's hold always did)
                return  # (never run: due at once)
            due_in = last + self._interval(n) - self.round  # rounds until it is due (ends the hold before)
            rounds = min(rounds, math.ceil(due_in - 1e-9) - 1)
        if rounds > 0:
            self._hold = Held(self.round + rounds, models, lo, allow_none, rates[name], name,
                              rates[name] / (1.0 + st.hold_margin) if name != NONE else 0.0)

    def _held_ran(self, name: str, tokens: int, seconds: float) -> None:
        """A round of source `name` ran: a draft model's hold ends where its held rounds together
        realized less than its floor (or another source ran)."""
        h = self._hold
        if h is None or h.source == NONE:
            return
        if name != h.source:
            self._hold = None
            return
        h.tokens += tokens
        h.seconds += seconds
        if h.tokens < h.floor * h.seconds:
            self._hold = None
