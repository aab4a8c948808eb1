"""A round as records: what the controller may pick, what it chose, and what happened (pure).

One round: the controller gets the `Candidate`s and returns a `Choice` (its plan of the round);
the round runs (ggufspec.loop.round_runner); the `Round` record of what happened goes once to the
controller (`DraftController.observe`) and once to the generation's tally (ggufspec.loop.stats).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Callable, Mapping

NONE = "none"  # the source of a round that runs the target alone


class Source(str, enum.Enum):
    """Where an emitted token came from."""

    DRAFT = "draft"  # proposed by the drafter, accepted by the target
    CORRECTION = "correction"  # the target's token replacing a rejected draft token
    BONUS = "bonus"  # the target's extra token after a fully accepted draft
    TARGET = "target"  # the target alone (prompt's first token, or a round with no draft)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A drafter the controller may pick this round. `free`: costs nothing to query (lookup);
    `match_len`: a free drafter's proposal length this round (0: nothing to propose); `backlog`:
    tokens a draft model missed (rounds it sat out) and must catch up on first; `kv_shared`: a
    draft model that imports the target's KV cache (ggufspec.loop.kvshare): never behind, so
    leaving it and coming back cost nothing."""

    name: str
    free: bool = False
    match_len: int | None = None
    backlog: int = 0  # history tokens a draft model must decode before it can draft (catch-up)
    kv_shared: bool = False
    grade: int = 0  # a free drafter's class of this round's proposal (lookup: its n-gram length)


# (draft model, its draft_len, free drafter, grade, match_len) -> tokens of the free drafter's
# continuation to append to the model's full proposal (DraftController.extend)
Extension = Callable[..., int]


@dataclass(frozen=True, slots=True)
class Choice:
    """The plan of a round: `drafter` (None: the target alone) proposes `draft_len` tokens."""

    drafter: str | None
    draft_len: int
    retry: bool = False  # chosen by the retry schedule, not by the estimates
    grade: int = 0  # the chosen free drafter's grade this round (Candidate.grade)
    # a free drafter's proposal checked first by draft model `check`'s first token: where they
    # differ, the round is that model's, `check_len` tokens (`DraftController._check`)
    check: str | None = None
    check_len: int = 0
    # how much of a free drafter's continuation a model's full proposal takes, priced with the
    # estimates this plan was made with; None: no extension this round (ggufspec.loop.round_runner)
    extend: Extension | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Scored:
    """A free drafter's proposal that did not run, scored against the tokens the target emitted."""

    proposed: int  # tokens it proposed
    matched: int  # of them, the prefix equal to the emitted tokens
    grade: int = 0  # its grade (Candidate.grade)


@dataclass(frozen=True, slots=True, kw_only=True)
class Round:
    """What one round did and cost. `choice`: what ran (None: nothing drafted and no controller
    asked); `drafted` tokens were verified, `accepted` kept, `emitted` came out (accepted + 1).

    Seconds: `round_s` is the round's drafting, verify and our Python, not a draft model's
    catch-up (`catchup_s`, on `catchup_tokens` tokens of history it missed); `draft_s`, of
    `round_s`, the chosen drafter's drafting, `draft_first_s` its first of `draft_calls` calls
    (None: not told: drafting is then priced per drafted token); `check_s`, of `round_s`, a draft
    model checking the free proposal that ran (`Choice.check`); `verify_s` the target's decode.
    `extended`: of `drafted`, the last tokens free drafter `extended_by` appended to a model's
    proposal (its match of `extended_grade`). `scored`: the free drafters not chosen, each
    proposal scored against the emitted tokens. `free`: the drafter that ran is free."""

    choice: Choice | None = None
    drafted: int = 0
    accepted: int = 0
    emitted: int = 1
    round_s: float = 0.0
    draft_s: float = 0.0
    free: bool = False
    scored: Mapping[str, Scored] = field(default_factory=dict)
    catchup_tokens: int = 0
    catchup_s: float = 0.0
    draft_first_s: float | None = None
    draft_calls: int = 0
    check_s: float = 0.0
    extended: int = 0
    extended_by: str | None = None
    extended_grade: int = 0
    verify_s: float = 0.0
    paused: bool = False  # the target alone by the controller's choice, not for want of a proposal
    checked: bool = False  # a free proposal checked by a draft model's first token
    check_failed: bool = False  # ... that differed: the model's round ran instead

    @property
    def source(self) -> str:
        """The drafter that ran, or NONE."""
        return self.choice.drafter if self.choice is not None and self.choice.drafter is not None else NONE

    @property
    def own(self) -> int:
        """Drafted tokens the chosen drafter proposed (the rest: an extension)."""
        return self.drafted - self.extended
