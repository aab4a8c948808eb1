"""Realized and modelled rates: each source's acceptance curve and tokens per second (pure).

Acceptance. c_d(j) = P(draft j accepted | drafts 1..j-1 accepted), from counts discounted by
`accept_decay` per later observation of d and `idle_decay` per round of any source, plus one
pseudo-round of prior c_d(j-1) (c_d(0) = alpha0), so past the measured positions the curve
extends the measured one:
    c_d(j) = (accepted_j + c_d(j-1)) / (drafted_j + 1),   pi_d(i) = prod_{j<=i} c_d(j)
    E_d(K) = 1 + sum_{i=1..K} pi_d(i),   K* = argmax_{K in [lo, cap]} E_d(K) / T_d(K)
Rule `extend_k`: a draft model's full proposal may be continued by a free drafter (rule `extend`,
ggufspec.loop.extension), x tokens kept on average where its drafts all were, at r verify rows a
proposal (v a row, the verify line's slope); K then maximises
    (E_d(K) + pi_d(K) x) / (T_d(K) + v r)
(x and r this generation's over the pooled, `free_prior_obs` pseudo-proposals): where lookup
continues what the model leads into, a short K; where it does not, x = r = 0 and the K of the
model alone (its measurements: docs/bench/controller.md).
`optimistic`: each c_d(j) at least alpha0 (the K a retry or a K probe runs). Rule `free_prompt`:
a free drafter (scored every round, chosen or not: full information) takes this generation's
counts over its pooled curve as `free_prior_obs` pseudo-observations,
    c'(j) = (gen_accepted_j + w c_d(j)) / (gen_drafted_j + w).
Rule `grades`: a free drafter's proposal of grade g (lookup: the n-gram length of its match) is
a source of its own, `lookup#g`, with its own curve and rate.

Throughput (rule `two_level`, empirical Bayes): over all generations, a source's rounds
discounted by `pool_decay` a round of its own and `idle_decay` a round of any source, shrunk
towards the cost model's figure R0 with m = `prior_rounds` pseudo-rounds; and over this
generation's (`decay` a round), shrunk towards the former with m_g = `prompt_prior_rounds`:
    P_s = (sum w tokens + m R0_s t_s) / (sum w seconds + m t_s)
    R_s = (cur tokens + m_g P_s t_s) / (cur seconds + m_g t_s)
t_s: the source's mean round (a before it ran), so pseudo-rounds are rounds of that source.
A free drafter's R_s shrinks towards R0 (its modelled rate with this prompt's curve) instead of
P_s, with m = `prior_rounds`: its worth is the prompt's. R0_d = max_K E_d(K) / T_d(K); R0_none = 1 / a.
"""

from __future__ import annotations

from mypy_extensions import mypyc_attr

from ggufspec.loop.costmodel import CostModel
from ggufspec.loop.controlsettings import per_state
from ggufspec.loop.estimates import DrafterModel, Realized


