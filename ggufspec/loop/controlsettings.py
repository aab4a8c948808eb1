"""The controller's settings (`ControlSettings`: horizons in rounds, robustness knobs, one switch
per rule for the ablation of docs/bench/controller.md) and its nominal costs (pure)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields
from typing import Any, Callable, TypeVar

T = TypeVar("T")

# nominal costs in units of a target step (priors; the only costs of a counted controller;
# the draft step and accept priors are in ggufspec.loop.estimates)
V0 = 0.3  # a verify's first extra row beyond the target step
V1 = 0.2  # each further row
U_MODEL = 0.3  # prior catch-up cost of a draft model, per token of backlog
SYNCED = 2  # a backlog this small is a normal round's (a full accept leaves 2 tokens to decode)
HORIZON = 256  # tokens a generation is assumed to have left when the caller does not say
FEW_B = 4  # rule probe_b: a draft model's b measured fewer times is their minimum, and K probes come every 4 n rounds
PRIOR_WEIGHT = 0.25  # each of the verify line's two prior points, against a median's min(n, 4)


@dataclass(frozen=True, kw_only=True)
class ControlSettings:
    """The controller's horizons (in rounds) and robustness knobs. A rule's switch off is the
    rule's absence (opening = 0, confirm = 0, spacing = 1, calibrate = 1, check_rounds = 0, winsor = inf, expire = inf, or False)."""

    retry: int = 32  # a source not run for this many rounds runs next
    decay: float = 0.95  # weight of a source's realized round per later round of that source, in a generation
    pool_decay: float = 0.98  # ... over all generations
    prompt_prior_rounds: float = 8.0  # pseudo-rounds of a source's rate over all generations in this one's
    free_prior_obs: float = 2.0  # pseudo-observations of a free drafter's pooled curve in this generation's
    accept_decay: float = 0.97  # weight of a drafter's acceptance observation per later observation of it
    idle_decay: float = 0.99  # ... and of either per round of any source (half weight after 69 rounds)
    opening: int = 3  # rounds a draft model prefilled with a new prompt runs before the estimates decide
    explore_share: float = 0.05  # a prefill for exploration's sake when it is this share of the time since the model ran
    hopeless_share: float = 0.01  # a hopeless model's retries cost at most this share of the time (rule `hopeless`)
    close: float = 0.9  # a draft model this close to the best estimate is prefilled with a new prompt
    window: int = 16  # timing samples whose median is an estimate
    prior_rounds: float = 2.0  # pseudo-rounds of the cost model in a source's throughput
    winsor: float = 4.0  # a round's seconds count at most this many model round times
    confirm: int = 3  # rounds a retry that beat the estimates runs again
    check_rounds: int = 3  # a free drafter's grade is checked (`check`) until a generation judged this many of it
    spacing: float = 4.0  # the most `retry` intervals between two retries of the target alone (1: every `retry`)
    verify_prior_weight: float = PRIOR_WEIGHT  # each prior point of the verify line
    hold: int = 8  # rounds a clear choice of the target alone stands without re-estimating (0: every round)
    calibrate: int = 2  # rounds of the target alone that measure a before a drafter wins by less than 1.5x (1: the rule off)
    hold_margin: float = 0.1  # ... clear: the target alone's rate at least (1 + this) x every other source's
    expire: float = 1024.0  # rounds a drafter's timing sample or a verify sample counts (inf: forever; ggufspec.loop.costmodel)
    # rule switches (off: the rule's absence)
    two_level: bool = True  # this generation's rate over the pooled one (off: the pooled rate alone)
    measured_verify: bool = True  # V(K) moved from the line towards what K's verifies cost lately, as far as that stands out of their noise
    first_call: bool = True  # D(K) = f + (K - 1) b (off: K b, b = draft seconds / drafted)
    hysteresis: bool = True  # the draft model in step judged by max(R_s, P_s)
    few_runs: bool = True  # a model run n < 8 times is due after 4 n rounds
    unsettled: bool = True  # a model run < retry / 2 times: a retry priced at the prior, prefilled when due
    optimistic_retry: bool = True  # a retry of a draft model runs at the optimistic K
    k_probe: bool = True  # once every `retry` rounds the chosen model runs at the optimistic K
    verify_probe: bool = True  # ... every other one at the best K whose verify was not measured lately (within `close`)
    probe_b: bool = True  # a model's retry, opening or K probe drafts at least 2 tokens (K = 1 never measures b)
    free_prompt: bool = True  # a free drafter's curve and rate are this generation's over the pooled
    grades: bool = True  # a free drafter's grades are sources of their own
    catchup_pricing: bool = True  # a model with a backlog runs only where its catch-up pays
    induced_catchup: bool = True  # a free round is charged the catch-up it leaves the model in play
    recheck: bool = True  # a drafting round under a / 2, or a stalled first sample of a, re-measures a
    hopeless: bool = True  # a model whose ceiling cannot beat the best other source is left
    full_retry: bool = True  # a model prefilled because its retry is due opens in full (off: 1 round where it lost)
    check_pricing: bool = True  # a check runs only where it pays at the measured costs (off: whenever due)
    extend_k: bool = True  # a model's K priced with the continuation a free drafter appends to its full proposals
    prefill_rivals: bool = True  # a prefill judged against the target alone and the draft models (off: a free drafter's grades too)
    prefill_slope: bool = True  # the verify line's prior slope at least what a token of the target's prompt prefill costs
    # a target on a CUDA GPU (on where one runs it; off: a CPU's decode costs what its rows do): a
    # decode whose shape differs from the last runs without the backend's graph, and so does the
    # next (which captures it): a only from rounds of the target alone after two, and what such a
    # round costs over a charged to the drafting round that moved the target off one row
    switch_cost: bool = False
    switch_rounds: float = 4.0  # ... a drafter's round pays S / max(its runs' median length, this)

    def __post_init__(self) -> None:
        if (self.retry < 1 or self.calibrate < 1 or self.window < 1 or self.spacing < 1 or self.opening < 0 or self.check_rounds < 0
                or self.hold < 0 or self.hold_margin < 0 or not self.expire > 0 or not 0 < self.hopeless_share <= 1 or self.switch_rounds < 1
                or not all(0 < x <= 1 for x in (self.decay, self.accept_decay, self.idle_decay))):
            raise ValueError(f"bad control settings: {self}")

    def __reduce__(self) -> tuple[object, ...]:  # (compiled, a frozen dataclass pickles through its constructor)
        return _settings, (tuple((f.name, getattr(self, f.name)) for f in fields(self)),)


def _settings(items: tuple[tuple[str, object], ...]) -> ControlSettings:
    """`ControlSettings.__reduce__`'s constructor: the settings of these (name, value) fields."""
    return ControlSettings(**dict(items))  # type: ignore[arg-type]


def per_state(method: Callable[..., T]) -> Callable[..., T]:
    """`method`'s value computed once per state of the estimates: `choose` asks each estimate
    several times a round (at every K of every source), and only `observe` and `begin` change what
    they are made from (each empties the owner's `_memo`). Rounds queued for later are observed
    first (`CostModel.replay`)."""
    name = method.__name__

    @functools.wraps(method)
    def cached(self: Any, *args: object, **kwargs: object) -> T:
        if self._pending:
            self.replay()
        # (no argument is a tuple, so the tuple forms of key never meet; no arguments: the name)
        key = (name, args, *kwargs.items()) if kwargs else (name, *args) if args else name
        memo = self._memo
        value = memo.get(key, memo)  # (the memo itself: no value; `get`, not a KeyError: docs/bench/overhead.md)
        if value is memo:
            value = memo[key] = method(self, *args, **kwargs)
        return value  # type: ignore[return-value]

    return cached
