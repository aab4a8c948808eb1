"""How drafts are sized and judged: the speculation settings (frozen), one door for every command.

One name per concept, from the flag to the loop: `--draft-max` -> `DraftLengthSettings.draft_max`
(the most tokens a round drafts), `--draft-min` -> `draft_min`, `--draft-p-min` -> `draft_p_min`,
`--draft-extend` -> `draft_extend` (lookup's tokens appended to a model's draft, beyond draft_max),
`--fixed` -> `fixed`, `--always-draft` -> `always_draft`, `--accept` -> `SpeculativeSettings.accept`,
`--variant` -> `variant`; `draft_len` is what one round asks for (chosen by ggufspec.loop.control,
or draft_max with --fixed); K only in the maths.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ggufspec.errors import UserError
from ggufspec.loop.acceptance import AcceptRule, Variant
from ggufspec.loop.sampling import SamplingSettings
from ggufspec.settings import DRAFT_EXTEND, DRAFT_MAX, DRAFT_MAX_LIMIT


@dataclass(frozen=True, kw_only=True)
class DraftLengthSettings:
    """--draft-max, --draft-min, --draft-p-min, --draft-extend, --fixed and --always-draft."""

    draft_max: int = DRAFT_MAX  # most tokens one round drafts (the controller's largest K)
    draft_min: int = 0  # a shorter draft is not verified (the round runs the target alone)
    draft_p_min: float = 0.0  # confidence stop: stop drafting when the draft's top p falls below
    fixed: bool = False  # no controller: the first drafter drafts draft_max every round
    always_draft: bool = False  # the controller never chooses the target alone (K = 0)
    # most tokens of prompt lookup's continuation appended to a draft model's full proposal, where
    # the controller finds they pay for their verify rows (DraftController.extend; 0: never)
    draft_extend: int = DRAFT_EXTEND

    def __post_init__(self) -> None:
        if not 1 <= self.draft_max <= DRAFT_MAX_LIMIT:
            raise UserError(f"draft-max must be in [1, {DRAFT_MAX_LIMIT}], got {self.draft_max}")
        if not 0 <= self.draft_min <= self.draft_max:
            raise UserError(f"draft-min must be in [0, draft-max={self.draft_max}], got {self.draft_min}")
        if not 0.0 <= self.draft_p_min < 1.0:
            raise UserError(f"draft-p-min must be in [0, 1), got {self.draft_p_min}")
        if self.draft_extend < 0:
            raise UserError(f"draft-extend must be >= 0, got {self.draft_extend}")


@dataclass(frozen=True, kw_only=True)
class SpeculativeSettings:
    """How drafts are judged and sized."""

    accept: AcceptRule | None = None  # None: greedy at temperature 0, rejection otherwise
    variant: Variant = Variant.LEVIATHAN
    length: DraftLengthSettings = field(default_factory=DraftLengthSettings)

    def rule_for(self, sampling: SamplingSettings) -> AcceptRule:
        if sampling.greedy:
            return AcceptRule.GREEDY  # every rule reduces to greedy on one-hot distributions
        if self.accept is None:
            return AcceptRule.REJECTION
        if self.accept is AcceptRule.GREEDY:
            raise UserError("--accept greedy needs --temp 0; use rejection or match when sampling")
        return self.accept