@mypyc_attr(allow_interpreted_subclasses=True)  # (subclassed: tests, scripts)
class Rates(CostModel):
    """The cost model with each source's acceptance curve and realized throughput."""

    def _source(self, name: str) -> Realized:
        s = self._sources.get(name)
        if s is None:
            s = self._sources[name] = Realized(at=self.round)
        s.decay_to(self.round, self.settings.idle_decay)
        return s

    def _key(self, name: str, grade: int) -> str:
        """The source a drafter's proposal of `grade` counts for (rule `grades`; grade 0: the drafter)."""
        return f"{name}#{grade}" if grade and self.settings.grades else name

    @staticmethod
    def _extension_key(name: str, grade: int) -> str:
        """The curve of free drafter `name`'s continuations of a model's drafts, of `grade` (`extend`)."""
        return f"{name}+{grade}"

    def prefix_accept(self, name: str, n: int, *, optimistic: bool = False) -> tuple[float, ...]:
        """pi_d(1..n): P(the first i drafts of `name` are all accepted), i = 1..n (module docstring)."""
        self.replay()  # (asked once a state: read without a memo, after the held rounds)
        m = self._drafters[name]
        self._decay_accepts(m)
        out, pi, cond, alpha0 = [], 1.0, m.alpha0, m.alpha0
        w = self.settings.free_prior_obs
        drafted, accepted = m.drafted_at, m.accepted_at  # (the same length: `_record_accepts`)
        gen_drafted = m.gen_drafted_at if m.free and self.settings.free_prompt else []
        measured, gen_measured, gen_accepted = len(drafted), len(gen_drafted), m.gen_accepted_at
        for i in range(n):  # (every round, for each source: the lengths and branches hoisted)
            if i < measured:  # (past the measured positions c(j) = c(j - 1))
                cond = (accepted[i] + cond) / (drafted[i] + 1.0)
            c = (gen_accepted[i] + w * cond) / (gen_drafted[i] + w) if i < gen_measured else cond
            if optimistic and c < alpha0:
                c = alpha0
            pi *= c
            out.append(pi)
        return tuple(out)

    @per_state
    def best_len(self, name: str, *, lo: int, cap: int, optimistic: bool = False) -> tuple[int, float] | None:
        """(K, E(K) / T(K)) maximising the modelled rate over K in [lo, cap]; None when unmeasured."""
        rates = self.len_rates(name, cap=cap, optimistic=optimistic) if cap >= lo else None
        if rates is None:
            return None
        best: tuple[int, float] | None = None
        for k in range(lo, cap + 1):
            if best is None or rates[k - 1] > best[1] + 1e-12:
                best = (k, rates[k - 1])
        return best

    def len_rates(self, name: str, *, cap: int, optimistic: bool = False) -> tuple[float, ...] | None:
        """E(K) / T(K) (with `extend_k`'s continuation) for K = 1..cap; None when unmeasured."""
        costs = self.round_costs(name, cap)
        if costs is None:
            return None
        pis = self.prefix_accept(name, cap, optimistic=optimistic)
        rows, kept = self._continuation(name)
        extra_s = rows * self._verify_line(costs[0])[1] if rows else 0.0  # its verify rows, v a row
        out, e = [], 1.0
        for k in range(1, cap + 1):
            e += pis[k - 1]
            out.append((e + pis[k - 1] * kept) / (costs[k] + extra_s))
        return tuple(out)

    def _continuation(self, name: str) -> tuple[float, float]:
        """Rule `extend_k`: (rows, kept), the verify rows a free drafter's continuation adds to a full
        proposal of draft model `name`, and its tokens kept where the model's drafts all were: this
        generation's over the pooled (`free_prior_obs` pseudo-proposals), as a free drafter's curve.
        (0, 0): a free drafter, the rule off, or no continuation seen."""
        m = self._drafters[name]
        if m.free or not self.settings.extend_k or not m.continued[0]:
            return 0.0, 0.0
        w = self.settings.free_prior_obs
        (n, rows, full, kept), (gn, grows, gfull, gkept) = m.continued, m.gen_continued
        rows = (grows + w * rows / n) / (gn + w)
        kept = (gkept + w * (kept / full if full else 0.0)) / (gfull + w)
        return rows, kept

    def throughput(self, name: str, prior_rate: float | None, *, pooled: bool = False) -> float | None:
        """R_s (P_s where `pooled`): a source's realized tokens a second, shrunk (module docstring)."""
        return self._throughputs(name, prior_rate)[1 if pooled else 0]

    def _throughputs(self, name: str, prior_rate: float | None) -> tuple[float | None, float | None]:
        """(R_s, P_s): `choose` asks both of each source."""
        self.replay()  # (asked once a state: read without a memo, after the held rounds)
        a = self.base_s()
        s = self._source(name)
        d = self._drafters.get(name)
        t = s.round_s(a) if a is not None else None  # t_s
        st = self.settings
        m = st.prior_rounds if prior_rate is not None else 0.0
        num = s.tokens + (m * prior_rate * t if prior_rate is not None and t is not None else 0.0)
        den = s.seconds + (m * t if t is not None else 0.0)
        pooled = num / den if den > 0 else prior_rate  # P_s
        if d is not None and d.free and st.free_prompt and prior_rate is not None and t is not None:
            rate, m_g = prior_rate, st.prior_rounds  # full information: the prompt's own curve
        elif pooled is None or t is None or not st.two_level:
            return pooled, pooled
        else:
            rate, m_g = pooled, st.prompt_prior_rounds
        den = s.cur_seconds + m_g * t
        return ((s.cur_tokens + m_g * rate * t) / den if den > 0 else rate), pooled

    def _record_continuation(self, name: str, rows: int, full: bool, kept: int) -> None:
        """A full proposal of draft model `name`: `rows` of a free drafter's continuation verified
        after it; `full`, its drafts all kept (the continuation judged), `kept` of it kept then."""
        m = self._drafters[name]
        w = self.settings.accept_decay
        for sums, decay in ((m.continued, w), (m.gen_continued, 1.0)):
            sums[0] = sums[0] * decay + 1.0
            sums[1] = sums[1] * decay + rows
            sums[2] = sums[2] * decay + full
            sums[3] = sums[3] * decay + (kept if full else 0)

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
