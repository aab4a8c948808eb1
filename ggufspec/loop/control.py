"""Which drafter proposes, and how many tokens, each round: measured throughput decides (pure).

A round either runs the target alone (K = 0, source "none") or lets one drafter d propose K
tokens. Each round the controller picks a source, then its K:

1. Source. Its realized throughput, tokens emitted per second of wall time, at two levels
   (empirical Bayes): over all generations, its rounds discounted by age in its own rounds
   (0.98 a round) and in rounds of any source (0.99: a verdict fades in ~70 rounds), shrunk
   towards the cost model's figure R0 with m = 2 pseudo-rounds; and over this generation's
   rounds (0.95 a round), shrunk towards the former with 8 pseudo-rounds:
       P_s = (sum w * tokens + m * R0_s * t_s) / (sum w * seconds + m * t_s)
       R_s = (this generation's tokens + 8 P_s t_s) / (its seconds + 8 t_s)
   with t_s the source's mean round (seconds; a before it ran): pseudo-rounds of that source, so
   a draft model's round at K = 8 (5 target steps) weighs one of 8, not one of 1.6.
   What a source did on other prompts (the machine's costs, the pair's usual acceptance) is
   the prior of this one. A round's seconds are winsorized at 4x the model's T(K) (one stalled
   round on a busy machine cannot condemn a source). The highest R_s runs, except that the
   draft model in step (it ran last round) is judged by max(R_s, P_s): leaving it is free but
   coming back costs a catch-up, and a few rejected rounds are not a new regime.
2. K, by the cost model built from measurements only:
       E_d(K) = 1 + sum_{i=1..K} pi_d(i),   pi_d(i) = prod_{j<=i} c_d(j)
       T_d(K) = V(K) + D_d(K),   V(K) = a + v0 + v * K,   D_d(K) = f_d + (K - 1) * b_d  (K >= 1)
   a: the fastest of the last 16 rounds' verify-and-Python time (a round that drafted nothing
   measures a; one that drafted bounds it from above: K + 1 rows cost no less than one);
   V(K): what a round verifying K drafts costs besides drafting (the target's K + 1 rows and our
   Python), the same whichever drafter proposed: (v0, v) a weighted least-squares line through
   the median verify-and-Python time of each K measured lately (weight min(n, 4)), with the
   prior v0 = 0.3 a, v = 0.2 a as two pseudo-samples of weight 1/4 at K = 1 and K = 8. Not
   linear from 0: on the 2-core EPYC 2 rows cost 1.50 target steps, 5 rows 2.01, 9 rows 2.73
   (v0 = 0.33, v = 0.17 fit all three); on the 2-core Xeon 9 rows cost 1.86. The per-token
   model a + K * b this replaces, calibrated at K = 1, priced K = 8 at 3.7 steps more than it
   costs and held the draft at K = 1, where it loses. The prior at weight 1 (against a median's
   4) held the Xeon's V(8) - a at 1.09 a against 0.86 a measured, pricing long rounds too dear
   (paired over both prompt sets, weight 1/4 against 1: +0.6% mean, inside the noise);
   D_d(K): drafter d's seconds for K tokens, K decode calls: b_d the low median of the last 16
   calls after a round's first, f_d of its first call (0 for a free drafter: prompt lookup
   costs microseconds). The first call costs more: it imports the target's cache and decodes the
   1-2 tokens the last round left (the Q4_1 draft on the 2-core Xeon: f = b + 4.9 ms, b = 10.1
   ms). Priced per drafted token instead, as b_d once was (the draft's seconds over K), a K
   measured at 5 puts K = 8 at 2.9 ms too dear and one measured at 8 puts K = 5 at 1.8 ms too
   cheap: both err towards short rounds. A drafting round faster than a / 2 says a is
   stale (a cold first round): the target alone runs next to measure it again;
   c_d(j): P(draft j accepted | drafts 1..j-1 accepted), discounted counts (0.97 per later
   observation of d, 0.99 per round of any source: they outlive the prompt they came from) plus
   one pseudo-round of prior c_d(j-1) (c_d(0) = alpha0), so past the measured positions the
   curve extends the measured one. K = argmax E_d(K) / T_d(K) over [max(1, draft_min), cap]; R0_d is
   that maximum, R0_none = 1 / a.

Bounded exploration: a source not run for `retry` rounds (32; a model drafter run only n < 8
times: 4 n) runs next (the longest waiting first), so a losing choice is tried again within
retry + (number of sources) rounds; a source never run runs as soon as it can. The target alone
is the exception: its retries fall (R_best / R_none)^2 intervals apart, at most `spacing` (4,
so 128 rounds): its rate 1 / a follows the verify rounds' bound on a without a retry (`_spacing`). A free drafter
is the exception: scored every round (below), its estimate follows it without a retry. A retry after
which the source's estimate, or the retry round alone, beats the best other source's runs
again, up to `confirm` (3) more rounds. A retry of a draft model, and once every `retry` rounds
the model the estimates chose, runs at the K that is best with each conditional accept rate at
least alpha0: the curve and the verify line are measured at the K chosen only, so without it
a K too short never learns that longer ones pay. Opening: a draft model prefilled with a new
prompt runs its first `opening` rounds (3; 1 where it lost clearly when last chosen): in step
with the prompt it costs no catch-up, and one round at a reply's first words is too little
evidence. Timing medians use the samples of the last 2 * retry rounds where there are any.

Full information (Not-a-Bandit, arXiv 2510.20064): a free drafter (prompt lookup: no model, no
cost) is queried every round before the choice; after the verify its proposal is scored against
the tokens the target emitted, so its acceptance is learned on every round, chosen or not. Its
proposal's length caps its K (no match: not a candidate this round). With that much evidence a
prompt's own counts decide: a free drafter's curve is this generation's counts with the pooled
curve as `free_prior_obs` (2) pseudo-observations, and the prior of its realized rate is the
cost model's figure with that curve, not its realized rate over all generations (lookup's
worth is the prompt's: 2.5x on a code edit, none on a summary whose n-grams recur but continue
differently).

Grades: a free drafter's proposal comes with a grade, a function of the history (lookup: the
n-gram length its match came from), and each grade is a source of its own (`lookup#3`): its own
acceptance curve, scored on the rounds that had a proposal of that grade, and its own realized
rate. Replayed over the bench's greedy outputs, a 3-gram match's proposal kept 3.3-5.0 tokens on
average (chat, code, summaries, maths) and a 1-gram match's 0.3-0.9. With one curve for all
matches, a prompt's first lookup round went by the last prompt's record: traced over a pass of
the summaries and code, the first lookup round of 9 of 13 prompts kept at most 1 token.

Check: a free drafter's proposal chosen while this generation has judged fewer than
`check_rounds` (3) proposals of its grade runs only if the draft model's first token agrees with
its first; where they differ the round is the model's (`_check`). Its pooled curve prices a grade
by past prompts, and lookup's worth is the prompt's.

Extension: a draft model's full proposal takes as much of lookup's continuation of it as pays
for its verify rows (`extend`): free where lookup matches, and a longer K of the model would not
pay (its drafts cost 0.35 target steps each here, a verify row 0.17).

Lossless: `choose` sees past rounds and the history only (a free drafter's proposal is a
function of the history), never the target's output for the round it decides.

Switching cost (catch-up): a draft model's KV cache must hold the history before it drafts; after
rounds it sat out it first decodes the `backlog` tokens it missed, at u_d seconds a token (the
median measured catch-up cost; prior 0.3 target steps). Measured here: SmolLM2 Q4_1 catches up at
2.8 ms a token against a 10.2 ms target step, so returning to it after n rounds without it costs
0.27 n target steps: a retry every 32 rounds would cost 27% of those rounds, whatever the interval.
So a drafter with a backlog runs only when what it saves over the rest of the generation pays for
the catch-up:
    remaining * (1 / R_best_other - 1 / R_d) >= backlog * u_d
with R_d its estimate (exploiting) or, for a retry, the better of its estimate and P_d (and its
prior rate at alpha0 where P_d is within `close` of the other). A retry deferred so is due again
at the next prompt, when the draft model is prefilled with it (`wants`): retries are cheap there.
A draft model that imports the target's KV cache (`Candidate.kv_shared`, ggufspec.loop.kvshare) is
never behind: its backlog is what an import leaves (at most the round's last token), so the
catch-up rules above never hold it back, and the opening and the hysteresis below, which exist
to spare catch-ups, do not apply to it; nor is a free drafter charged a catch-up for it.
A free drafter's round is charged the catch-up it leaves the draft model in play (its emitted
tokens times u_m): per round, lookup's 3-token rounds looked better than the model's 9-token
ones on a counting prompt, and the catch-ups they caused were charged to nobody.

Timed or counted: with `timed=False` (seeded sampled runs, whose tokens must be reproducible)
every round's seconds are replaced by nominal costs (a = 1, V(K) = 1.3 + 0.2 K, b = 0.25 for a
model drafter and 0 for a free one, catch-up 0.3 a token), so the policy is driven by counts
(accepts, drafted, backlog) only.

BanditSpec (arXiv 2505.15141) and TapOut (arXiv 2511.02017) choose speculation settings with
bandits over realized reward; here the reward is throughput (the cost differs by arm), the arms
share a structured cost model, and exploration is a deterministic retry schedule.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from typing import Callable, Mapping, Sequence, TypeVar

from ggufspec.loop.estimates import B_MODEL, DrafterModel, Realized, Samples, fit_line
from ggufspec.loop.rounds import NONE, Candidate, Choice, Round

T = TypeVar("T")

# nominal costs in units of a target step (priors; the only costs of a counted controller;
# the draft step and accept priors are in ggufspec.loop.estimates)
_V0 = 0.3  # a verify's first extra row beyond the target step
_V1 = 0.2  # each further row
_U_MODEL = 0.3  # prior catch-up cost of a draft model, per token of backlog
SYNCED = 2  # a backlog this small is a normal round's (a full accept leaves 2 tokens to decode)
_HORIZON = 256  # tokens a generation is assumed to have left when the caller does not say
_PRIOR_WEIGHT = 0.25  # each of the verify line's two prior points, against a median's min(n, 4) (docstring)


@dataclass(frozen=True, kw_only=True)
class ControlSettings:
    """The controller's horizons (in rounds) and robustness knobs."""

    retry: int = 32  # a source not run for this many rounds runs next
    decay: float = 0.95  # weight of a source's realized round per later round of that source, in a generation
    pool_decay: float = 0.98  # ... over all generations
    prompt_prior_rounds: float = 8.0  # pseudo-rounds of a source's rate over all generations in this one's
    free_prior_obs: float = 2.0  # pseudo-observations of a free drafter's pooled curve in this generation's
    accept_decay: float = 0.97  # weight of a drafter's acceptance observation per later observation of it
    idle_decay: float = 0.99  # ... and of either per round of any source (half weight after 69 rounds)
    opening: int = 3  # rounds a draft model prefilled with a new prompt runs before the estimates decide
    explore_share: float = 0.05  # a prefill for exploration's sake when it is this share of the time since the model ran
    close: float = 0.9  # a draft model this close to the best estimate is prefilled with a new prompt
    window: int = 16  # timing samples whose median is an estimate
    prior_rounds: float = 2.0  # pseudo-rounds of the cost model in a source's throughput
    winsor: float = 4.0  # a round's seconds count at most this many model round times
    confirm: int = 3  # rounds a retry that beat the estimates runs again
    check_rounds: int = 3  # a free drafter's grade is checked (`_check`) until a generation judged this many of it
    spacing: float = 4.0  # the most `retry` intervals between two retries of the target alone (`_spacing`; 1: every `retry`)
    # rule switches (ablation: off = the rule's absence)
    two_level: bool = True  # this generation's rate over the pooled one (off: the pooled rate alone)
    verify_prior_weight: float = _PRIOR_WEIGHT  # each prior point of the verify line
    first_call: bool = True  # D(K) = f + (K - 1) b (off: K b, b = draft seconds / drafted)
    hysteresis: bool = True  # the draft model in step judged by max(R_s, P_s)
    few_runs: bool = True  # a model run n < 8 times is due after 4 n rounds
    optimistic_retry: bool = True  # a retry of a draft model runs at the optimistic K
    k_probe: bool = True  # once every `retry` rounds the chosen model runs at the optimistic K
    free_prompt: bool = True  # a free drafter's curve and rate are this generation's over the pooled
    grades: bool = True  # a free drafter's grades are sources of their own
    catchup_pricing: bool = True  # a model with a backlog runs only where its catch-up pays (`_pays`)
    induced_catchup: bool = True  # a free round is charged the catch-up it leaves the model in play
    recheck: bool = True  # a drafting round under a / 2 re-measures a
    hopeless: bool = True  # a model whose ceiling cannot beat the best other source is left

    def __post_init__(self) -> None:
        if (self.retry < 1 or self.window < 1 or self.spacing < 1 or self.opening < 0 or self.check_rounds < 0
                or not all(0 < x <= 1 for x in (self.decay, self.accept_decay, self.idle_decay))):
            raise ValueError(f"bad control settings: {self}")


