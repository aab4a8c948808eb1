"""The cost model: what a round of each source costs, from measurements only (pure).

    T_d(K) = V(K) + D_d(K),   V(K) = a + v0 + v K,   D_d(K) = f_d + (K - 1) b_d   (K >= 1),   T(0) = a
    (V(K) towards what K cost where it ran lately: rule `measured_verify`)

a: the fastest of the last `window` rounds' verify-and-Python seconds (a round that drafted
nothing measures a; one that drafted bounds it from above: K + 1 rows cost no less than one).

V(K): a round verifying K drafts, drafting excluded, whoever proposed them. (v0, v) is the
weighted least-squares line through the median verify-and-Python time of each K measured lately
(weight min(n, 4)), with the prior v0 = 0.3 a, v = max(0.2 a, p) as two pseudo-samples of weight
`verify_prior_weight` (1/4) at K = 1 and K = 8. Not linear from 0: a verify's first extra row
costs more than the next ones on a CPU. Rule `prefill_slope`: p is the low median of the target's
prompt prefills, seconds a token (prompts of >= 16 new tokens). A row of a small verify batch costs
no less than a token of a large prefill (the same matrix products, less work to share them), so
where rows are compute-bound (a quantized target on a CPU: prefill 0.40 a a token, verify rows
0.58 a, on a 2-core EPYC) the prior starts there instead of at 0.2 a, and the first dear proposals
are priced near what they cost; on a GPU or an F32 CPU target p < 0.2 a and nothing changes.

Rule `measured_verify`: V(K) is the line moved towards the low median m measured at K over its
n samples of the last 2 `retry` rounds, as far as m stands out of their noise (positive-part
James-Stein: d = m - line, s the median's standard error from the verifies' relative MAD pooled
over every K, V = line + d max(0, 1 - s^2 / d^2)). A verify's seconds are not linear in its rows:
the kernels change with the batch's shape (a CPU's 5 rows may cost as much as its 8, and 8 less
than 7), and a line through them prices the K run most cheap and the others dear, so the K chosen
was not the one whose rounds made most a second. Where the rows are linear the deviations are
noise and the line, which pools every K, stays (measured per K, they moved the K chosen at random:
docs/bench/controller.md). A K not run for 2 `retry` rounds is priced by the line again, so a few
slow samples cannot keep a K out for longer. The extension's row stays the line's slope.

Expiry (`expire`): a drafter's timing samples (b, f, u, its prefill's) and the verify line's are
forgotten `expire` rounds after they were taken: the estimate falls back to its prior and the next
retry measures it anew (a, measured every few rounds, never expires). What drafting costs is
measured only when it runs, and the low median keeps a few slow samples as long as nothing newer
outvotes them. Without expiry, samples taken in a busy minute (several processes warming at once)
kept the default pair on the target alone for good: judged hopeless, the model's retries came
thousands of rounds apart; a slow b made K = 1 its best length, which never measures b again; a
slow point at K = 8 bent the verify line so that K = 8 never ran again. `expire` is set beyond the
hopeless retries' interval where nothing pays (the measurements: docs/bench/controller.md).

D_d(K): drafter d's seconds for K tokens, K decode calls: b_d the low median of the last
`window` calls after a round's first (their minimum while fewer than FEW_B: rule `probe_b`), f_d
of its first call (rule `first_call`: the first call imports the target's cache and decodes what
the last round left; off: D = K b, b the draft's seconds over its tokens). A free drafter (prompt
lookup) costs b = 0.

u_d: a draft model's catch-up seconds a token of history it missed (median; prior 0.3 a).

The ceiling of a draft model, max_K (K + 1) / T(K), is its rate were every draft accepted
(rule `hopeless`, ggufspec.loop.exploration). The prior rate max_K E_alpha0(K) / T(K) prices it
at the prior accept rate alpha0 (E(K) = sum_{i=0..K} alpha0^i).

With `timed=False` the costs are nominal (a = 1, V(K) = 1.3 + 0.2 K, b = 0.25 for a model and 0
for a free drafter, catch-up 0.3 a token): the policy is driven by counts only.
Measurements behind each choice: docs/bench/controller.md.
"""

