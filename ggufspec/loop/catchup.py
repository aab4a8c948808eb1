"""Catch-up pricing: a draft model that missed rounds must decode them before it drafts (pure).

A draft model's KV cache must hold the history before it drafts; after rounds it sat out it
first decodes the `backlog` tokens it missed, at u_d seconds a token (ggufspec.loop.costmodel).
Rule `catchup_pricing`: a drafter with a backlog runs only where what it saves over the
`remaining` tokens of the generation pays for the catch-up,
    remaining (1 / R_other - 1 / R_d) >= (backlog - SYNCED) u_d
with R_d its estimate; for a retry, the better of it and P_d (and the prior rate at alpha0 where
P_d is within `close` of R_other, or where the model ran fewer than retry / 2 rounds: rule
`unsettled`, a cold start's estimate is a few rounds' luck). A retry deferred so is due again at
the next prompt, when the model is prefilled with it (`wants`, at the measured prefill cost a token).

Rule `induced_catchup`: a free drafter's round is charged the catch-up it leaves the draft model
in play (the model drafter run last, within `retry` rounds): its emitted tokens times u_m.

A draft model that imports the target's KV cache (`Candidate.kv_shared`) is never behind: these
rules, the opening and the hysteresis never act on it. The trace replay's draft is such a model
unless its traces were recorded with the draft's own cache (scripts/trace_sim.py record
--own-cache, as for the 1B stand-in: docs/bench/coldstart-replay-2026-11-29).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from mypy_extensions import mypyc_attr

from ggufspec.loop.controlsettings import SYNCED
from ggufspec.loop.rounds import Candidate
from ggufspec.loop.throughput import Rates


@mypyc_attr(allow_interpreted_subclasses=True)  # (subclassed: tests, scripts)
class CatchUp(Rates):
    """The rates with the catch-up each source would cost."""

    def _pays(self, name: str, backlog: int, rate: float, other: float, remaining: int, *,
              prefill: bool = False) -> bool:
        """Does running `name` at `rate` instead of the best other source at `other` tokens/s save,
        over `remaining` tokens, what catching up on `backlog` tokens costs? (`prefill`: a whole
        prompt in one batch, at the measured prefill cost a token)"""
        if backlog <= SYNCED or not self.settings.catchup_pricing:
            return True
        if rate <= 0 or other <= 0 or rate <= other:
            return False
        u = self._prefill_s(name) if prefill else (self.catchup_s(name) or 0.0)
        return remaining * (1.0 / other - 1.0 / rate) >= (backlog - SYNCED) * u

    def _price_backlogs(self, drafters: Sequence[Candidate], options: dict[str, tuple[int, float | None]],
                        rates: dict[str, float], pooled: Mapping[str, float], prior: Mapping[str, float],
                        horizon: int) -> None:
        """Drop from `options` each draft model whose catch-up pays neither as an estimate nor as
        a retry (module docstring); one that pays only as a retry is rated under the best other."""
        backlog = {c.name: c.backlog for c in drafters  # (one never run is tried once whatever it costs)
                   if not c.free and c.name in options and c.backlog > SYNCED and self._source(c.name).last is not None}
        for n in backlog:
            other = max((r for m, r in rates.items() if m != n and m not in backlog), default=0.0)
            if other <= 0.0:
                continue  # nothing else may run: the catch-up cannot be avoided
            if self._pays(n, backlog[n], rates[n], other, horizon):
                continue
            optimistic = max(rates[n], pooled[n])
            if pooled[n] >= self.settings.close * other or self._unsettled(n):
                optimistic = max(optimistic, prior[n])  # a close race or a few rounds' luck: the prior's optimism
            if not self._pays(n, backlog[n], optimistic, other, horizon):
                del options[n]  # not even a retry pays now: due again at the next prompt
            else:
                rates[n] = min(rates[n], other * (1 - 1e-9))  # a retry may run it, the estimates not

    def _unsettled(self, name: str) -> bool:
        """Rule `unsettled`: draft model `name` ran fewer than `retry` / 2 rounds, so its estimate is
        a few rounds' luck (a cold start's first rounds)."""
        return self.settings.unsettled and self._source(name).runs < self.settings.retry / 2

    def _induced_s(self, name: str | None, free: bool, emitted: int, shared: set[str]) -> float:
        """Catch-up a free drafter's round leaves to the draft model in play (module docstring)."""
        if name is None or not free or not self.settings.induced_catchup:
            return 0.0
        last = {n: s.last for n, s in self._sources.items()
                if n in self._drafters and not self._drafters[n].free and s.last is not None}
        if not last:
            return 0.0
        m = max(last, key=lambda n: last[n])  # type: ignore[arg-type,return-value]
        if self.round - last[m] > self.settings.retry or m in shared:  # type: ignore[operator]
            return 0.0  # (a model that imports the target's cache catches up by one import)
        return emitted * (self.catchup_s(m) or 0.0)
