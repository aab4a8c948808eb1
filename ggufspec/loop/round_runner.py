"""One round of the draft/verify loop, played: the engine's and the trace replay's (its plan, steps
1 and 2: ggufspec.loop.round_plan).

With history h (its last token not yet in the target's KV cache):
    1. plan: the free drafters propose (a function of h: asking is lossless), the controller
       picks the source and K from past rounds only (`DraftController.choose`), or --fixed takes
       the first drafter at draft_max; a round a hold covers whatever the free drafters would
       propose runs the target alone and has them asked after it (ggufspec.loop.late);
    2. draft: that drafter proposes x_0..x_{K-1}; a checked free proposal first meets the draft
       model's first token; a model's full proposal may take a free drafter's continuation
       (`Choice.extend`);
    3. verify: the target decodes [h_last, x_0..x_{K-1}] in one batch, logits for all K + 1 rows
       (row i: the target's distribution after batch token i); on an asynchronous target (a GPU,
       an RPC worker) the decode is launched, and the bookkeeping that held rounds left for later
       runs before its rows are read;
    4. accept: a rule keeps x_0..x_{n-1} and adds one token (correction or bonus); the target's
       KV cache drops the rejected positions (the drafter re-syncs next round).
K = 0 is a plain target step: the target alone is the same round without drafting.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ggufspec.loop import clock
from ggufspec.loop.acceptance import AcceptRule, Verdict, accept_greedy, accept_match, accept_rejection
from ggufspec.loop.control import DraftController
from ggufspec.loop.drafters import Drafter
from ggufspec.loop.late import score
from ggufspec.loop.round_plan import Drafted, RoundPlanner
from ggufspec.loop.rounds import Round, Source
from ggufspec.loop.sampling import SamplingSettings, probabilities, sample
from ggufspec.loop.speculation import SpeculativeSettings
from ggufspec.loop.target import Target

Emitted = list[tuple[int, Source, "str | None"]]  # (token, where it came from, the drafter that proposed it)


class TargetRows:
    """Target distributions p_i, shaped only when an acceptance rule asks for row i."""

    def __init__(self, ctx: Target, sampling: SamplingSettings) -> None:
        self._ctx, self._sampling, self._rows = ctx, sampling, {}

    def __getitem__(self, i: int) -> np.ndarray:
        row = self._rows.get(i)
        if row is None:
            row = self._rows[i] = probabilities(self._ctx.logits(i), self._sampling)
        return row


class _RowArgmax:
    """argmax of the target's row i, computed when asked (a `Sequence` for `accept_greedy`)."""

    def __init__(self, ctx: Target) -> None:
        self._ctx = ctx

    def __getitem__(self, i: int) -> int:
        return int(self._ctx.logits(i).argmax())


def pick(logits: np.ndarray, sampling: SamplingSettings, rng: np.random.Generator) -> int:
    """The target's token from one row: argmax when greedy, else a draw."""
    if sampling.greedy:
        return int(logits.argmax())
    return sample(probabilities(logits, sampling), rng)


