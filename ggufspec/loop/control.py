"""Which drafter proposes, and how many tokens, each round: measured throughput decides (pure).

A round runs the target alone (K = 0, source "none") or lets one drafter d propose K tokens.
Each round `choose` picks:
1. calibration: while a is unmeasured (or suspect: rule `recheck`, a drafting round under a / 2,
   or a first round of the target alone whose Python outlasted its decode), the target alone;
2. an opening round of a prompt, a catch-up that does not pay, a retry or a confirmation
   (ggufspec.loop.exploration, ggufspec.loop.catchup);
3. else the source with the highest R_s (ggufspec.loop.throughput), except that the draft model in
   step (it ran last round, rule `hysteresis`) is judged by max(R_s, P_s); its K maximises
   E_d(K) / T_d(K) over [max(1, draft_min), cap] (ggufspec.loop.costmodel), the optimistic K once
   every `retry` rounds (rule `k_probe`; every other time a K whose verify went unmeasured: rule
   `verify_probe`, ggufspec.loop.exploration). Rule `calibrate`: while fewer than `calibrate` rounds
   measured a, a drafter that the estimates prefer by less than STALL = 1.5x waits for one more
   (a is the fastest of them): one slow first round (x1.5) otherwise priced the target alone too
   dear, and a drafter that loses ran until its retry, up to `retry` x `spacing` rounds later.
   Where a drafter wins by more, a first round that slow cannot have decided it.
`observe` learns from the round: timing samples, accept counts (a free drafter's proposal is
scored every round, chosen or not), and the source's realized rate with its seconds winsorized
at `winsor` T(K) (rule `winsor`).

Hold (`hold`, ggufspec.loop.hold): a clear choice stands a few rounds without pricing the sources.

Switch (`switch_cost`, on where the target runs on a CUDA GPU): llama.cpp's CUDA backend runs a decode
whose rows differ from the last one's without its graph, and the next of those rows too (capturing
it). So a is measured only in a round of the target alone after two others; what the two rounds
after a drafting run cost over 2a (S) is charged to the drafter that left one row, and a drafter's
round starting from the target alone is priced S / max(its runs' median length, `switch_rounds`)
more; retries come 1 + S / a times rarer (the H200's captured and uncaptured steps: docs/gpu.md).

Check (`check_rounds`, ggufspec.loop.checks): a free drafter's proposal may first meet the
in-step draft model's first token.

Extension (`extend`, ggufspec.loop.extension): a draft model's full proposal takes the longest e
tokens of a free drafter's continuation with pi_model(K) pi_free(e) / R >= v (v the verify line's
slope, R the best rate; with switch_cost on, the e tokens together pay S, the change of rows, too);
what continuations added lately prices the model's K (rule `extend_k`).

Lossless: `choose` sees past rounds and the history only, never the target's output for the round
it decides. The measurements behind each rule, and the ablation that kept it: docs/bench/controller.md.
BanditSpec (arXiv 2505.15141), TapOut (arXiv 2511.02017): bandits over speculation settings;
Not-a-Bandit (arXiv 2510.20064): full information for a free drafter.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from mypy_extensions import mypyc_attr

from ggufspec.loop.controlsettings import HORIZON, SYNCED, V0, V1, ControlSettings
from ggufspec.loop.estimates import B_MODEL, Samples
from ggufspec.loop.extension import Extensions
from ggufspec.loop.hold import HELD
from ggufspec.loop.rounds import NONE, Candidate, Choice, Round

STALL = 1.5  # rule calibrate: a first round of the target alone this much slow is guarded against

__all__ = ["SYNCED", "ControlSettings", "DraftController"]


@mypyc_attr(allow_interpreted_subclasses=True)  # (subclassed: tests, scripts)
class DraftController(Extensions):
    """Chooses each round's drafter and draft length; learns from `observe`. One per pair, kept
    across generations (its estimates are the machine's and the drafters', not one prompt's)."""

    def __init__(self, *, timed: bool = True, settings: ControlSettings = ControlSettings()) -> None:
        super().__init__(timed=timed, settings=settings)
        self._last: str | None = None  # the source of the last round
        self._shared: set[str] = set()  # draft models that import the target's KV cache (last round's candidates)

    def begin(self, *, prefilled: Sequence[str] = (), prefill: Mapping[str, tuple[int, float]] | None = None,
              target_prefill: tuple[int, float] | None = None) -> None:
        self.replay()
        self._rows, self._switched_by = (0, 0), None  # the prompt's prefill: another shape, no drafter's
        super().begin(prefilled=prefilled, prefill=prefill, target_prefill=target_prefill)

    def choose(
        self, *, drafters: Sequence[Candidate], draft_max: int, draft_min: int = 0, allow_none: bool = True,
        remaining: int | None = None,
    ) -> Choice:
        """This round's drafter and length. `draft_max`: the most tokens this round may draft;
        `allow_none`: False never chooses the target alone while a drafter can propose;
        `remaining`: tokens the generation may still emit (weighs a catch-up against its gain)."""
        lo = max(1, draft_min)
        caps, keys, models = self._caps_now(drafters, draft_max=draft_max, lo=lo, remaining=remaining)
        if self._held(caps, models, lo, allow_none):  # (before anything else: most rounds where nothing pays)
            return HELD
        self.replay()  # a priced round: the held rounds' bookkeeping first
        by_key = dict(zip(keys, drafters))
        keyed = [c if k == c.name else Candidate(k, c.free, c.match_len, c.backlog, c.kv_shared, c.grade)
                 for k, c in by_key.items()]  # (the constructor: dataclasses.replace is dearer, docs/bench/overhead.md)
        ch = self._choose(drafters=keyed, caps=caps, models=models, lo=lo, allow_none=allow_none,
                          remaining=remaining)
        if ch.drafter is None:
            return ch
        c = by_key[ch.drafter]
        if not c.free:
            return Choice(ch.drafter, ch.draft_len, ch.retry, ch.grade, ch.check, ch.check_len, extend=self.extend)
        check, check_len = self._check(ch.drafter, keyed, draft_max=draft_max, lo=lo, draft_len=ch.draft_len)
        return Choice(c.name, ch.draft_len, ch.retry, c.grade, check, check_len, extend=self.extend)

    def _choose(
        self, *, drafters: Sequence[Candidate], caps: dict[str, int], models: tuple[str, ...], lo: int,
        allow_none: bool, remaining: int | None,
    ) -> Choice:
        """`choose` where no hold covers the round, each candidate named by its source (`_key`)."""
        self._hold = None
        options: dict[str, tuple[int, float | None]] = {}  # source -> (K, modelled rate)
        for name, cap in caps.items():
            if name != NONE:
                best = self.best_len(name, lo=lo, cap=cap)
                options[name] = best if best is not None else (min(cap, max(lo, 4)), None)
        a = self.base_s()
        if allow_none or not options:
            options[NONE] = (0, 1.0 / a if a else None)
        if len(options) == 1:
            return self._only(options, lo, caps)
        if (a is None or self._recheck) and NONE in options:  # calibrate: a is the unit of every estimate
            self._recheck = False
            return Choice(None, 0, retry=True)
        both = {n: self._throughputs(n, r) for n, (_, r) in options.items()}  # (R_s, P_s)
        rates = {n: rp[0] or 0.0 for n, rp in both.items()}
        self._rated.update(rates)
        self._rates = rates
        self._pooled = {n: rp[1] or 0.0 for n, rp in both.items()}
        # a draft model's prior rate (alpha0, the measured costs): the optimism of a catch-up or a prefill
        self._prior = {n: self.prior_rate(n, lo=lo, cap=self._caps[n]) or 0.0 for n in options
                       if n != NONE and not self._drafters[n].free}
        self._hopeless_now = {n for n in self._prior if self._hopeless(n, rates, lo=lo, cap=self._caps[n])}
        shared = self._shared = {c.name for c in drafters if c.kv_shared}
        opening = self._open(drafters, options, rates, caps, lo, remaining)
        if opening is not None:
            return opening
        self._price_backlogs(drafters, options, rates, self._pooled, self._prior,
                             HORIZON if remaining is None else remaining)
        if len(options) == 1:
            return self._only(options, lo, caps)
        waits = {n: self._wait(n) for n in options}
        oldest = max(options, key=lambda n: waits[n])  # the longest waiting
        again, self._confirm = self._confirm, None
        if waits[oldest] < 1 and again is not None and again[0] in options:
            oldest, self._confirm = again[0], (again[0], again[1] - 1) if again[1] > 1 else None
            self._confirming = True
        elif waits[oldest] < 1:  # no retry due: the estimates decide
            held = dict(rates)
            if (self.settings.hysteresis and self._last in held and self._last != NONE
                    and not self._drafters[self._last].free and self._last not in shared):
                held[self._last] = max(held[self._last], self._pooled[self._last])
            name = max(options, key=lambda n: held[n])  # ties: the first drafter given, none last
            if (name != NONE and NONE in options and self.timed and len(self._base) < self.settings.calibrate
                    and held[name] <= STALL * rates[NONE]):  # rule calibrate: a another sample first
                return Choice(None, 0)
            k = options[name][0]
            if name == NONE:
                self._hold_none(held, models, lo, allow_none)
            elif not self._drafters[name].free:
                k = self._probed_len(name, lo, caps[name], k)
            return Choice(None if name == NONE else name, k)
        else:
            self._confirming = False
        self._bar = max((r for n, r in rates.items() if n != oldest), default=0.0)
        self._probe = (lo, caps[oldest])
        k = options[oldest][0] if oldest == NONE else self._retry_len(oldest, lo, caps[oldest], options[oldest][0])
        return Choice(None if oldest == NONE else oldest, k, retry=True)

    def _only(self, options: dict[str, tuple[int, float | None]], lo: int, caps: dict[str, int]) -> Choice:
        """The one source left (always-draft with one draft model, or the target alone): a draft
        model still takes its K probes (rule `probe_b`; without them a K = 1 never measures b again)."""
        name, (k, _) = next(iter(options.items()))
        if name == NONE:
            return Choice(None, k)
        if self.settings.probe_b and not self._drafters[name].free:
            k = self._probed_len(name, lo, caps[name], k)
        return Choice(name, k)

    def observe(self, r: Round) -> None:
        """A round ended (`Round`: what ran, what was drafted, kept and emitted, and its seconds).
        `round_s` counts drafting, verify and our Python, not a catch-up; `check_s` is the source's
        check; an extension's tokens are verify rows, judged where the model's drafts were all kept.
        A held round's bookkeeping waits for the next read of the estimates (ggufspec.loop.hold)."""
        if not self._defers(r):
            self.replay()
            self._observe(r)

    def _observe(self, r: Round) -> None:
        choice, drafted, accepted, emitted = r.choice, r.drafted, r.accepted, r.emitted
        round_s, draft_s, check_s, free = r.round_s, r.draft_s, r.check_s, r.free
        draft_first_s, draft_calls, extended = r.draft_first_s, r.draft_calls, r.extended
        if choice is None:
            return
        st = self.settings
        name = choice.drafter  # the source: a free drafter's by grade
        if name is not None and choice.grade and st.grades:
            name = self._key(name, choice.grade)
        by_source = {self._key(n, v.grade): v for n, v in r.scored.items()}
        if name is not None:
            model = self._model(name, free)
            if not self.timed:  # nominal costs: the priors, exactly
                draft_s = (drafted - extended) * model.b_prior
                check_s = B_MODEL if check_s > 0 else 0.0
                round_s = 1.0 + (V0 + V1 * drafted if drafted else 0.0) + draft_s + check_s
        elif not self.timed:
            round_s, draft_s = 1.0, 0.0
        vp = max(0.0, round_s - draft_s - check_s)  # the verify and our Python
        if drafted == 0 and not self._base and st.recheck and self.timed and 0.0 < r.verify_s < vp - r.verify_s:
            # rule recheck: a first a whose Python outlasted its decode is a stall (a GC pass): priced
            # as the least stalled round could be, 2 x its decode, and measured again
            round_s = vp = 2.0 * r.verify_s
            self._recheck = True
        # priced with the estimates the round was chosen with (the memo `choose` filled): its
        # winsorizing cap and the catch-up it induces; the samples it adds change them after
        a = self.base_s()
        d_s = (self.draft_cost_s(name, drafted - extended) or 0.0) if name is not None else 0.0
        cap = st.winsor * ((self.verify_s(drafted) or a or round_s) + d_s)
        induced_s = self._induced_s(name, free, emitted, self._shared)
        # rule switch_cost: a round of the target alone right after another shape measures the switch
        rows = drafted + 1
        switched = st.switch_cost and self._rows != (rows, rows)
        excess = 0.0
        if drafted == 0 and switched and a is not None:
            if self._switched_by is not None:
                excess = max(0.0, vp - a)
                self._source(self._switched_by).charge(excess)
                self._switch_acc += excess
        else:
            if self._switch_acc > 0.0:  # the way back to one row is over: S, one sample
                self._switch.add(self.round, self._switch_acc)
                self._switch_acc = 0.0
        if drafted == 0 and not switched:  # measures a (an empty draft: not the target's cost)
            self._base.add(self.round, vp)
        elif drafted > 0 and a is not None:  # bounds a from above
            self._bound.add(self.round, vp)
        if drafted > 0 and name is not None:
            if a is None:  # no round of the target alone yet: infer a from the priors
                a = vp / (1.0 + V0 + V1 * drafted)
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
            v_k = self._verify.get(drafted)
            if v_k is None:
                v_k = self._verify[drafted] = Samples(st.window)
            v_k.add(self.round, vp)  # rows, whoever proposed them
            own = drafted - extended  # the model's drafts: its curve's positions
            self._record_accepts(name, own, min(accepted, own), emitted)
            if not free and own == choice.draft_len:  # a full proposal: a continuation could follow
                self._record_continuation(name, extended, accepted >= own, accepted - own)
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
        if st.switch_cost:
            self._rows = (self._rows[1], rows)
            if drafted > 0 and name is not None:
                self._switched_by = name
            self._ran(name if drafted > 0 else None)
        src = self._source(NONE if name is None else name)
        charged_s = min(round_s - excess, cap) + induced_s
        src.add(emitted, charged_s, pool=st.pool_decay, current=st.decay)
        src.last = self.round
        self._clock += charged_s
        self._ran_s[NONE if name is None else name] = self._clock
        self._last = NONE if name is None else name
        self.round += 1
        self._memo.clear()  # new samples and counts, a new round: new estimates
        if choice.retry:
            self._after_retry(name, emitted, charged_s, self.base_s() or round_s)
