"""One round of the draft/verify loop, played: the engine's and the trace replay's.

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

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from ggufspec.loop import clock
from ggufspec.loop.acceptance import AcceptRule, Verdict, accept_greedy, accept_match, accept_rejection
from ggufspec.loop.control import DraftController
from ggufspec.loop.drafters import Draft, Drafter
from ggufspec.loop.late import FreeView, score
from ggufspec.loop.rounds import Candidate, Choice, Round, Source
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


_NO_DRAFT = Draft((), ())


@dataclass(slots=True)
class _Drafted:
    """What a round drafted, on its way to the verify."""

    choice: Choice | None = None  # None: nothing drafted and no controller asked
    proposals: dict[str, Draft] = field(default_factory=dict)  # free drafters' proposals, asked before the choice
    draft: Draft = _NO_DRAFT  # the chosen drafter's (timings included)
    tokens: tuple[int, ...] = ()  # to verify: the draft, then a free drafter's continuation
    q_rows: tuple = ()
    ext_by: str | None = None  # the free drafter whose continuation was appended
    ext_grade: int = 0
    ext_n: int = 0
    late: int = 0  # a held round's draft_max: its free drafters asked later (ggufspec.loop.late)
    check_s: float = 0.0
    paused: bool = False
    checked: bool = False
    check_failed: bool = False


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
        self.by_name = {d.name: d for d in self.drafters}
        # each draft model as a candidate before its backlog is counted (what `DraftController.held` reads)
        self._uncounted = {d.name: Candidate(d.name, kv_shared=d.kv_shared) for d in self.drafters if not d.free}
        self._models = tuple(self._uncounted.values())
        self._free = FreeView(self.drafters, self._propose)
        # the grades of the free drafters' proposals, for a hold that stands whatever they propose;
        # only with a draft model among the candidates (a round held is then paused, proposal or not)
        self._free_grades = {d.name: d.grades for d in self._free.drafters}
        self._grades = self._free_grades if self._uncounted else None
        self.sampling, self.speculative, self.rule, self.rng = sampling, speculative, rule, rng
        self.lengths = speculative.length
        self.drafting = drafting
        # rejection sampling needs the draft's q, so its drafts are sampled from q; greedy and
        # match take argmax drafts (q one-hot), as llama.cpp does
        self.sampled = rule is AcceptRule.REJECTION
        # a target whose decodes return before its device is done (`Target.asynchronous`): the
        # verify is launched, the bookkeeping held rounds left for later runs while it computes;
        # a round of the target alone that follows one is planned and launched at the end of it
        # (its input is that round's token), so that the engine's emission and the bookkeeping
        # run while the device computes it (`_ahead`)
        self._asynchronous = bool(getattr(target, "asynchronous", False))
        # the round launched: (its input token, when its plan began, when its decode was launched,
        # its plan, `away` then)
        self._flight: tuple[int, float, float, _Drafted, float] | None = None

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

    def _propose(self, d: Drafter, history: Sequence[int], draft_len: int) -> Draft:
        return d.propose(history, draft_len=draft_len, draft_p_min=self.lengths.draft_p_min, sampled=self.sampled,
                         sampling=self.sampling, rng=self.rng)

    def play(self, history: Sequence[int], remaining: int) -> tuple[Round, Emitted]:
        """One round after `history`, which may emit at most `remaining` tokens. A round of K drafts
        emits up to K + 1 and needs K + 1 free KV slots; its verify fits one batch."""
        if self._flight is not None:
            return self._land(history, remaining)
        target = self.target
        t_round = clock.now()
        r = self._draft(history, remaining)
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
        target = self.target
        target.logits(0)  # (waits for the device)
        verify_s = clock.now() - t
        verdict = Verdict(0, pick(target.logits(0), self.sampling, self.rng), False)
        return self._finish(history, remaining, r, verdict, t_round, verify_s)

    def _finish(self, history: Sequence[int], remaining: int, r: _Drafted, verdict: Verdict, t_round: float,
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
        r = self._plan_ahead(history, token, remaining - 1)
        if r is not None:
            self._flight = (token, t_round, clock.now(), r, self._away())
            self.target.decode([token], logits="all", wait=False)

    def _plan_ahead(self, history: Sequence[int], token: int, remaining: int) -> _Drafted | None:
        """The plan of the round after `history` + `token` (which may emit `remaining` tokens) if
        it runs the target alone whatever the free drafters would propose or as the hold says
        after asking them; None where it is priced (or drafts)."""
        if not self.drafters:
            return _Drafted()
        draft_max = min(self.lengths.draft_max, remaining - 1, self.target.n_batch - 1)
        if draft_max <= 0:
            return _Drafted(choice=Choice(None, 0) if self.controller is not None else None)
        if self.controller is None or self.drafting is not None:
            return None
        limits = self._limits(draft_max, remaining)
        if self._grades is not None:
            choice = self.controller.held(drafters=self._models, grades=self._grades, **limits)
            if choice is not None:
                return _Drafted(choice=choice, late=draft_max, paused=True)
        seen: Sequence[int] = history
        if self._free.drafters:
            seen = self._free(history)
            seen.append(token)  # (the engine appends it to the history next: the free drafters' view is ahead)
        r = _Drafted()
        candidates = self._candidates(r, seen, draft_max)
        r.choice = self.controller.held(drafters=candidates, **limits)
        if r.choice is None:
            return None
        r.paused = self._paused(r.choice, candidates)
        return r

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

    def _plan(self, history: Sequence[int], draft_max: int, remaining: int) -> _Drafted:
        """The round's choice (and the free drafters' proposals, asked before it)."""
        r = _Drafted()
        if self.controller is None:  # --fixed: the first drafter, draft_max every round
            r.choice = Choice(self.drafters[0].name, draft_max)
            return r
        limits = self._limits(draft_max, remaining)
        if self._grades is not None:  # held whatever the free drafters propose: ask them later
            r.choice = self.controller.held(drafters=self._models, grades=self._grades, **limits)
            if r.choice is not None:
                r.late, r.paused = draft_max, True
                return r
        seen = self._free(history) if self._free.drafters else history
        candidates = self._candidates(r, seen, draft_max)
        r.choice = self.controller.held(drafters=candidates, **limits)
        if r.choice is None:  # a priced round: the draft models' backlogs count
            candidates = [c if c.free else Candidate(c.name, backlog=self.by_name[c.name].backlog(history),
                                                     kv_shared=c.kv_shared) for c in candidates]
            r.choice = self.controller.choose(drafters=candidates, **limits)
        r.paused = self._paused(r.choice, candidates)
        return r

    def _limits(self, draft_max: int, remaining: int) -> dict:
        """The controller's limits for a round of at most `draft_max` drafts and `remaining` tokens."""
        lengths = self.lengths
        return {"draft_max": draft_max, "draft_min": lengths.draft_min, "allow_none": not lengths.always_draft,
                "remaining": remaining}

    def _candidates(self, r: _Drafted, seen: Sequence[int], draft_max: int) -> list[Candidate]:
        """Each drafter as a candidate: the free ones asked now (into `r.proposals`), a function
        of the history `seen` (asking is lossless); the draft models before their backlog is counted."""
        candidates = []
        for dr in self.drafters:
            if dr.free:
                p = r.proposals[dr.name] = self._propose(dr, seen, draft_max)
                candidates.append(Candidate(dr.name, free=True, match_len=len(p.tokens), grade=p.grade))
            else:
                candidates.append(self._uncounted[dr.name])
        return candidates

    def _paused(self, choice: Choice, candidates: Sequence[Candidate]) -> bool:
        """The target alone by choice, not for want of a proposal."""
        lo = max(1, self.lengths.draft_min)
        return choice.drafter is None and any(c.match_len is None or c.match_len >= lo for c in candidates)

    def _draft(self, history: Sequence[int], remaining: int) -> _Drafted:
        """Plan the round and draft its tokens: the chosen proposal (checked where the plan says),
        and a free drafter's continuation of a model's full proposal."""
        lengths = self.lengths
        draft_max = min(lengths.draft_max, remaining - 1, self.target.n_batch - 1)
        if not self.drafters or (self.drafting is not None and draft_max > 0 and not self.drafting()):
            return _Drafted()
        if draft_max <= 0:
            # one token left: a round of the target alone whatever the controller would say, and
            # a free measurement of its cost, a (it resets the retry of the target alone)
            return _Drafted(choice=Choice(None, 0) if self.controller is not None else None)
        r = self._plan(history, draft_max, remaining)
        choice = r.choice
        if choice is None or choice.drafter is None:
            return r
        d = r.proposals.get(choice.drafter)
        if d is not None:
            d = Draft(d.tokens[:choice.draft_len], d.q_rows[:choice.draft_len])
            if choice.check is not None and d.tokens:
                d, r.choice, r.check_s = self._checked(d, choice, self.by_name[choice.check], history)
                r.checked, r.check_failed = True, r.choice.check is None
        else:
            d = self._propose(self.by_name[choice.drafter], history, choice.draft_len)
        r.draft = d
        if len(d.tokens) < lengths.draft_min:
            return r  # too short to verify: the target alone (its drafting's seconds counted)
        r.tokens, r.q_rows = d.tokens, d.q_rows
        choice = r.choice
        if choice.extend is not None and choice.drafter not in r.proposals and len(d.tokens) == choice.draft_len:
            # a model's full proposal: a free drafter's continuation of it, as much as pays
            room = min(lengths.draft_extend, remaining - 1 - len(d.tokens), self.target.n_batch - 1 - len(d.tokens))
            r.ext_by, ext = self._extension(choice, d.tokens, history, room=room)
            if ext.tokens:
                r.tokens, r.q_rows = d.tokens + ext.tokens, d.q_rows + ext.q_rows
                r.ext_grade, r.ext_n = ext.grade, len(ext.tokens)
        return r

    def _accept(self, draft_tokens: tuple[int, ...], q_rows: tuple) -> Verdict:
        if self.rule is AcceptRule.GREEDY:
            # row i's argmax only where the drafts before it were kept: n_accepted + 1 rows, not K + 1
            return accept_greedy(draft_tokens, _RowArgmax(self.target))
        rows = TargetRows(self.target, self.sampling)
        if self.rule is AcceptRule.REJECTION:
            return accept_rejection(draft_tokens, q_rows=q_rows, p_rows=rows, rng=self.rng,
                                    variant=self.speculative.variant)
        return accept_match(draft_tokens, p_rows=rows, rng=self.rng)

    def _extension(self, choice: Choice, drafts: tuple[int, ...], history: Sequence[int], *,
                   room: int) -> tuple[str | None, Draft]:
        """(free drafter, its tokens) to append to the chosen model's full proposal `drafts`: a free
        drafter's continuation of history + drafts, as many tokens as pay for their verify rows
        (`Choice.extend`), at most `room`. Lossless: a function of the history and the drafts
        (q one-hot), so each position's q is still what drew its token."""
        if room <= 0 or choice.extend is None:
            return None, Draft((), ())
        for d in self.drafters:
            if not d.free:
                continue
            cont = d.continue_after(self._free(history), drafts, draft_len=room)
            e = choice.extend(choice.drafter, draft_len=len(drafts), free=d.name, grade=cont.grade,
                              match_len=len(cont.tokens))
            if e > 0:
                return d.name, Draft(cont.tokens[:e], cont.q_rows[:e], grade=cont.grade)
        return None, Draft((), ())

    def _checked(self, proposal: Draft, choice: Choice, model: Drafter,
                 history: Sequence[int]) -> tuple[Draft, Choice, float]:
        """A free drafter's proposal checked by draft model `model`'s first token (`Choice.check`):
        (the round's draft, its choice, the check's seconds). Where the two first tokens agree the
        proposal runs (check's seconds: the model's call), its first q row the model's: at T > 0
        that token is the model's draw, the rest of the proposal a function of it and the
        history, so each position's q is what drew it and rejection sampling stays exact. Where
        they differ the round is the model's, `choice.check_len` tokens from the one it drafted
        (its seconds the round's drafting)."""
        head = self._propose(model, history, 1)
        if not head.tokens:  # the model declined (--draft-p-min): the proposal runs unchecked (q one-hot: exact)
            return proposal, choice, head.decode_s
        if head.tokens[0] == proposal.tokens[0]:
            return Draft(proposal.tokens, (head.q_rows[0], *proposal.q_rows[1:])), choice, head.decode_s
        rest = (self._propose(model, [*history, *head.tokens], choice.check_len - 1)
                if choice.check_len > 1 else Draft((), ()))
        merged = Draft(head.tokens + rest.tokens, head.q_rows + rest.q_rows, head.decode_s + rest.decode_s,
                       head.catchup_s + rest.catchup_s, head.decode_calls + rest.decode_calls,
                       head.catchup_tokens + rest.catchup_tokens, first_s=head.first_s)
        return merged, Choice(model.name, choice.check_len, extend=choice.extend), 0.0
