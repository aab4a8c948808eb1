"""Bounded exploration: when a source the estimates do not choose runs anyway (pure).

Retries: a source not run for `retry` rounds runs next (the longest waiting first), so a losing
choice is tried again within retry + (number of sources) rounds; one never run runs as soon as it
can. Wait, in retry intervals (due at >= 1):
    w_s = (round - last_s) / (retry * x_s)
    x_none = min(spacing, max(1, (P_best / P_none)^2))     (rule `spacing`: the target alone)
    x_d = min(1, 4 n_d / retry)                           (rule `few_runs`: n_d rounds run)
    x_d = max(spacing, D_d(cap) / (hopeless_share a retry))   (rule `hopeless`, below)
A free drafter is never retried (scored every round: full information). A retry of a draft model
runs at the optimistic K (rule `optimistic_retry`: each c(j) at least alpha0), and once every
`retry` rounds the model the estimates chose does too (rule `k_probe`); every other such probe
runs the best K whose verify went unmeasured lately, if within `close` of the chosen K's rate (rule
`verify_probe`: the line pricing it misses a verify that steps with the kernels' row blocks).

Probe b (rule `probe_b`): b, a draft model's call after a round's first, is measured only in a
round of K >= 2, so one slow measurement (a first use, a busy moment) could make K = 1 the best
length, which never measures it again, or make the model hopeless for D(cap) / (1% a) rounds. So
a retry, an opening and a K probe draft at least 2 tokens; K probes come every 4 n rounds while b
was measured n < FEW_B (4) times, always-draft's one candidate included; b from so few is their
fastest (ggufspec.loop.costmodel); and a model judged hopeless on one measurement of b is retried
every retry x spacing (x (1 + S / a)) rounds, not on its budget (docs/bench/controller.md).

Confirm: a retry after which the source's estimate, or the retry round's own rate, beats the
best other source's runs again, up to `confirm` more rounds.

Opening: a draft model prefilled with a new prompt runs its first `opening` rounds (1 where it
lost clearly when last chosen: under `close` of the best), all of them where it was prefilled
because its retry was due (rule `full_retry`). A prompt's first tokens are often hard: judged on
its first round alone, a retry there failed, the estimate only fell, and a model that did not
share the target's cache sat out whole prompts (tests/test_control.py's hard-start prompts;
figures in docs/bench/controller.md).

Hopeless (rule `hopeless`): a draft model whose ceiling max_K (K + 1) / T(K) at the measured
costs does not beat the best other source is not opened nor prefilled, and is retried only every
retry x spacing rounds, or more rarely where a retry costs more than `hopeless_share` of that
time: every D_d(cap) / (hopeless_share a) rounds (a retry's draft, its first call with the cache
import included, against the target alone's rounds between two retries): where a retry's draft
costs several target steps, retries every `retry` x `spacing` rounds would cost a few percent of
the time where nothing pays (docs/bench/controller.md).

Prefill (`wants`): a draft model is prefilled with a new prompt when never run, the leader, within
`close` of it, or due for a retry, and its expected gain pays for the prefill (ggufspec.loop.catchup);
rule `prefill_rivals`: leader, gain and ceiling judged among the sources that run at any position,
the target alone and the draft models (a free drafter's grade runs only where the history
matches; judged against lookup's grade 3 after a prompt that ended in its matches, the 1B
stand-in's draft went unprefilled and caught up on the whole prompt in its first round:
docs/bench/controller.md);
or where it ran fewer than retry / 2 rounds and a retry is due (rule `unsettled`: a
cold start, whose first rounds' luck would otherwise decide for prompts on end: a model that does
not share the target's cache and is not prefilled misses the whole prompt, a catch-up that rarely
pays);
or, whatever the estimates, once the time since it ran is 1 / `explore_share` times the prefill's
and its opening's cost (exploration bounded to that share of the time; it then opens in full).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from mypy_extensions import mypyc_attr

from ggufspec.loop.catchup import CatchUp
from ggufspec.loop.controlsettings import FEW_B, SYNCED, ControlSettings
from ggufspec.loop.rounds import NONE, Candidate, Choice


@mypyc_attr(allow_interpreted_subclasses=True)  # (subclassed: tests, scripts)
class Exploration(CatchUp):
    """The estimates with the retry, opening and confirm schedule."""

    def __init__(self, *, timed: bool, settings: ControlSettings) -> None:
        super().__init__(timed=timed, settings=settings)
        self._bar = math.inf  # the best other source's estimate when a retry ran
        self._probe: tuple[int, int] = (1, 1)  # (lo, cap) of the K range of the retried source
        self._confirm: tuple[str, int] | None = None  # (source, rounds left) to run again
        self._confirming = False  # the last retry round was a confirmation (never re-arms it)
        self._opening: dict[str, int] = {}  # draft model -> opening rounds left in this generation
        self._rates: dict[str, float] = {}  # each source's estimate when last chosen
        self._pooled: dict[str, float] = {}  # ... its rate over all generations
        self._prior: dict[str, float] = {}  # ... a drafter's prior rate (alpha0, the measured costs)
        self._k_probe: dict[str, int] = {}  # draft model -> round its K was last explored
        self._k_probes: dict[str, int] = {}  # draft model -> K probes so far (rule `verify_probe`: every other one)
        self._clock = 0.0  # seconds charged to every round so far (nominal ones when counted)
        self._ran_s: dict[str, float] = {}  # source -> `_clock` when it last ran
        self._exploring: set[str] = set()  # draft models prefilled for exploration's sake (full opening)
        self._caps: dict[str, int] = {}  # drafter -> the longest K it could draft when last a candidate, not in a tail
        self._hopeless_now: set[str] = set()  # draft models that cannot pay at the measured costs

    def _hopeless(self, name: str, rates: Mapping[str, float], *, lo: int, cap: int) -> bool:
        """Draft model `name`'s ceiling does not beat the best other source (unmeasured: no)."""
        if not self.settings.hopeless or name == NONE or self._drafters[name].free or not self._drafters[name].per_token:
            return False
        best = max((r for n, r in rates.items() if n != name), default=0.0)
        ceiling = self.ceiling_rate(name, lo=lo, cap=cap)
        return ceiling is not None and best > 0.0 and ceiling <= best

    def _wait(self, name: str) -> float:
        """How due source `name` is for a retry: >= 1 due (inf: never run; 0: a free drafter)."""
        s = self._source(name)
        if name != NONE and self._drafters[name].free:
            return 0.0
        if s.last is None:
            return math.inf
        return (self.round - s.last) / self._interval(name)

    def _interval(self, name: str) -> float:
        """Rounds between two retries of source `name`, one that has run and is not free: retry x_s."""
        st = self.settings
        if name == NONE:
            rounds = st.retry * self._spacing(NONE)
        elif name in self._hopeless_now:
            return self._hopeless_interval(name)
        else:
            rounds = float(min(st.retry, 4 * max(1, self._source(name).runs)) if st.few_runs else st.retry)
        s = self.switch_s(now=False)  # rule switch_cost: a retry costs a way back to one row too, S / a rounds
        a = self.base_s() if s else None
        return rounds * (1.0 + s / a) if a else rounds

    def _hopeless_interval(self, name: str) -> float:
        """Rounds between two retries of hopeless draft model `name` (module docstring)."""
        st = self.settings
        a, s = self.base_s(), self.switch_s(now=False)
        floor = st.retry * st.spacing * (1.0 + s / a if a else 1.0)
        if st.probe_b and len(self._drafters[name].per_token) < 2:  # judged on one measurement of b
            return floor
        d = self.draft_cost_s(name, self._caps.get(name, 1))
        budget = (d + s) / (st.hopeless_share * a) if a and d else 0.0
        return max(floor if st.probe_b else st.retry * st.spacing, budget)

    def _spacing(self, name: str) -> float:
        """x_s = (P_best / P_s)^2 by the rates over all generations, within [1, `spacing`]."""
        own = self._pooled.get(name, 0.0)
        best = max((r for n, r in self._pooled.items() if n != name), default=0.0)
        if own <= 0.0 or best <= own:
            return 1.0
        return min(self.settings.spacing, (best / own) ** 2)

    def _probed_len(self, name: str, lo: int, cap: int, k: int) -> int:
        """Rule `k_probe`: the K of draft model `name` chosen at `k`, the optimistic K where a probe
        is due: `retry` rounds since its last, or 4 n while its b was measured n < FEW_B times (rule
        `probe_b`)."""
        st = self.settings
        n = len(self._drafters[name].per_token)
        every = max(4, 4 * n) if st.probe_b and n < FEW_B else st.retry
        if not st.k_probe or self.round - self._k_probe.get(name, 0) < every:
            return k
        self._k_probe[name] = self.round
        n = self._k_probes[name] = self._k_probes.get(name, 0) + 1
        near = self._unmeasured_len(name, lo, cap, k) if st.verify_probe and n % 2 == 0 else None
        return near if near is not None else self._retry_len(name, lo, cap, k, optimistic=True)

    def _unmeasured_len(self, name: str, lo: int, cap: int, k: int) -> int | None:
        """Rule `verify_probe`: the K in [max(lo, 2), cap] with the best modelled rate among those
        whose verify was not measured lately, if at least `close` x K's (None: none)."""
        rates = self.len_rates(name, cap=cap)
        if rates is None:
            return None
        fresh, bar = self._fresh(), self.settings.close * rates[k - 1]
        stale = [j for j in range(max(lo, min(2, cap)), cap + 1) if j != k and rates[j - 1] >= bar
                 and not (j in self._verify and self._verify[j].fresh(self.round, fresh))]
        return max(stale, key=lambda j: rates[j - 1], default=None)  # (ties: the shortest)

    def _retry_len(self, name: str, lo: int, cap: int, k: int, *, optimistic: bool | None = None) -> int:
        """K of a retry of draft model `name`: the best under the optimistic curve (a free
        drafter's K is its match, as chosen)."""
        if self._drafters[name].free:
            return k
        best = self.best_len(name, lo=lo, cap=cap,
                             optimistic=self.settings.optimistic_retry if optimistic is None else optimistic)
        k = best[0] if best is not None else k
        return max(k, min(2, cap)) if self.settings.probe_b else k

    def wants(self, name: str, *, backlog: int | None = None, remaining: int | None = None) -> bool:
        """Should draft model `name` be prefilled with a new prompt (module docstring)? `backlog`:
        the prompt tokens it lacks; `remaining`: the tokens the generation may emit."""
        self.replay()
        s = self._sources.get(name)
        if s is None or s.last is None:
            return True
        # judged against the sources that run wherever the history is: a free drafter's grade runs
        # only where it matches, and a model prefilled for the rest pays there too
        rates = self._anywhere(self._rates)
        hopeless = (self._hopeless(name, rates, lo=1, cap=self._caps.get(name, 1)) if self.settings.prefill_rivals
                    else name in self._hopeless_now)
        if hopeless:  # no prefill for a model that cannot pay until its rare retry
            return self.round - s.last >= self._hopeless_interval(name)
        leader = bool(rates) and name == max(rates, key=lambda n: rates[n])
        due = self.round - s.last >= self.settings.retry
        best = max(rates.values(), default=0.0)
        close = rates.get(name, 0.0) >= self.settings.close * best
        if not (leader or due or close):
            return False
        if self._prefills(name, s.last, leader, best, backlog=backlog, remaining=remaining):
            if due and self.settings.full_retry:  # rule `full_retry`: a retry's full opening
                self._exploring.add(name)
            return True
        return False

    def _anywhere(self, rates: Mapping[str, float]) -> dict[str, float]:
        """`rates` of the sources that can run at any position: the target alone and draft models."""
        if not self.settings.prefill_rivals:
            return dict(rates)
        return {n: r for n, r in rates.items() if n == NONE or not self._drafters[n].free}

    def _prefills(self, name: str, last: int, leader: bool, best: float, *, backlog: int | None,
                  remaining: int | None) -> bool:
        """`wants` for a model that leads, is within `close` of the leader or is due for a retry."""
        if backlog is None or remaining is None or self._explore_unsettled(name, last, best):
            return True
        other = max((r for n, r in self._anywhere(self._pooled).items() if n != name), default=0.0)
        rate = self._pooled.get(name, 0.0)
        if not leader:
            rate = max(rate, self._prior.get(name, 0.0))
        if other <= 0.0 or self._pays(name, backlog, rate, other, remaining, prefill=True):
            return True
        prefill_s = max(0, backlog - SYNCED) * self._prefill_s(name)
        cap = self._caps.get(name, 1)
        opening_s = self.settings.opening * ((self.verify_s(cap) or 0.0) + (self.draft_cost_s(name, cap) or 0.0))
        idle_s = self._clock - self._ran_s.get(name, 0.0)
        if idle_s * self.settings.explore_share >= prefill_s + opening_s:
            self._exploring.add(name)
            return True
        return False

    def _explore_unsettled(self, name: str, last: int, best: float) -> bool:
        """Rule `unsettled` at a new prompt: a draft model that ran fewer than retry / 2 rounds (last
        in round `last`) and is due for a retry is prefilled, its opening the retry, unless even
        every draft accepted would leave it within `close` of the best (its ceiling). At most
        retry / 2 such rounds in a controller's life."""
        if not self._unsettled(name) or self.round - last < self._interval(name):
            return False
        ceiling = self.ceiling_rate(name, lo=1, cap=self._caps.get(name, 1))
        return ceiling is not None and ceiling * self.settings.close > best

    def begin(self, *, prefilled: Sequence[str] = (), prefill: Mapping[str, tuple[int, float]] | None = None,
              target_prefill: tuple[int, float] | None = None) -> None:
        """A generation starts; the draft models in `prefilled` hold its prompt and open it
        (`opening` rounds; 1 where it lost clearly when last chosen). `prefill`: tokens and
        seconds each prefill took; `target_prefill`: the target's (rule `prefill_slope`)."""
        self._memo.clear()  # this generation's counts start now
        best = max(self._rates.values(), default=0.0)
        exploring, self._exploring = self._exploring, set()
        self._opening = {n: self.settings.opening
                         if n in exploring or self._rates.get(n, best) >= self.settings.close * best else 1
                         for n in prefilled if self.settings.opening > 0}
        self._confirming, self._confirm = False, None
        for src in self._sources.values():  # this generation's rounds start now
            src.cur_tokens = src.cur_seconds = 0.0
        for m in self._drafters.values():  # ... and its free drafters' scored proposals (a model's continuations)
            if m.free:
                m.gen_drafted_at, m.gen_accepted_at = [], []
            else:
                m.gen_continued = [0.0] * 4
        for name, (tokens, seconds) in (prefill or {}).items():
            if tokens >= 16:  # (a few tokens measure the call, not the tokens)
                self._model(name, False).prefill.add(self.round, seconds / tokens)
        if target_prefill is not None and target_prefill[0] >= 16 and self.timed:
            self._prefill_row.add(self.round, target_prefill[1] / target_prefill[0])
        self._memo.clear()

    def _after_retry(self, name: str | None, emitted: int, charged_s: float, a: float) -> None:
        """A retry ran (`a`: the target step then): arm `confirm` rounds of it where it, or its
        estimate, beat `_bar`."""
        if name is None:
            prior = 1.0 / a if a else None
        else:
            best = self.best_len(name, lo=self._probe[0], cap=self._probe[1])
            prior = best[1] if best is not None else None
        rate = self.throughput(NONE if name is None else name, prior) or 0.0
        own = emitted / (charged_s or 1e-12)  # the round's own rate: the estimate keeps older rounds
        if max(rate, own) <= self._bar:
            self._confirm = None
        elif self._confirm is None and not self._confirming and self.settings.confirm > 0:
            self._confirm = (NONE if name is None else name, self.settings.confirm)

    def _open(self, drafters: Sequence[Candidate], options: Mapping[str, tuple[int, float | None]],
              rates: Mapping[str, float], caps: Mapping[str, int], lo: int, remaining: int | None) -> Choice | None:
        """This round's opening round, if one is left (rule `opening`; not for a model behind,
        one that shares the target's cache, or a hopeless one)."""
        backlogs = {c.name: c.backlog for c in drafters}
        shared = {c.name for c in drafters if c.kv_shared}
        if remaining is not None and remaining < self.settings.retry:  # too short to use what it learns
            self._opening.clear()
        opening = self._opening  # (a shared controller: another slot's `begin` may replace it)
        for n in list(opening):
            left = opening.pop(n, 0)
            if n not in options or backlogs.get(n, 0) > SYNCED or left <= 0 or n in shared or n in self._hopeless_now:
                continue
            if left > 1:
                opening[n] = left - 1
            self._bar = max((r for m, r in rates.items() if m != n), default=0.0)
            self._probe = (lo, caps[n])
            return Choice(n, self._retry_len(n, lo, caps[n], options[n][0]), retry=True)
        return None