from __future__ import annotations

import statistics

from mypy_extensions import mypyc_attr

from ggufspec.loop.controlsettings import FEW_B, U_MODEL, V0, V1, ControlSettings, per_state
from ggufspec.loop.estimates import DrafterModel, Realized, Samples, fit_line
from ggufspec.loop.rounds import Round


@mypyc_attr(allow_interpreted_subclasses=True)  # (subclassed: tests, scripts)
class CostModel:
    """The timing samples and the cost model priced from them; `_memo` holds this state's values."""

    def __init__(self, *, timed: bool, settings: ControlSettings) -> None:
        self.timed = timed
        self.settings = settings
        self.round = 0  # rounds observed
        self._base = Samples(settings.window)  # seconds of rounds that drafted nothing
        self._bound = Samples(settings.window)  # verify-and-Python seconds of rounds that drafted
        self._verify: dict[int, Samples] = {}  # K -> verify-and-Python seconds of rounds of K drafts
        self._prefill_row = Samples(settings.window)  # the target's prompt prefills, seconds a token (`prefill_slope`)
        self._memo: dict[tuple, object] = {}  # this state's estimates (`per_state`)
        # rounds not yet observed (a hold's, ggufspec.loop.hold): (round number, round); every
        # estimate replays them first (`per_state`)
        self._pending: list[tuple[int, Round]] = []
        if not timed:
            self._base.add(0, 1.0)  # counted: a round of the target alone is the unit, no calibration
        self._sources: dict[str, Realized] = {}
        # rule switch_cost: the target's rows in the last two rounds (0: a prefill), the source of
        # the last drafting round (its way back to one row is charged to it), and S, what that way
        # back costs over a (samples; the one being summed)
        self._rows: tuple[int, int] = (0, 0)
        self._switched_by: str | None = None
        self._switch = Samples(settings.window)
        self._switch_acc = 0.0
        # ... and each source's runs away from one row: rounds in a row (the run going on: source, rounds)
        self._run_lengths: dict[str, Samples] = {}
        self._run: tuple[str | None, int] = (None, 0)
        self._drafters: dict[str, DrafterModel] = {}

    def replay(self) -> None:
        """Observe the rounds queued for later, in order, each at its own round number."""
        pending, self._pending = self._pending, []
        if pending:
            now = self.round
            for self.round, r in pending:
                self._observe(r)
            assert self.round == now, (self.round, now)

    def __getstate__(self) -> dict[str, object]:
        """The estimates as a pickle keeps them (ggufspec.remember): the held rounds observed
        first (the state they lead to, not the queue), this state's memo left out."""
        self.replay()
        # the source's attributes, or an interpreted subclass's own; compiled (mypyc), the class's
        # attributes are named in __mypyc_attrs__ (its instance has no __dict__ for them)
        state = dict(vars(self)) if hasattr(self, "__dict__") else {}
        for name in getattr(self, "__mypyc_attrs__", ()):
            if name != "__dict__" and hasattr(self, name):
                state[name] = getattr(self, name)
        return {**state, "_memo": {}}

    def __setstate__(self, state: dict[str, object]) -> None:
        for name, value in state.items():
            setattr(self, name, value)

    def _observe(self, r: Round) -> None:
        raise NotImplementedError  # ggufspec.loop.control.DraftController

    def _fresh(self) -> int:
        """Rounds within which a timing sample is fresh."""
        return 2 * self.settings.retry

    def _recent(self, samples: Samples, horizon: int, *, low: bool = False) -> float | None:
        """What drafting cost, from `samples`: their low median (`low`: their minimum), fresh ones
        (the last `horizon` rounds) preferred, none older than `expire` (None: none left, the prior's turn)."""
        return samples.median(self.round, horizon, low=low, expire=self.settings.expire)

    @per_state
    def base_s(self) -> float | None:
        """a: one round of the target alone, seconds (None: not measured yet)."""
        found = [x for x in (self._base.median(self.round, self._fresh(), low=True),
                             self._bound.median(self.round, self._fresh(), low=True)) if x is not None]
        return min(found) if found and self._base else None

    def _model(self, name: str, free: bool) -> DrafterModel:
        m = self._drafters.get(name)
        if m is None:
            w = self.settings.window
            m = self._drafters[name] = DrafterModel(free=free, per_token=Samples(w), first=Samples(w),
                                                    catchup=Samples(w), prefill=Samples(w))
        return m

    def verify_s(self, k: int) -> float | None:
        """V(K): seconds of a round verifying K drafts, drafting excluded (None: a not measured)."""
        a = self.base_s()
        if a is None:
            return None
        if k <= 0:
            return a
        v0, v = self._verify_line(a)
        return self._verify_at(k, a + v0 + v * k, self._verify_measured())

    def _verify_at(self, k: int, line: float, measured: dict[int, tuple[float, float]]) -> float:
        """V(K) = line + d max(0, 1 - s^2 / d^2), d = m - line, (m, s^2) = measured[K] (else: the line)."""
        got = measured.get(k)
        if got is None or got[0] == line:
            return line
        m, s2 = got
        d = m - line
        return line + d * max(0.0, 1.0 - s2 / (d * d))

    @per_state
    def _verify_measured(self) -> dict[int, tuple[float, float]]:
        """K -> (m, s^2) for each K with n fresh samples, m their low median, s = 1.25 x 1.48 r m /
        sqrt(n) a median's standard error, r the median over every K of |x / m_K - 1| (x fresh; pooled:
        a few samples cannot tell their own scatter). Empty: the rule off, or < 8 samples fresh."""
        if not self.settings.measured_verify:
            return {}
        fresh = self._fresh()
        devs: list[float] = []
        found: list[tuple[int, float, int]] = []  # (K, m, n)
        for k, samples in self._verify.items():
            xs = samples.fresh(self.round, fresh)
            m = self._recent(samples, fresh)
            if xs and m is not None:
                found.append((k, m, len(xs)))
                devs += [abs(x / m - 1.0) for x in xs] if m else []
        if len(devs) < 8:
            return {}
        r = statistics.median(devs)
        return {k: (m, (1.85 * r * m) ** 2 / n) for k, m, n in found}

    @per_state
    def _verify_line(self, a: float) -> tuple[float, float]:
        """(v0, v): weighted least squares of V(K) - a = v0 + v K over K >= 1 (module docstring)."""
        w = self.settings.verify_prior_weight
        fresh = self._fresh()
        p = self._prefill_row.median(self.round, 1 << 30) if self.settings.prefill_slope else None
        if p is not None and p > a * V1:  # rule prefill_slope: rows no cheaper than a prefill's
            pts = [(1.0, a * V0 + p, w), (8.0, a * V0 + 8 * p, w)]  # (K, V(K) - a, weight)
        else:
            pts = [(1.0, a * (V0 + V1), w), (8.0, a * (V0 + 8 * V1), w)]
        pts += [(float(k), m - a, float(min(len(samples), 4))) for k, samples in self._verify.items()
                if (m := self._recent(samples, fresh)) is not None]
        return fit_line(pts)

    @per_state
    def per_token_s(self, name: str) -> float | None:
        """b_d: draft seconds of a call after the round's first (None: no drafter of that name)."""
        m = self._drafters.get(name)
        a = self.base_s()
        if m is None or a is None:
            return None
        few = self.settings.probe_b and len(m.per_token) < FEW_B  # a few measurements: the fastest (rule probe_b)
        b = self._recent(m.per_token, self._fresh(), low=few)
        return b if b is not None else m.b_prior * a

    def _first_s(self, name: str, b: float) -> float:
        """f_d: a round's first draft call, seconds (b_d until one was measured, or rule off)."""
        f = (self._recent(self._drafters[name].first, self._fresh())
             if self.timed and self.settings.first_call else None)
        return b if f is None else f

    @per_state
    def draft_cost_s(self, name: str, k: int) -> float | None:
        """D_d(K) = f_d + (K - 1) b_d: seconds drafter `name` takes to propose `k` tokens."""
        b = self.per_token_s(name)
        if b is None or k <= 0:
            return None if b is None else 0.0
        return self._first_s(name, b) + (k - 1) * b

    @per_state
    def catchup_s(self, name: str) -> float | None:
        """u_d: seconds a draft model takes to catch up on one token of history it missed."""
        m = self._drafters.get(name)
        a = self.base_s()
        if m is None or a is None:
            return None
        u = self._recent(m.catchup, self._fresh()) if self.timed else None
        return u if u is not None else U_MODEL * a

    def _prefill_s(self, name: str) -> float:
        """Seconds a token of a prompt prefill costs draft model `name`: measured, else its catch-up's."""
        m = self._drafters.get(name)
        measured = self._recent(m.prefill, 1 << 30) if m is not None and self.timed else None
        return measured if measured is not None else (self.catchup_s(name) or 0.0)

    def switch_s(self, name: str | None = None, *, now: bool = True) -> float:
        """S: what a run of drafting rounds costs the rounds of the target alone after it (rule
        switch_cost; 0 with the rule off or before one was measured), a round's share of it for
        source `name` (S / the median length of its runs, at least `switch_rounds`); `now`: only
        where the last round ran the target alone (a drafting round in a run pays none)."""
        if not self.settings.switch_cost or (now and self._rows[1] != 1):
            return 0.0
        s = self._switch.median(self.round, self._fresh()) or 0.0
        lengths = self._run_lengths.get(name or "")
        n = lengths.median(self.round, self._fresh()) if lengths is not None and s else None
        return s / max(n or 1.0, self.settings.switch_rounds)

    def _ran(self, name: str | None) -> None:
        """Rule switch_cost: a round of `name` (None: the target alone) extends or ends a run."""
        run, length = self._run
        if run is not None and run != name:
            self._run_lengths.setdefault(run, Samples(self.settings.window)).add(self.round, float(length))
            length = 0
        self._run = (name, length + 1) if name is not None else (None, 0)

    @per_state
    def round_costs(self, name: str, cap: int) -> tuple[float, ...] | None:
        """T_d(K) = V(K) + D_d(K) (+ S after a round of the target alone, rule switch_cost) for
        K = 0..cap, seconds (None: unmeasured)."""
        a, b = self.base_s(), self.per_token_s(name)
        if a is None or b is None:
            return None
        v0, v = self._verify_line(a)
        f, measured = self._first_s(name, b) + self.switch_s(name), self._verify_measured()
        return (a, *[max(self._verify_at(k, a + v0 + v * k, measured) + f + (k - 1) * b, 1e-12)
                     for k in range(1, cap + 1)])

    def ceiling_rate(self, name: str, *, lo: int, cap: int) -> float | None:
        """max_{lo <= K <= cap} (K + 1) / T(K): the most drafter `name` could deliver, every draft accepted."""
        self.replay()  # (asked once a state: read without a memo, after the held rounds)
        costs = self.round_costs(name, cap) if cap >= lo else None
        if costs is None:
            return None
        return max((k + 1) / costs[k] for k in range(lo, cap + 1))

    def prior_rate(self, name: str, *, lo: int, cap: int) -> float | None:
        """max_K E(K) / T(K) with the measured costs and the prior accept rate alpha0."""
        self.replay()  # (asked once a state: read without a memo, after the held rounds)
        costs = self.round_costs(name, cap) if cap >= lo else None
        if costs is None:
            return None
        alpha = self._drafters[name].alpha0
        best, e, term = 0.0, 1.0, 1.0
        for k in range(1, cap + 1):
            term *= alpha
            e += term  # E(K) = sum_{i=0..K} alpha^i
            if k >= lo and e / costs[k] > best:
                best = e / costs[k]
        return best
