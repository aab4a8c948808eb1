"""Hold: a clear choice of the target alone stands for a few rounds without pricing the sources (pure).

Rule `hold`: where the estimates chose the target alone by a clear margin, its rate R at least
1 + `hold_margin` times every other source's, that choice stands for up to `hold` rounds, as long as
- the draft models among the candidates are the same, `draft_min` and `allow_none` too;
- each free drafter's proposal is of a grade whose estimate, when last priced, R beat as clearly
  (a grade never priced ends the hold);
- no retry falls due: the hold ends the round before the first one (a source is due its
  `Exploration._interval` rounds after it last ran);
and a new generation (`begin`) or a recalibration of a ends it. The estimates still learn from
every round (`observe`); only the pricing is skipped. Where nothing pays, pricing every source
every round was most of our Python a round (docs/bench/overhead.md). A held round's bookkeeping
waits until something reads the estimates (the next priced round, `begin`, `wants`, any estimate)
and is then replayed in order, each round at its own round number: the same state, reached in
one warm pass (after a decode our Python runs cache-cold: docs/bench/overhead.md, last section).
A runner may ask `held` before it counts the draft models' backlogs, and before it asks the free
drafters where it names the grades their proposals may have: a round held whatever they would
propose (every grade's estimate under the bar) has them asked after it (ggufspec.loop.late).
Holding a draft model's choice too was tried twice: a prompt on which its drafts are rejected must
be left within a few rounds, catch-ups priced every round, and a free drafter's grades re-priced
every round they propose (its estimate moves with every round scored), so it needed as many
exceptions as it saved; not kept (docs/bench/controller.md, rule `hold_model`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from mypy_extensions import mypyc_attr

from ggufspec.loop.controlsettings import ControlSettings
from ggufspec.loop.exploration import Exploration
from ggufspec.loop.rounds import NONE, Candidate, Choice, Round

HELD = Choice(None, 0)  # the choice a hold makes


@dataclass(frozen=True)
class Held:
    """The target alone stands, with rate `rate`, through round `until`, among the draft models
    `models` with `lo` and `allow_none` as when chosen."""

    until: int
    models: tuple[str, ...]
    lo: int
    allow_none: bool
    rate: float

    def __reduce__(self) -> tuple[object, ...]:  # (compiled, a frozen dataclass pickles through its constructor)
        return Held, (self.until, self.models, self.lo, self.allow_none, self.rate)


@mypyc_attr(allow_interpreted_subclasses=True)  # (subclassed: tests, scripts)
class Hold(Exploration):
    """The exploration schedule with clear choices held (module docstring)."""

    def __init__(self, *, timed: bool, settings: ControlSettings) -> None:
        super().__init__(timed=timed, settings=settings)
        self._recheck = False  # a is suspect: measure the target alone again (ends a hold)
        self._hold: Held | None = None
        self._rated: dict[str, float] = {}  # each source's estimate when last priced (a free drafter's by grade)
        self._held_at = -1  # the round whose choice a hold made
        self._grade_keys: dict[tuple[str, Sequence[int]], tuple[str, ...]] = {}  # (`held`: each grade's source)
        # the hold one of whose free drafters' grades was rated over its bar (`held` with grades:
        # not held whatever they propose, until the next pricing, the only one to change `_rated`,
        # makes another hold)
        self._grades_over: Held | None = None

    def begin(self, *, prefilled: Sequence[str] = (), prefill: Mapping[str, tuple[int, float]] | None = None,
              target_prefill: tuple[int, float] | None = None) -> None:
        self._hold = None  # a new prompt: its openings and candidates decide afresh
        super().begin(prefilled=prefilled, prefill=prefill, target_prefill=target_prefill)

    def held(
        self, *, drafters: Sequence[Candidate], grades: Mapping[str, Sequence[int]] | None = None, draft_max: int,
        draft_min: int = 0, allow_none: bool = True, remaining: int | None = None,
    ) -> Choice | None:
        """The choice a hold makes this round (module docstring), or None: the round is priced
        (`choose`, which holds the same way). Reads no draft model's `backlog`, so a runner may ask
        before it counts them (a walk over the history, cache-cold after a decode). `grades`: free
        drafters not asked yet (not among `drafters`), each with the grades its proposals may have:
        held only where the round would be whatever they propose (ggufspec.loop.late)."""
        h = self._holding()
        if h is None or (grades is not None and self._grades_over is h):
            return None  # (the candidates' caps are learnt where the round is priced, or asked again)
        lo = max(1, draft_min)
        caps, _, models = self._caps_now(drafters, draft_max=draft_max, lo=lo, remaining=remaining)
        graded: list[str] = []
        for name, gs in (grades or {}).items():  # each grade's source, as if it proposed
            keys = self._grade_keys.get((name, gs))
            if keys is None:
                keys = self._grade_keys[(name, gs)] = tuple(self._key(name, g) for g in gs)
            graded += keys
        if self._held([*caps, *graded], models, lo, allow_none):
            return HELD
        bar = self._hold_bar(h)
        if any(self._rated.get(n, math.inf) > bar for n in graded):
            self._grades_over = h
        return None

    def _caps_now(self, drafters: Sequence[Candidate], *, draft_max: int, lo: int,
                  remaining: int | None) -> tuple[dict[str, int], list[str], tuple[str, ...]]:
        """(caps, keys, models): each source's longest K this round (the target alone's 0), each
        candidate's source (`_key`), and the draft models among the sources; what a source could
        draft lately (`_caps`) learns it."""
        caps: dict[str, int] = {NONE: 0}
        keys, models = [], []
        # the generation's last tokens cap K (draft_max = remaining - 1): a model is judged for
        # the next prompt (its prior, whether it is hopeless) at the K it drafts otherwise
        tail = remaining is not None and draft_max >= remaining - 1
        for c in drafters:
            name = self._key(c.name, c.grade)
            keys.append(name)
            self._model(name, c.free)
            cap = draft_max if c.match_len is None else min(draft_max, c.match_len)
            if cap >= lo:
                caps[name] = cap
                if not c.free:
                    models.append(name)
                if not tail or name not in self._caps:
                    self._caps[name] = cap
        return caps, keys, tuple(models)

    def _holding(self) -> Held | None:
        """The hold on, whatever this round's candidates (`_held` decides), or None."""
        h = self._hold
        return h if h is not None and self.round <= h.until and not self._recheck else None

    def _hold_bar(self, h: Held) -> float:
        """The estimate under which a source leaves hold `h` standing (its rate over 1 + `hold_margin`)."""
        return h.rate / (1.0 + self.settings.hold_margin)

    def _held(self, sources: Iterable[str], models: tuple[str, ...], lo: int, allow_none: bool) -> bool:
        """Does a hold cover this round, among the candidates' `sources` (module docstring)? If
        so, its round is marked held (`_defers`)."""
        h = self._holding()
        if h is None or (h.models, h.lo, h.allow_none) != (models, lo, allow_none):
            return False
        bar, rated = self._hold_bar(h), self._rated
        for n in sources:
            if n != NONE and n not in models and rated.get(n, math.inf) > bar:
                return False
        self._held_at = self.round
        return True

    def _defers(self, r: Round) -> bool:
        """Is `r` a held round, its bookkeeping for later (module docstring)? Then it is queued."""
        if self._held_at != self.round or r.drafted or r.choice is None or r.choice.retry:
            return False
        self._pending.append((self.round, r))
        self.round += 1
        return True

    def _hold_none(self, rates: Mapping[str, float], models: tuple[str, ...], lo: int, allow_none: bool) -> None:
        """The estimates chose the target alone among the sources of `rates`: hold it if it won
        clearly (module docstring)."""
        st = self.settings
        others = [r for n, r in rates.items() if n != NONE]
        if st.hold <= 0 or not others or rates[NONE] < (1.0 + st.hold_margin) * max(others) or self._confirm:
            return
        rounds = st.hold
        for n in rates:
            last = self._source(n).last
            if n == NONE or self._drafters[n].free or last is None:
                continue  # (a free drafter is never retried)
            due_in = last + self._interval(n) - self.round  # rounds until it is due (ends the hold before)
            rounds = min(rounds, math.ceil(due_in - 1e-9) - 1)
        if rounds > 0:
            self._hold = Held(self.round + rounds, models, lo, allow_none, rates[NONE])