class RoundRunner:
    """Plays rounds for one generation: `play(history, remaining)` -> (its `Round`, the tokens it emits)."""

    def __init__(
        self, *, target: Target, drafters: Sequence[Drafter], controller: DraftController | None,
        sampling: SamplingSettings, speculative: SpeculativeSettings, rule: AcceptRule, rng: np.random.Generator,
        drafting: Callable[[], bool] | None = None, away: Callable[[], float] | None = None,
    ) -> None:
        """`away`: seconds so far that the generation's caller declared not its own (lockstep's
        other lanes, `Generation.wait`): kept out of a round launched ahead."""
        self.target, self.drafters, self.controller = target, tuple(drafters), controller
        self._away = away if away is not None else (lambda: 0.0)
        self.sampling, self.speculative, self.rule, self.rng = sampling, speculative, rule, rng
        self.lengths = speculative.length
        # rejection sampling needs the draft's q, so its drafts are sampled from q; greedy and
        # match take argmax drafts (q one-hot), as llama.cpp does
        self.planner = RoundPlanner(target=target, drafters=drafters, controller=controller, sampling=sampling,
                                    speculative=speculative, rng=rng, sampled=rule is AcceptRule.REJECTION,
                                    drafting=drafting)
        self._free = self.planner.free
        # a target whose decodes return before its device is done (`Target.asynchronous`): the
        # verify is launched, the bookkeeping held rounds left for later runs while it computes;
        # a round of the target alone that follows one is planned and launched at the end of it
        # (its input is that round's token), so that the engine's emission and the bookkeeping
        # run while the device computes it (`_ahead`)
        self._asynchronous = bool(getattr(target, "asynchronous", False))
        # the round launched: (its input token, when its plan began, when its decode was launched,
        # its plan, `away` then)
        self._flight: tuple[int, float, float, Drafted, float] | None = None

    @property
    def positions(self) -> int:
        """Draft positions a round may verify: draft_max, and a free drafter's continuation."""
        extendable = self.controller is not None and any(d.free for d in self.drafters)
        return self.lengths.draft_max + (self.lengths.draft_extend if extendable else 0)

    def settle(self) -> None:
        """The generation ends: ask the free drafters what the rounds kept for later would have had
        them propose, and wait for a round launched for nothing (a stop string, a client gone),
        whose input leaves the target's cache again: it holds the history but its last token, as
        after any round."""
        if self._flight is not None:
            self._flight = None
            self.target.logits(0)
            self.target.truncate(self.target.n_past - 1)
        self._free.settle()

    def wait(self) -> None:
        """Wait for the device to finish a round launched ahead, if any (`Generation.wait`), doing
        the bookkeeping that round would do under its decode first."""
        if self._flight is not None:
            self._under_decode()
            self.target.logits(0)

    def play(self, history: Sequence[int], remaining: int) -> tuple[Round, Emitted]:
        """One round after `history`, which may emit at most `remaining` tokens. A round of K drafts
        emits up to K + 1 and needs K + 1 free KV slots; its verify fits one batch."""
        if self._flight is not None:
            return self._land(history, remaining)
        target = self.target
        t_round = clock.now()
        r = self.planner.draft(history, remaining)
        kd = len(r.tokens)
        n_keep = target.n_past + 1  # the last history token stays in every case
        t = clock.now()
        target.decode([history[-1], *r.tokens], logits="all", wait=not self._asynchronous)
        if self._asynchronous:
            self._under_decode()
            target.logits(0)  # (the first read of a row waits for the device)
        verify_s = clock.now() - t
        if kd == 0:
            verdict = Verdict(0, pick(target.logits(0), self.sampling, self.rng), False)
        else:
            verdict = self._accept(r.tokens, r.q_rows)
            target.truncate(n_keep + verdict.n_accepted)  # drop KV of rejected drafts (of nothing if all kept)
        return self._finish(history, remaining, r, verdict, t_round, verify_s)

    def _land(self, history: Sequence[int], remaining: int) -> tuple[Round, Emitted]:
        """The round of the target alone launched at the end of the last (`_ahead`): while the
        device computes, the bookkeeping left for later; then its token."""
        assert self._flight is not None
        token, t_round, t, r, away = self._flight
        self._flight = None
        gap = self._away() - away  # (the caller's declared time away: not this round's)
        t_round, t = t_round + gap, t + gap
        assert history[-1] == token, "the engine's history must end with the launched round's input"
        self._under_decode()
        row = self.target.logits(0)  # (waits for the device)
        verify_s = clock.now() - t
        verdict = Verdict(0, pick(row, self.sampling, self.rng), False)
        return self._finish(history, remaining, r, verdict, t_round, verify_s)

    def _finish(self, history: Sequence[int], remaining: int, r: Drafted, verdict: Verdict, t_round: float,
                verify_s: float) -> tuple[Round, Emitted]:
        """The round's record and emitted tokens (and, on an asynchronous target, the next round
        launched where it surely runs the target alone)."""
        kd = len(r.tokens)
        n = verdict.n_accepted
        emitted = [*r.tokens[:n], verdict.token]
        choice, d = r.choice, r.draft
        if r.late:
            scored = self._free.later(history, draft_len=r.late, token=verdict.token)
        else:
            scored = {name: score(p, emitted) for name, p in r.proposals.items()
                      if choice is None or name != choice.drafter}
        record = Round(
            choice=choice, drafted=kd, accepted=n, emitted=len(emitted),
            round_s=clock.now() - t_round - d.catchup_s,  # catching up on history it missed is not this round's
            draft_s=d.decode_s - d.catchup_s, free=choice is not None and choice.drafter in r.proposals,
            scored=scored, catchup_tokens=d.catchup_tokens, catchup_s=d.catchup_s, draft_first_s=d.first_s,
            draft_calls=d.decode_calls, check_s=r.check_s, extended=r.ext_n, extended_by=r.ext_by,
            extended_grade=r.ext_grade, verify_s=verify_s, paused=r.paused, checked=r.checked,
            check_failed=r.check_failed,
        )
        proposer, own = (choice.drafter if choice is not None else None), kd - r.ext_n
        out: Emitted = [(x, Source.DRAFT, proposer if i < own else r.ext_by) for i, x in enumerate(r.tokens[:n])]
        end = Source.TARGET if kd == 0 else Source.BONUS if verdict.bonus else Source.CORRECTION
        out.append((verdict.token, end, None))
        if self.controller is not None and choice is not None:
            self.controller.observe(record)
        if kd == 0 and self._asynchronous:
            self._ahead(history, verdict.token, remaining)
        return record, out

    def _ahead(self, history: Sequence[int], token: int, remaining: int) -> None:
        """On an asynchronous target, after a round of the target alone that emitted `token`: plan
        the next round now, and where it runs the target alone (no drafter, one token left, or the
        controller's hold), launch its decode, so that the engine's emission of `token` and the
        bookkeeping run while the device computes. Not after an end of generation or the last
        token; a stop string ends the generation with the round in flight (`settle`). The plan
        is the one the next round would make (the controller has observed this round, and the
        engine tells it nothing in between); one that is priced is left to the next round."""
        if remaining <= 1 or self.target.model.is_eog(token):
            return
        t_round = clock.now()  # (its plan is the round's, as where the round plans itself)
        r = self.planner.plan_ahead(history, token, remaining - 1)
        if r is not None:
            self._flight = (token, t_round, clock.now(), r, self._away())
            self.target.decode([token], logits="all", wait=False)

    def _under_decode(self) -> None:
        """What runs while an asynchronous target computes the verify: the free drafters' asks and
        the controller's bookkeeping of the rounds held before this one (ggufspec.loop.late,
        ggufspec.loop.hold), which otherwise wait for the next priced round and add to it. Where
        nothing pays on a GPU most rounds are held, and that bookkeeping was most of what our
        Python a round cost over the target alone's (docs/gpu.md, fifth run). Decisions do not
        change: a hold reads none of it, and a priced round replays whatever is left first."""
        self._free.settle()
        if self.controller is not None:
            self.controller.replay()

    def _accept(self, draft_tokens: tuple[int, ...], q_rows: tuple) -> Verdict:
        if self.rule is AcceptRule.GREEDY:
            # row i's argmax only where the drafts before it were kept: n_accepted + 1 rows, not K + 1
            return accept_greedy(draft_tokens, _RowArgmax(self.target))
        rows = TargetRows(self.target, self.sampling)
        if self.rule is AcceptRule.REJECTION:
            return accept_rejection(draft_tokens, q_rows=q_rows, p_rows=rows, rng=self.rng,
                                    variant=self.speculative.variant)
        return accept_match(draft_tokens, p_rows=rows, rng=self.rng)

