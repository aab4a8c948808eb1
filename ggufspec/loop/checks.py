"""Checks: a free drafter's proposal first meets the draft model's first token (pure).

Rule `check_rounds`: a free drafter's proposal chosen while this generation judged fewer than
`check_rounds` proposals of its grade runs only if the in-step draft model's first token agrees
with its first; else the round is the model's (`Choice.check`, played by
ggufspec.loop.round_runner). A new prompt's matches are not its past prompts': the reason for
checks. Only where the check pays at the measured costs (rule `check_pricing`, `_check_pays`).
"""

from __future__ import annotations

from collections.abc import Sequence

from mypy_extensions import mypyc_attr

from ggufspec.loop.controlsettings import SYNCED
from ggufspec.loop.hold import Hold
from ggufspec.loop.rounds import NONE, Candidate


@mypyc_attr(allow_interpreted_subclasses=True)  # (subclassed: tests, scripts)
class Checks(Hold):
    """The held schedule with the check of a free drafter's proposal (module docstring)."""

    def _check(self, source: str, drafters: Sequence[Candidate], *, draft_max: int, lo: int,
               draft_len: int) -> tuple[str | None, int]:
        """(draft model, its K) that checks free source `source`'s proposal of `draft_len` tokens
        this round, or (None, 0): the in-step model with the best modelled rate, while this
        generation has judged fewer than `check_rounds` proposals of the source, not one whose
        ceiling is under the target alone's rate, and where the check pays (`_check_pays`).
        Lossless: the model's token is no output of the target (at T > 0 the proposal's first
        token is the model's draw, verified with its q)."""
        m = self._drafters.get(source)
        judged = m.gen_drafted_at[0] if m is not None and m.gen_drafted_at else 0.0
        if judged >= self.settings.check_rounds:
            return None, 0
        # not a model hopeless against the target alone: each check is its call, the cache import
        # included (docs/bench/controller.md)
        alone = {NONE: self._rates.get(NONE, 0.0)}
        models = [c for c in drafters if not c.free and (c.kv_shared or c.backlog <= SYNCED)
                  and not self._hopeless(c.name, alone, lo=lo, cap=draft_max)]
        if not models:
            return None, 0
        best = {c.name: self.best_len(c.name, lo=lo, cap=draft_max) for c in models}
        name = max(best, key=lambda n: best[n][1] if best[n] is not None else 0.0)  # type: ignore[index]
        chosen = best[name]
        if chosen is None:  # unmeasured: the check as before
            return name, min(draft_max, max(lo, 4))
        k = chosen[0]
        if self.settings.check_pricing and self.timed and not self._check_pays(
                source, name, k, chosen[1], draft_len, cap=draft_max):
            return None, 0
        return name, k

    def _check_pays(self, source: str, model: str, k: int, rate_m: float, draft_len: int, *, cap: int) -> bool:
        """Rule `check_pricing`: does checking `source`'s proposal of `draft_len` tokens with
        `model` at K = `k` (its modelled rate `rate_m`) pay? A check that agrees (p: the source's
        first draft kept, by this generation's judged proposals over the prior alpha0) costs the
        model's first call f; one that disagrees turns a round whose first draft the target
        rejects (1 token in V(K_s)) into the model's round (E_m(K) tokens in T_m(K)). Valued at R,
        the chosen source's rate (a round's surplus: tokens - R seconds), the check pays where
            (1 - p) [T_m(K) (r_m - R) - 1 + R V(K_s)] > p R f,    r_m = E_m(K) / T_m(K)
        Unmeasured (or counted: nominal costs), it pays. Where a model's call costs most of a target
        step and the free drafter wins (gemma3-270m's 262k vocabulary beside lookup on plain text;
        docs/bench/controller.md), it does not."""
        rate = self._rates.get(source)
        costs = self.round_costs(model, cap)  # (the memo `best_len` filled)
        f = self.draft_cost_s(model, 1)
        v = self.verify_s(draft_len)
        if not rate or costs is None or f is None or v is None:
            return True
        # this generation's first drafts of the source, over its prior alpha0 (a new prompt's
        # matches are not its past prompts': the reason for checks)
        m, w = self._drafters[source], self.settings.free_prior_obs
        judged, kept = (m.gen_drafted_at[0], m.gen_accepted_at[0]) if m.gen_drafted_at else (0.0, 0.0)
        p = (kept + w * m.alpha0) / (judged + w)
        gain = costs[k] * (rate_m - rate) - 1.0 + rate * v
        return (1.0 - p) * gain > p * rate * f