def _per_state(method: Callable[..., T]) -> Callable[..., T]:
    """`method`'s value computed once per state of the estimates: `choose` asks each estimate
    several times a round (at every K of every source), and only `observe` and `begin` change what
    they are made from (each empties `DraftController._memo`)."""
    name = method.__name__

    @functools.wraps(method)
    def cached(self: DraftController, *args: object, **kwargs: object) -> T:
        key = (name, args, *kwargs.items())
        try:
            return self._memo[key]  # type: ignore[return-value]
        except KeyError:
            value = self._memo[key] = method(self, *args, **kwargs)
            return value

    return cached


class DraftController:
    """Chooses each round's drafter and draft length; learns from `observe`. One per pair, kept
    across generations (its estimates are the machine's and the drafters', not one prompt's)."""

    def __init__(self, *, timed: bool = True, settings: ControlSettings = ControlSettings()) -> None:
        self.timed = timed
        self.settings = settings
        self.round = 0  # rounds observed
        self._base = Samples(settings.window)  # seconds of rounds that drafted nothing
        self._bound = Samples(settings.window)  # verify-and-Python seconds of rounds that drafted
        self._verify: dict[int, Samples] = {}  # K -> verify-and-Python seconds of rounds of K drafts
        # the estimates of this round, computed once: choose asks each several times a round (at
        # every K of every source), and only observe and begin change what they are made from
        self._memo: dict[tuple, object] = {}
        if not timed:
            self._base.add(0, 1.0)  # counted: a round of the target alone is the unit, no calibration
        self._sources: dict[str, Realized] = {}
        self._drafters: dict[str, DrafterModel] = {}
        self._bar = math.inf  # the best other source's estimate when a retry ran
        self._probe: tuple[int, int] = (1, 1)  # (lo, cap) of the K range of the retried source
        self._confirm: tuple[str, int] | None = None  # (source, rounds left) to run again
        self._confirming = False  # the last retry round was a confirmation (never re-arms it)
        self._recheck = False  # a is suspect: measure the target alone again
        self._leader: str | None = None  # the source with the best estimate when last chosen
        self._opening: dict[str, int] = {}  # draft model -> opening rounds left in this generation
        self._rates: dict[str, float] = {}  # each source's estimate when last chosen
        self._pooled: dict[str, float] = {}  # ... its rate over all generations
        self._prior: dict[str, float] = {}  # ... a drafter's prior rate (alpha0, the measured costs)
        self._last: str | None = None  # the source of the last round
        self._k_probe: dict[str, int] = {}  # draft model -> round its K was last explored
        self._clock = 0.0  # seconds charged to every round so far (nominal ones when counted)
        self._ran_s: dict[str, float] = {}  # source -> `_clock` when it last ran
        self._exploring: set[str] = set()  # draft models prefilled for exploration's sake (full opening)
        self._caps: dict[str, int] = {}  # drafter -> the longest K it could draft when last a candidate
        self._shared: set[str] = set()  # draft models that import the target's KV cache (last round's candidates)
        self._hopeless_now: set[str] = set()  # draft models that cannot pay at the measured costs (`_hopeless`)

    # ---- estimates ----------------------------------------------------------------------------

    @_per_state
    def base_s(self) -> float | None:
        """a: one round of the target alone, seconds (None: not measured yet)."""
        horizon = 2 * self.settings.retry
        found = [x for x in (self._base.median(self.round, horizon, low=True),
                             self._bound.median(self.round, horizon, low=True)) if x is not None]
        return min(found) if found and self._base else None

    def _model(self, name: str, free: bool) -> DrafterModel:
        m = self._drafters.get(name)
        if m is None:
            m = self._drafters[name] = DrafterModel(free=free, per_token=Samples(self.settings.window),
                                                    first=Samples(self.settings.window),
                                                    catchup=Samples(self.settings.window),
                                                    prefill=Samples(self.settings.window))
        return m

    def _source(self, name: str) -> Realized:
        s = self._sources.get(name)
        if s is None:
            s = self._sources[name] = Realized(at=self.round)
        s.decay_to(self.round, self.settings.idle_decay)
        return s

    def verify_s(self, k: int) -> float | None:
        """V(K): seconds of a round verifying K drafts, drafting excluded (None: a not measured)."""
        a = self.base_s()
        if a is None:
            return None
        if k <= 0:
            return a
        v0, v = self._verify_line(a)
        return a + v0 + v * k

    @_per_state
    def _verify_line(self, a: float) -> tuple[float, float]:
        """(v0, v): weighted least squares of V(K) - a = v0 + v K over K >= 1 (docstring): the
        median of each K measured lately weighs min(n, 4) samples, the prior's two points
        `_PRIOR_WEIGHT` each."""
        w = self.settings.verify_prior_weight
        pts = [(1.0, a * (_V0 + _V1), w), (8.0, a * (_V0 + 8 * _V1), w)]  # (K, V(K) - a, weight)
        for k, samples in self._verify.items():
            m = samples.median(self.round, 2 * self.settings.retry)
            if m is not None:
                pts.append((float(k), m - a, float(min(len(samples), 4))))
        return fit_line(pts)

    @_per_state
    def per_token_s(self, name: str) -> float | None:
        """b_d: draft seconds of a call after the round's first, drafter `name` (None: no drafter of that name)."""
        m = self._drafters.get(name)
        a = self.base_s()
        if m is None or a is None:
            return None
        b = m.per_token.median(self.round, 2 * self.settings.retry)
        return b if b is not None else m.b_prior * a

    @_per_state
    def draft_cost_s(self, name: str, k: int) -> float | None:
        """D_d(K) = f_d + (K - 1) b_d: seconds drafter `name` takes to propose `k` tokens (f_d = b_d
        until a first call was measured; None: no drafter of that name)."""
        b = self.per_token_s(name)
        if b is None or k <= 0:
            return None if b is None else 0.0
        f = (self._drafters[name].first.median(self.round, 2 * self.settings.retry)
             if self.timed and self.settings.first_call else None)
        return (b if f is None else f) + (k - 1) * b

    @_per_state
    def catchup_s(self, name: str) -> float | None:
        """u_d: seconds a draft model takes to catch up on one token of history it missed."""
        m = self._drafters.get(name)
        a = self.base_s()
        if m is None or a is None:
            return None
        if not self.timed:
            return _U_MODEL * a
        u = m.catchup.median(self.round, 2 * self.settings.retry)
        return u if u is not None else _U_MODEL * a

    @_per_state
    def round_costs(self, name: str, cap: int) -> tuple[float, ...] | None:
        """T_d(K) = V(K) + D_d(K) for K = 0..cap, seconds (None: unmeasured): the cost model at
        every K at once, as `best_len` and `prior_rate` scan them."""
        a, b = self.base_s(), self.per_token_s(name)
        if a is None or b is None:
            return None
        v0, v = self._verify_line(a)
        f = (self._drafters[name].first.median(self.round, 2 * self.settings.retry)
             if self.timed and self.settings.first_call else None)
        f = b if f is None else f
        return (a, *(max(a + v0 + v * k + f + (k - 1) * b, 1e-12) for k in range(1, cap + 1)))

    @_per_state
    def ceiling_rate(self, name: str, *, lo: int, cap: int) -> float | None:
        """The most drafter `name` could deliver with the measured costs: max (K + 1) / T(K), every
        draft accepted. Where that does not beat the best other source, no acceptance can make it
        pay (a draft step as dear as the target's: the 135M pair on a GPU, or a quantized 135M
        target on a CPU), and exploring it only costs (`_hopeless`)."""
        costs = self.round_costs(name, cap) if cap >= lo else None
        if costs is None:
            return None
        return max((k + 1) / costs[k] for k in range(lo, cap + 1))

    def _hopeless(self, name: str, rates: Mapping[str, float], *, lo: int, cap: int) -> bool:
        """Draft model `name` cannot beat the best other source even were every draft accepted,
        by the costs measured when it last ran (its retries then fall `spacing` intervals apart:
        the costs are re-measured, rarely)."""
        if not self.settings.hopeless or name == NONE or self._drafters[name].free or not self._drafters[name].per_token:
            return False  # (unmeasured: the prior's costs are no evidence that it cannot pay)
        best = max((r for n, r in rates.items() if n != name), default=0.0)
        ceiling = self.ceiling_rate(name, lo=lo, cap=cap)
        return ceiling is not None and best > 0.0 and ceiling <= best

    @_per_state
    def prior_rate(self, name: str, *, lo: int, cap: int) -> float | None:
        """The best E(K) / T(K) with the measured costs and the prior accept rate alpha0."""
        costs = self.round_costs(name, cap) if cap >= lo else None
        if costs is None:
            return None
        alpha = self._drafters[name].alpha0
        best, e, term = 0.0, 1.0, 1.0
        for k in range(1, cap + 1):
            term *= alpha
            e += term  # E(K) = sum_{i=0..K} alpha^i
            if k >= lo:
                best = max(best, e / costs[k])
        return best

    def wants(self, name: str, *, backlog: int | None = None, remaining: int | None = None) -> bool:
        """Should draft model `name` be prefilled with a new prompt? Yes when it may run soon:
        never run, the best source when last chosen (or within `close` of it), or due for a retry
        (a retry at the start of a prompt costs no catch-up); and, given the prompt tokens the
        model lacks (`backlog`) and the tokens the generation may emit (`remaining`), when its
        expected gain over the generation pays for that prefill, as for any catch-up (with its
        rate over all generations, and its prior's optimism for a retry or a close race). A short
        request on a long prompt is not worth a draft model: 64 tokens after a 43-token chat
        prompt gain ~0.1 s at 1.15x, and the prefill costs ~0.1 s on the 2-core CPU.

        Bounded exploration whatever the estimates say (they may be stale): once the time since
        the model last ran is 1 / `explore_share` times what the prefill costs, it is prefilled
        anyway, so exploring costs at most that share of the time. It then opens the prompt with
        its full `opening`: the prefill is paid, and its evidence is the point. Its cost: the
        prefill, and at most the opening's rounds at their longest K. (A bound in rounds
        prefilled it every 128 rounds, about every prompt of 128 tokens: in the bench's summaries,
        200 tokens of prefill at 3.8 ms a token for one round at a time, 0.86x the target alone
        end to end on the held-out set.)"""
        s = self._sources.get(name)
        if s is None or s.last is None:
            return True
        if name in self._hopeless_now:  # no prefill for a model that cannot pay until its rare retry
            return self.round - s.last >= self.settings.retry * self.settings.spacing
        leader = name == self._leader
        due = self.round - s.last >= self.settings.retry
        best = max(self._rates.values(), default=0.0)
        close = self._rates.get(name, 0.0) >= self.settings.close * best
        if not (leader or due or close):
            return False
        if backlog is None or remaining is None:
            return True
        other = max((r for n, r in self._pooled.items() if n != name), default=0.0)
        rate = self._pooled.get(name, 0.0)
        if not leader:
            rate = max(rate, self._prior.get(name, 0.0))
        if other <= 0.0 or self._pays(name, backlog, rate, other, remaining, prefill=True):
            return True
        # bounded exploration, at most `explore_share` of the time (docstring): what it costs,
        # the prefill and, at most, the opening's rounds at their longest K
        cap = self._caps.get(name, 1)
        opening_s = self.settings.opening * ((self.verify_s(cap) or 0.0) + (self.draft_cost_s(name, cap) or 0.0))
        idle_s = self._clock - self._ran_s.get(name, 0.0)
        if idle_s * self.settings.explore_share >= max(0, backlog - SYNCED) * self._prefill_s(name) + opening_s:
            self._exploring.add(name)
            return True
        return False

    def begin(self, *, prefilled: Sequence[str] = (), prefill: Mapping[str, tuple[int, float]] | None = None) -> None:
        """A generation starts; the draft models in `prefilled` hold its prompt. Each runs its
        `opening` rounds first: in step with the prompt, a draft model costs no catch-up now, and
        later it does, so the first rounds of a prompt are when its own evidence is cheapest, and
        one round is too little (an early rejection is common at a reply's first words: in the
        bench, one round at K = 1 at a chat prompt's start left the draft out for 125 rounds,
        0.83x the best fixed K on that category)."""
        self._memo.clear()  # this generation's counts start now
        # a model that lost clearly when last chosen (not within `close` of the best): one round
        best = max(self._rates.values(), default=0.0)
        exploring, self._exploring = self._exploring, set()
        self._opening = {n: self.settings.opening
                         if n in exploring or self._rates.get(n, best) >= self.settings.close * best else 1
                         for n in prefilled if self.settings.opening > 0}
        self._confirming, self._confirm = False, None
        for src in self._sources.values():  # this generation's rounds start now
            src.cur_tokens = src.cur_seconds = 0.0
        for m in self._drafters.values():  # ... and its free drafters' scored proposals
            if m.free:
                m.gen_drafted_at, m.gen_accepted_at = [], []
        for name, (tokens, seconds) in (prefill or {}).items():  # `prefill`: tokens and seconds each took
            if tokens >= 16:  # (a few tokens measure the call, not the tokens)
                self._model(name, False).prefill.add(self.round, seconds / tokens)
        self._memo.clear()

    def _pays(self, name: str, backlog: int, rate: float, other: float, remaining: int, *,
              prefill: bool = False) -> bool:
        """Does running `name` at `rate` instead of the best other source at `other` tokens/s save,
        over `remaining` tokens, what catching up on `backlog` tokens costs? (`prefill`: a whole
        prompt in one batch, at the measured prefill cost a token where there is one, which
        need not be a short catch-up's: the Q4_1 draft here prefills 288 tokens at 3.8 ms a
        token, slower than its 2.8 ms catch-ups, where quantized batches take a slow path)"""
        if backlog <= SYNCED or not self.settings.catchup_pricing:
            return True
        if rate <= 0 or other <= 0 or rate <= other:
            return False
        u = self._prefill_s(name) if prefill else (self.catchup_s(name) or 0.0)
        return remaining * (1.0 / other - 1.0 / rate) >= (backlog - SYNCED) * u

    def _prefill_s(self, name: str) -> float:
        """Seconds a token of a prompt prefill costs draft model `name`: measured, else its catch-up's."""
        m = self._drafters.get(name)
        measured = m.prefill.median(self.round, 1 << 30) if m is not None and self.timed else None
        return measured if measured is not None else (self.catchup_s(name) or 0.0)

    @_per_state
    def prefix_accept(self, name: str, n: int, *, optimistic: bool = False) -> tuple[float, ...]:
        """pi_d(1..n): P(the first i drafts of `name` are all accepted), i = 1..n. `optimistic`:
        each conditional rate at least the prior alpha0 (the K a retry tests: a retry at the K
        the measured curve gives, after early rejections K = 1, cannot show that drafting pays,
        since on this CPU K = 1 is about even with the target alone at any accept rate)."""
        m = self._drafters[name]
        self._decay_accepts(m)
        out, pi, cond = [], 1.0, m.alpha0
        w = self.settings.free_prior_obs
        for i in range(n):
            d = m.drafted_at[i] if i < len(m.drafted_at) else 0.0
            acc = m.accepted_at[i] if i < len(m.accepted_at) else 0.0
            # P(accept i | the drafts before it accepted), one pseudo-round of prior: the position
            # before's estimate (so beyond what was measured the curve extends the measured one)
            cond = (acc + cond) / (d + 1.0)
            c = cond
            if m.free and self.settings.free_prompt and i < len(m.gen_drafted_at):
                # a free drafter is scored every round, so this generation's own counts are many
                # and cheap: they outweigh the pooled curve (w pseudo-observations) within a few
                # rounds; what prompt lookup matched on a code edit says nothing of a summary
                c = (m.gen_accepted_at[i] + w * cond) / (m.gen_drafted_at[i] + w)
            pi *= max(c, m.alpha0) if optimistic else c
            out.append(pi)
        return tuple(out)

    @_per_state
    def best_len(self, name: str, *, lo: int, cap: int, optimistic: bool = False) -> tuple[int, float] | None:
        """(K, E(K) / T(K)) maximising the modelled rate over K in [lo, cap]; None when unmeasured."""
        costs = self.round_costs(name, cap) if cap >= lo else None
        if costs is None:
            return None
        pis = self.prefix_accept(name, cap, optimistic=optimistic)
        best, e = None, 1.0
        for k in range(1, cap + 1):
            e += pis[k - 1]
            if k >= lo:
                rate = e / costs[k]
                if best is None or rate > best[1] + 1e-12:
                    best = (k, rate)
        return best

    @_per_state
    def throughput(self, name: str, prior_rate: float | None, *, pooled: bool = False) -> float | None:
        """R_s: this generation's realized tokens per second of a source, shrunk towards its rate
        over all generations, itself shrunk towards `prior_rate` (the cost model's):
            P_s = (pool tokens + m R0 t_s) / (pool seconds + m t_s)
            R_s = (this generation's tokens + m_g P_s t_s) / (its seconds + m_g t_s)
        t_s: the source's mean round, seconds (a before it has run), so m and m_g count rounds of
        that source. Empirical Bayes: what the source did on other prompts (the machine's costs,
        the pair's usual acceptance) is the prior for this one, and a few rounds of this prompt
        outweigh it. Pooled alone, the rounds of earlier prompts outvoted a new prompt's: the
        bench's repeats of one prompt took opposite paths, drafting 16 rounds or none for 121.
        Counted in target steps (t_s = a), the 8 pseudo-rounds were 1.7 rounds of the draft model
        at K = 8 (105 ms against a = 22 ms): a prompt's first round, its first draft rejected,
        took R_s from the pool's 65.7 tok/s to 44.6, under the target alone's 45.3, and the target
        alone ran 30 of the prompt's 44 rounds until the retry (58 tok/s against 70 with K = 8)."""
        a = self.base_s()
        s = self._source(name)
        d = self._drafters.get(name)
        t = s.round_s(a) if a is not None else None  # t_s
        m_g = self.settings.prompt_prior_rounds
        if (d is not None and d.free and self.settings.free_prompt and not pooled and prior_rate is not None
                and t is not None):
            # full information: a free drafter's acceptance on this prompt is measured every
            # round (`prefix_accept`), and its costs are the verify line's; its realized rounds on
            # other prompts are no prior for this one (after a code edit where lookup matched 8
            # tokens at a time, it kept 12-28 of a summary's ~50 rounds at 0.3 acceptance in the
            # prompt-level simulation, the pooled rate outvoting this prompt's rounds)
            rate, m_g = prior_rate, self.settings.prior_rounds
        else:
            m = self.settings.prior_rounds if prior_rate is not None else 0.0
            num = s.tokens + (m * prior_rate * t if prior_rate is not None and t is not None else 0.0)
            den = s.seconds + (m * t if t is not None else 0.0)
            rate = num / den if den > 0 else prior_rate
            if pooled or rate is None or t is None or not self.settings.two_level:
                return rate
        den = s.cur_seconds + m_g * t
        return (s.cur_tokens + m_g * rate * t) / den if den > 0 else rate

    # ---- the decision -------------------------------------------------------------------------

    @staticmethod
    def _extension_key(name: str, grade: int) -> str:
        """The curve of free drafter `name`'s continuations of a model's drafts, of `grade` (`extend`)."""
        return f"{name}+{grade}"

    def _key(self, name: str, grade: int) -> str:
        """The source a drafter's proposal of `grade` counts for: a free drafter's grades are
        separate sources (their own acceptance curve and realized rate); grade 0 is the drafter."""
        return f"{name}#{grade}" if grade and self.settings.grades else name

    def choose(
        self, *, drafters: Sequence[Candidate], draft_max: int, draft_min: int = 0, allow_none: bool = True,
        remaining: int | None = None,
    ) -> Choice:
        """This round's drafter and length. `draft_max`: the most tokens this round may draft;
        `allow_none`: False never chooses the target alone while a drafter can propose;
        `remaining`: tokens the generation may still emit (weighs a catch-up against its gain)."""
        by_key = {self._key(c.name, c.grade): c for c in drafters}
        keyed = [replace(c, name=k) for k, c in by_key.items()]
        ch = self._choose(drafters=keyed, draft_max=draft_max, draft_min=draft_min, allow_none=allow_none,
                          remaining=remaining)
        if ch.drafter is None:
            return ch
        c = by_key[ch.drafter]
        if not c.free:
            return replace(ch, extend=self.extend)
        check, check_len = (self._check(ch.drafter, keyed, draft_max=draft_max, lo=max(1, draft_min))
                            if c.free else (None, 0))
        return Choice(c.name, ch.draft_len, ch.retry, c.grade, check, check_len, extend=self.extend)

    def _check(self, source: str, drafters: Sequence[Candidate], *, draft_max: int, lo: int) -> tuple[str | None, int]:
        """(draft model, its K) that checks free source `source`'s proposal this round, or (None, 0).

        The draft model drafts its first token; where it equals the proposal's first, the proposal
        runs, else the round is the model's, at the K it would have run (its first token drafted
        already). Lossless: the model's token is no output of the target, and at T > 0 the
        proposal's first token is then the model's draw, verified with the model's q row.
        Why: a free drafter's grade is priced by its curve over past generations until this
        one's proposals outweigh it, and how lookup fares is the prompt's: after a prompt whose
        text repeated, the tuned chat prompts' first 3-gram matches (priced at 1.8-3.7 tokens a
        target step against the draft model's 1.6) kept 0-1 of 8 tokens in 20 of 24 lookup rounds,
        a verify of 8 rows for one token each. The check costs the model's first call (about half a
        target step on the 2-core EPYC) where the proposal is right, nothing where it is wrong, so
        it runs only while this generation has fewer than `check_rounds` judged proposals of
        the grade (checking every round lost 1% in the replay: repeated text pays the check on
        every round). Replayed over both sets' traces (`scripts/trace_sim.py`, 12 seeds), the
        tuned cells' lowest default / best went from 0.969 (chat) to 0.990 (summaries); paired in
        lockstep on the 2-core EPYC (34 tuned prompts x 2), 1.011 [1.002-1.020] per prompt against
        no check, chat 1.019, summaries 0.994. The model must be in step (its cache shares the
        target's, or it lags by a normal round's backlog)."""
        m = self._drafters.get(source)
        judged = m.gen_drafted_at[0] if m is not None and m.gen_drafted_at else 0.0
        if judged >= self.settings.check_rounds:
            return None, 0
        models = [c for c in drafters if not c.free and (c.kv_shared or c.backlog <= SYNCED)]
        if not models:
            return None, 0
        best = {c.name: self.best_len(c.name, lo=lo, cap=draft_max) for c in models}
        name = max(best, key=lambda n: best[n][1] if best[n] is not None else 0.0)  # type: ignore[index]
        k = best[name][0] if best[name] is not None else min(draft_max, max(lo, 4))  # type: ignore[index]
        return name, k

    def _choose(
        self, *, drafters: Sequence[Candidate], draft_max: int, draft_min: int, allow_none: bool,
        remaining: int | None,
    ) -> Choice:
        """`choose` with each candidate named by its source (`_key`)."""
        lo = max(1, draft_min)
        options: dict[str, tuple[int, float | None]] = {}  # source -> (K, modelled rate)
        caps: dict[str, int] = {NONE: 0}
        for c in drafters:
            self._model(c.name, c.free)
            cap = draft_max if c.match_len is None else min(draft_max, c.match_len)
            if cap < lo:
                continue
            caps[c.name] = self._caps[c.name] = cap
            best = self.best_len(c.name, lo=lo, cap=cap)
            options[c.name] = best if best is not None else (min(cap, max(lo, 4)), None)
        a = self.base_s()
        if allow_none or not options:
            options[NONE] = (0, 1.0 / a if a else None)
        if len(options) == 1:
            name, (k, _) = next(iter(options.items()))
            return Choice(None if name == NONE else name, k)
        # calibrate first: a round of the target alone measures a (the unit of every estimate)
        if (a is None or self._recheck) and NONE in options:
            self._recheck = False
            return Choice(None, 0, retry=True)
        rates = {n: self.throughput(n, r) or 0.0 for n, (_, r) in options.items()}
        self._leader = max(rates, key=lambda n: rates[n])
        self._rates = rates
        self._pooled = {n: self.throughput(n, r, pooled=True) or 0.0 for n, (_, r) in options.items()}
        self._prior = {n: self.prior_rate(n, lo=lo, cap=caps[n]) or 0.0 for n in options if n != NONE}
        self._hopeless_now = {n for n in options if self._hopeless(n, rates, lo=lo, cap=caps[n])}
        # the opening rounds of a prompt (see `begin`), a retry: the estimates decide after them
        backlogs = {c.name: c.backlog for c in drafters}
        shared = self._shared = {c.name for c in drafters if c.kv_shared}
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
        # a draft model that missed rounds runs only where its catch-up pays (see the docstring)
        horizon = _HORIZON if remaining is None else remaining
        backlog = {c.name: c.backlog for c in drafters  # (one never run is tried once whatever it costs)
                   if not c.free and c.name in options and c.backlog > SYNCED and self._source(c.name).last is not None}
        for n in backlog:
            other = max((r for m, r in rates.items() if m != n and m not in backlog), default=0.0)
            if other <= 0.0:
                continue  # nothing else may run: the catch-up cannot be avoided
            if not self._pays(n, backlog[n], rates[n], other, horizon):
                # a retry's optimism: its rate over all generations (the empirical prior of this
                # one), and the cost model's prior rate at alpha0 where that is a close race (the
                # prior alone retried a model that lost on every prompt, 30 tokens of catch-up at
                # a time: 11% of such a prompt)
                pooled = self._pooled[n]
                optimistic = max(rates[n], pooled)
                if pooled >= self.settings.close * other:  # a close race: the prior's optimism too
                    optimistic = max(optimistic, self._prior[n])
                if not self._pays(n, backlog[n], optimistic, other, horizon):
                    del options[n]  # not even a retry pays now: due again at the next prompt
                else:
                    rates[n] = min(rates[n], other * (1 - 1e-9))  # a retry may run it, the estimates not
        if len(options) == 1:
            name, (k, _) = next(iter(options.items()))
            return Choice(None if name == NONE else name, k)
        # retry: a source never run, or not run for `retry` rounds, runs now (longest waiting
        # first); a retry that beat the others runs again (`confirm` rounds at most)
        # (a source run only a few times is due sooner: 4 rounds per round it ran, so two unlucky
        # first rounds do not shut it out for the full interval)
        waits = {n: self._wait(n) for n in options}
        oldest = max(options, key=lambda n: waits[n])
        again, self._confirm = self._confirm, None
        if waits[oldest] < 1 and again is not None and again[0] in options:
            oldest, self._confirm = again[0], (again[0], again[1] - 1) if again[1] > 1 else None
            self._confirming = True
        elif waits[oldest] < 1:
            # hysteresis: the draft model in step (it ran last round) is judged by the better of
            # this generation's estimate and its rate over all generations: leaving it is free
            # now but coming back costs a catch-up, and a few rejected rounds (a name, a number)
            # are not a new regime; where it loses on this prompt, the pool follows in a few dozen rounds
            held = dict(rates)
            if (self.settings.hysteresis and self._last in held and self._last != NONE
                    and not self._drafters[self._last].free and self._last not in shared):
                held[self._last] = max(held[self._last], self._pooled[self._last])
            name = max(options, key=lambda n: held[n])  # ties: the first drafter given, none last
            k = options[name][0]
            if (self.settings.k_probe and name != NONE and not self._drafters[name].free
                    and self.round - self._k_probe.get(name, 0) >= self.settings.retry):
                # bounded exploration of K too: the curve and the verify line are measured only
                # at the K chosen, so a K too short never learns that longer ones pay (it drifted
                # to K = 1 and stayed); once every `retry` rounds, the optimistic K
                self._k_probe[name] = self.round
                k = self._retry_len(name, lo, caps[name], k, optimistic=True)
            return Choice(None if name == NONE else name, k)
        else:
            self._confirming = False
        self._bar = max((r for n, r in rates.items() if n != oldest), default=0.0)
        self._probe = (lo, caps[oldest])
        k = options[oldest][0] if oldest == NONE else self._retry_len(oldest, lo, caps[oldest], options[oldest][0])
        return Choice(None if oldest == NONE else oldest, k, retry=True)

    def _wait(self, name: str) -> float:
        """How due source `name` is for a retry: >= 1 due (inf: never run), in retry intervals.

        A free drafter is never retried: it is scored every round against the emitted tokens
        (full information), so its estimate follows its acceptance without running it, and a
        retry would only spend a round on a proposal the estimates already rate lower (lookup's
        1-3-token matches on chat prompts, against the model's 6-token rounds). A draft model run
        only a few times is due sooner (4 rounds per run), so two unlucky first rounds do not
        shut it out for the full interval. (Tried: the target alone waiting 4 intervals while
        clearly behind; in the prompt-level simulation with a hard start it lost 0.90 against
        0.94 of the best fixed K.)"""
        s = self._source(name)
        if name != NONE and self._drafters[name].free:
            return 0.0
        if s.last is None:
            return math.inf
        if name == NONE:
            return (self.round - s.last) / (self.settings.retry * self._spacing(NONE))
        if name in self._hopeless_now:  # it cannot pay at the costs measured: re-measure them, rarely
            return (self.round - s.last) / (self.settings.retry * self.settings.spacing)
        if not self.settings.few_runs:
            return (self.round - s.last) / self.settings.retry
        return (self.round - s.last) / min(self.settings.retry, 4 * max(1, s.runs))

    def _spacing(self, name: str) -> float:
        """How many `retry` intervals apart the retries of source `name` fall: (R_best / R_s)^2 by
        the rates over all generations, at least 1 and at most `ControlSettings.spacing`.

        A retry is worth the chance that the loser is better after all, and that falls with the
        margin it lost by (a bandit's UCB pulls an arm that trails by a gap Delta about log t /
        Delta^2 times); the cap, `spacing`, keeps the horizon bounded (4 x 32 = 128 rounds). Only the target
        alone is spaced so: its rate is 1 / a, and a is measured in every drafting round too (a
        verify bounds it from above), so its estimate follows a change of costs without a retry,
        where a draft model's acceptance is not observed unless it runs. On the default pair
        (drafting 1.7x the target alone), a retry of the target alone every 32 rounds was one
        round in two bench prompts of 128 tokens: 13 in 24 tuned chat generations of the last
        bench, each a target step for one token."""
        own = self._pooled.get(name, 0.0)
        best = max((r for n, r in self._pooled.items() if n != name), default=0.0)
        if own <= 0.0 or best <= own:
            return 1.0
        return min(self.settings.spacing, (best / own) ** 2)

    def _retry_len(self, name: str, lo: int, cap: int, k: int, *, optimistic: bool | None = None) -> int:
        """K of a retry of draft model `name`: the best under the optimistic curve (a free
        drafter's K is its match, as chosen)."""
        if self._drafters[name].free:
            return k
        best = self.best_len(name, lo=lo, cap=cap,
                             optimistic=self.settings.optimistic_retry if optimistic is None else optimistic)
        return best[0] if best is not None else k

    def extend(self, name: str, *, draft_len: int, free: str, grade: int, match_len: int) -> int:
        """Tokens of free drafter `free`'s continuation (`grade`, `match_len` tokens) to append to
        draft model `name`'s full proposal of `draft_len` tokens: the longest e whose last token
        still pays for its verify row,
            pi_name(draft_len) * pi_free(e) / R >= v
        (the appended token j counts only where the model's drafts and the j - 1 before it are all
        kept; it is worth 1 / R seconds at the best rate R; it costs one more verify row, v, the
        verify line's slope). Free: the continuation is lookup's match on the history and the
        model's drafts, no model call; lossless: a function of them (q one-hot). On the default
        pair a 9-row verify costs 1.87 target steps and each row about 0.17 more, a drafted token
        0.35: a continuation kept half the time pays for itself where a longer K of the model
        would not (replayed over both sets' greedy traces, fixed K = 8 with up to 4 tokens of a
        3-gram match's continuation appended, a fixed rule: +3.6-6.7% per prompt on code, summaries
        and maths, 0-0.5% on chat).

        pi_free is the continuation's own curve (`_extension_key`: per free drafter and grade, a
        free drafter's two levels: this generation's counts over its pooled curve), learned from
        the rounds that appended one and kept the model's drafts: how lookup's match at a round's
        start fares says little of its match after a model's drafts (on the tuned summaries,
        priced by lookup#3's curve, sum-04 appended 27 tokens and kept 1)."""
        if match_len <= 0 or draft_len <= 0 or name not in self._drafters or self.base_s() is None:
            return 0
        key = self._extension_key(free, grade)
        self._model(key, True)
        full = self.prefix_accept(name, draft_len)[-1]
        rate = max(self._rates.values(), default=0.0) or (1.0 / self.base_s())  # type: ignore[operator]
        v = self.verify_s(draft_len + 1) - self.verify_s(draft_len)  # type: ignore[operator]
        e = 0
        for pi in self.prefix_accept(key, match_len):
            if full * pi / rate < v:
                break
            e += 1
        return e

    # ---- learning -----------------------------------------------------------------------------

    def observe(self, r: Round) -> None:
        """A round ended (`Round`: what ran, what was drafted, kept and emitted, and its seconds).
        Its seconds: `round_s` counts drafting, verify and our Python, not a draft model's
        catch-up; `check_s` is the source's cost, not the verify's nor the model's drafting; an
        extension's tokens are verify rows, not the model's drafts, judged where the model's
        drafts were all kept."""
        choice, drafted, accepted, emitted = r.choice, r.drafted, r.accepted, r.emitted
        round_s, draft_s, check_s, free = r.round_s, r.draft_s, r.check_s, r.free
        draft_first_s, draft_calls, extended = r.draft_first_s, r.draft_calls, r.extended
        if choice is None:
            return
        self._memo.clear()  # the round's estimates end with it
        st = self.settings
        if choice.drafter is not None and choice.grade and st.grades:
            choice = replace(choice, drafter=self._key(choice.drafter, choice.grade))
        by_source = {self._key(n, v.grade): v for n, v in r.scored.items()}
        name = choice.drafter
        if name is not None:
            model = self._model(name, free)
            if not self.timed:  # nominal costs: the priors, exactly
                draft_s = (drafted - extended) * model.b_prior
                check_s = B_MODEL if check_s > 0 else 0.0
                round_s = 1.0 + (_V0 + _V1 * drafted if drafted else 0.0) + draft_s + check_s
        elif not self.timed:
            round_s, draft_s = 1.0, 0.0
        vp = max(0.0, round_s - draft_s - check_s)  # the verify and our Python
        a = self.base_s()
        if drafted == 0:  # measures a (a draft that came back empty is not the target's cost)
            self._base.add(self.round, vp)
        elif a is not None:  # bounds a from above
            self._bound.add(self.round, vp)
        if drafted > 0 and name is not None:
            if a is None:  # no round of the target alone yet: infer a from the priors
                a = vp / (1.0 + _V0 + _V1 * drafted)
                self._base.add(self.round, a)
            elif round_s < 0.5 * a and st.recheck:  # a verify of K+1 rows cannot cost half of one row's
                self._recheck = True
            m = self._drafters[name]
            if draft_first_s is not None and self.timed and st.first_call:  # D(K) = f + (K - 1) b
                m.first.add(self.round, draft_first_s)
                if draft_calls >= 2:
                    m.per_token.add(self.round, max(0.0, draft_s - draft_first_s) / (draft_calls - 1))
            else:
                m.per_token.add(self.round, max(0.0, draft_s) / max(1, drafted - extended))
            self._verify.setdefault(drafted, Samples(st.window)).add(self.round, vp)  # rows, whoever proposed them
            own = drafted - extended  # the model's drafts: its curve's positions
            self._record_accepts(name, own, min(accepted, own), emitted)
            if extended and r.extended_by is not None and accepted >= own:  # the continuation was judged
                key = self._extension_key(r.extended_by, r.extended_grade)
                self._model(key, True)
                self._record_accepts(key, extended, accepted - own, emitted - own)
        if name is not None and r.catchup_tokens > SYNCED and self.timed:
            self._model(name, free).catchup.add(self.round, r.catchup_s / r.catchup_tokens)
        for other, v in by_source.items():
            if other != name and v.proposed > 0:
                self._model(other, True)
                self._record_accepts(other, v.proposed, v.matched, emitted)
        self._memo.clear()  # new samples and counts: new estimates
        # realized throughput of the source, its seconds winsorized at `winsor` model round times
        src = self._source(NONE if name is None else name)
        a = self.base_s() or round_s
        d_s = (self.draft_cost_s(name, drafted - extended) or 0.0) if name is not None else 0.0
        cap = st.winsor * ((self.verify_s(drafted) or a) + d_s)
        charged_s = min(round_s, cap) + self._induced_s(name, free, emitted)  # the catch-up it leaves, too
        src.add(emitted, charged_s, pool=st.pool_decay, current=st.decay)
        src.last = self.round
        self._clock += charged_s
        self._ran_s[NONE if name is None else name] = self._clock
        self._last = NONE if name is None else name
        self.round += 1
        self._memo.clear()
        if choice.retry:  # a retry: run it again while this round, or its estimate with it, beats the others
            if name is None:
                prior = 1.0 / a if a else None
            else:
                best = self.best_len(name, lo=self._probe[0], cap=self._probe[1])
                prior = best[1] if best is not None else None
            rate = self.throughput(NONE if name is None else name, prior) or 0.0
            # the round's own rate counts too: the estimate keeps the source's older rounds, which
            # may predate a change of costs or of prompt, and one round cannot outweigh them
            own = emitted / (charged_s or 1e-12)
            if max(rate, own) <= self._bar:
                self._confirm = None
            elif self._confirm is None and not self._confirming and st.confirm > 0:  # `confirm` rounds, not a chain
                self._confirm = (NONE if name is None else name, st.confirm)

    def _induced_s(self, name: str | None, free: bool, emitted: int) -> float:
        """Catch-up a free drafter's round leaves to the draft model in play: the model must decode
        the `emitted` tokens before it drafts again, at u_m a token, so the round really cost that
        much more (counting lookup's rounds at their own seconds alone chose lookup's 3-token
        rounds over a model's 9-token ones on a counting prompt: 0.6 of the rounds, 1.04x). The
        model in play: the model drafter run last, if within `retry` rounds."""
        if name is None or not free or not self.settings.induced_catchup:
            return 0.0
        last = {n: s.last for n, s in self._sources.items()
                if n in self._drafters and not self._drafters[n].free and s.last is not None}
        if not last:
            return 0.0
        m = max(last, key=lambda n: last[n])  # type: ignore[arg-type,return-value]
        if self.round - last[m] > self.settings.retry or m in self._shared:  # type: ignore[operator]
            return 0.0  # (a model that imports the target's cache catches up by one import)
        return emitted * (self.catchup_s(m) or 0.0)

    def _decay_accepts(self, m: DrafterModel, *, observed: bool = False) -> None:
        """Age `m`'s counts to now (`idle_decay` a round) and, when a new observation comes,
        by `accept_decay`: a drafter's curve is its own last few dozen rounds, wherever they were."""
        w = self.settings.idle_decay ** (self.round - m.at) if self.round > m.at else 1.0
        if observed:
            w *= self.settings.accept_decay
        if w != 1.0:
            m.drafted_at = [x * w for x in m.drafted_at]
            m.accepted_at = [x * w for x in m.accepted_at]
        m.at = max(m.at, self.round)

    def _record_accepts(self, name: str, proposed: int, matched: int, emitted: int) -> None:
        """Positions 1..matched accepted; position matched+1 rejected where the target judged it
        (matched < emitted: the emitted token there differs); past the emitted tokens, unknown."""
        m = self._drafters[name]
        self._decay_accepts(m, observed=True)
        judged = min(proposed, matched + 1) if matched < emitted else matched
        # the discounted counts; a free drafter's this generation's too (`prefix_accept`)
        counts = [(m.drafted_at, m.accepted_at)] + ([(m.gen_drafted_at, m.gen_accepted_at)] if m.free else [])
        for drafted_at, accepted_at in counts:
            drafted_at.extend([0.0] * (judged - len(drafted_at)))
            accepted_at.extend([0.0] * (judged - len(accepted_at)))
            for i in range(judged):
                drafted_at[i] += 1.0
                accepted_at[i] += i < matched
