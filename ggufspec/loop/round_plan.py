"""A round's plan, before its verify: which drafter proposes and how many tokens (the controller's
choice, the free drafters asked before it or later), and the drafts themselves (a checked free
proposal, a free drafter's continuation of a model's full proposal). ggufspec.loop.round_runner
plays the round; it asks for the next round's plan early on an asynchronous target (`plan_ahead`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from ggufspec.loop.control import DraftController
from ggufspec.loop.drafters import Draft, Drafter
from ggufspec.loop.late import FreeView
from ggufspec.loop.rounds import Candidate, Choice
from ggufspec.loop.sampling import SamplingSettings
from ggufspec.loop.speculation import SpeculativeSettings
from ggufspec.loop.target import Target

_NO_DRAFT = Draft((), ())


@dataclass(slots=True)
class Drafted:
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


class RoundPlanner:
    """Plans one generation's rounds (`draft`), on its target, drafters and controller."""

    def __init__(
        self, *, target: Target, drafters: Sequence[Drafter], controller: DraftController | None,
        sampling: SamplingSettings, speculative: SpeculativeSettings, rng: np.random.Generator, sampled: bool,
        drafting: Callable[[], bool] | None = None,
    ) -> None:
        self.target, self.drafters, self.controller = target, tuple(drafters), controller
        self.by_name = {d.name: d for d in self.drafters}
        # each draft model as a candidate before its backlog is counted (what `DraftController.held` reads)
        self._uncounted = {d.name: Candidate(d.name, kv_shared=d.kv_shared) for d in self.drafters if not d.free}
        self._models = tuple(self._uncounted.values())
        self.free = FreeView(self.drafters, self.propose)
        # the grades of the free drafters' proposals, for a hold that stands whatever they propose;
        # only with a draft model among the candidates (a round held is then paused, proposal or not)
        self._grades = {d.name: d.grades for d in self.free.drafters} if self._uncounted else None
        self.sampling, self.rng, self.sampled = sampling, rng, sampled
        self.lengths = speculative.length
        self.drafting = drafting

    def draft(self, history: Sequence[int], remaining: int) -> Drafted:
        """Plan the round and draft its tokens: the chosen proposal (checked where the plan says),
        and a free drafter's continuation of a model's full proposal."""
        lengths = self.lengths
        draft_max = self._draft_max(remaining)
        if not self.drafters or (self.drafting is not None and draft_max > 0 and not self.drafting()):
            return Drafted()
        if draft_max <= 0:
            # one token left: a round of the target alone whatever the controller would say, and
            # a free measurement of its cost, a (it resets the retry of the target alone)
            return Drafted(choice=Choice(None, 0) if self.controller is not None else None)
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
            d = self.propose(self.by_name[choice.drafter], history, choice.draft_len)
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

    def _plan(self, history: Sequence[int], draft_max: int, remaining: int) -> Drafted:
        """The round's choice (and the free drafters' proposals, asked before it)."""
        r = Drafted()
        if self.controller is None:  # --fixed: the first drafter, draft_max every round
            r.choice = Choice(self.drafters[0].name, draft_max)
            return r
        limits = self._limits(draft_max, remaining)
        r, candidates = self._held(history, draft_max, limits)
        if candidates is None:
            return r
        if r.choice is None:  # a priced round: the draft models' backlogs count
            candidates = [c if c.free else Candidate(c.name, backlog=self.by_name[c.name].backlog(history),
                                                     kv_shared=c.kv_shared) for c in candidates]
            r.choice = self.controller.choose(drafters=candidates, **limits)
        r.paused = self._paused(r.choice, candidates)
        return r

    def plan_ahead(self, history: Sequence[int], token: int, remaining: int) -> Drafted | None:
        """The plan of the round after `history` + `token` (which may emit `remaining` tokens) if
        it runs the target alone whatever the free drafters would propose or as the hold says
        after asking them; None where it is priced (or drafts)."""
        if not self.drafters:
            return Drafted()
        draft_max = self._draft_max(remaining)
        if draft_max <= 0:
            return Drafted(choice=Choice(None, 0) if self.controller is not None else None)
        if self.controller is None or self.drafting is not None:
            return None
        r, candidates = self._held(history, draft_max, self._limits(draft_max, remaining), ahead=token)
        if candidates is None:
            return r
        if r.choice is None:
            return None
        r.paused = self._paused(r.choice, candidates)
        return r

    def _held(self, history: Sequence[int], draft_max: int, limits: dict, *,
              ahead: int | None = None) -> tuple[Drafted, list[Candidate] | None]:
        """The hold's answer for the round after `history` (and `ahead`, a token the engine appends
        to it next): where it stands whatever the free drafters propose, their asks kept for later
        (candidates None); else the free drafters asked now and the hold asked with them as
        candidates (the round's choice None where it does not stand: a priced round)."""
        assert self.controller is not None
        if self._grades is not None:  # held whatever the free drafters propose: ask them later
            choice = self.controller.held(drafters=self._models, grades=self._grades, **limits)
            if choice is not None:
                return Drafted(choice=choice, late=draft_max, paused=True), None
        seen: Sequence[int] = history
        if self.free.drafters:
            seen = self.free(history)
            if ahead is not None:
                seen.append(ahead)  # (the engine appends it to the history next: the free drafters' view is ahead)
        r = Drafted()
        candidates = self._candidates(r, seen, draft_max)
        r.choice = self.controller.held(drafters=candidates, **limits)
        return r, candidates

    def _draft_max(self, remaining: int) -> int:
        """The most tokens a round that may emit `remaining` tokens drafts (its verify fits one batch)."""
        return min(self.lengths.draft_max, remaining - 1, self.target.n_batch - 1)

    def _limits(self, draft_max: int, remaining: int) -> dict:
        """The controller's limits for a round of at most `draft_max` drafts and `remaining` tokens."""
        lengths = self.lengths
        return {"draft_max": draft_max, "draft_min": lengths.draft_min, "allow_none": not lengths.always_draft,
                "remaining": remaining}

    def _candidates(self, r: Drafted, seen: Sequence[int], draft_max: int) -> list[Candidate]:
        """Each drafter as a candidate: the free ones asked now (into `r.proposals`), a function
        of the history `seen` (asking is lossless); the draft models before their backlog is counted."""
        candidates = []
        for dr in self.drafters:
            if dr.free:
                p = r.proposals[dr.name] = self.propose(dr, seen, draft_max)
                candidates.append(Candidate(dr.name, free=True, match_len=len(p.tokens), grade=p.grade))
            else:
                candidates.append(self._uncounted[dr.name])
        return candidates

    def _paused(self, choice: Choice, candidates: Sequence[Candidate]) -> bool:
        """The target alone by choice, not for want of a proposal."""
        lo = max(1, self.lengths.draft_min)
        return choice.drafter is None and any(c.match_len is None or c.match_len >= lo for c in candidates)

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
            cont = d.continue_after(self.free(history), drafts, draft_len=room)
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
        head = self.propose(model, history, 1)
        if not head.tokens:  # the model declined (--draft-p-min): the proposal runs unchecked (q one-hot: exact)
            return proposal, choice, head.decode_s
        if head.tokens[0] == proposal.tokens[0]:
            return Draft(proposal.tokens, (head.q_rows[0], *proposal.q_rows[1:])), choice, head.decode_s
        rest = (self.propose(model, [*history, *head.tokens], choice.check_len - 1)
                if choice.check_len > 1 else Draft((), ()))
        merged = Draft(head.tokens + rest.tokens, head.q_rows + rest.q_rows, head.decode_s + rest.decode_s,
                       head.catchup_s + rest.catchup_s, head.decode_calls + rest.decode_calls,
                       head.catchup_tokens + rest.catchup_tokens, first_s=head.first_s)
        return merged, Choice(model.name, choice.check_len, extend=choice.extend), 0.0

    def propose(self, d: Drafter, history: Sequence[int], draft_len: int) -> Draft:
        return d.propose(history, draft_len=draft_len, draft_p_min=self.lengths.draft_p_min, sampled=self.sampled,
                         sampling=self.sampling, rng=self.rng)
