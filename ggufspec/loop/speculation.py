"""How drafts are sized and judged: the speculation settings (frozen), one door for every command.

One name per concept, from the flag to the loop: `--draft-max` -> `DraftLengthSettings.draft_max`
(the most tokens a round drafts), `--draft-min` -> `draft_min`, `--draft-p-min` -> `draft_p_min`,
`--draft-extend` -> `draft_extend` (lookup's tokens appended to a model's draft, beyond draft_max),
`--fixed` -> `fixed`, `--always-draft` -> `always_draft`, `--accept` -> `SpeculativeSettings.accept`,
`--variant` -> `variant`; `draft_len` is what one round asks for (chosen by ggufspec.loop.control,
or draft_max with --fixed); K only in the maths.

Every caller builds these through one of the builders here (pure: no argparse, no HTTP):

    SpeculativeSettings.from_options(...)    the command-line flags (ggufspec.commands.speculation_args
                                             parses argv and calls it: run, chat, serve, bench)
    SpeculativeSettings.from_request(...)    a server request's fields over the server's own
    SpeculativeSettings.after_slash(...)     a console command (/k N|auto, /accept RULE)
    SpeculativeSettings.with_length(...)     the same settings, some draft-length fields changed
                                             (the bench's configurations, a warm-up at fixed length)

One message per limit, whichever door the value came in by (the server maps the leading
`draft-max` / `draft-min` to the request field it names).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from ggufspec.errors import UserError
from ggufspec.loop.acceptance import AcceptRule, Variant
from ggufspec.loop.sampling import SamplingSettings
from ggufspec.settings import DRAFT_EXTEND, DRAFT_MAX, DRAFT_MAX_LIMIT

#: a request's drafting fields (ggufspec.server.schemas.Params) a server request may set; the
#: server's own --draft-p-min, --draft-extend and --variant are what it loaded and stay
REQUEST_FIELDS = ("draft_max", "draft_min", "fixed", "always_draft", "accept")


def draft_max_error(draft_max: int) -> UserError:
    """The one message for a draft_max out of [1, DRAFT_MAX_LIMIT]: --draft-max, /k, a request's draft_max."""
    return UserError(f"draft-max must be in [1, {DRAFT_MAX_LIMIT}], got {draft_max}; draft 1 to {DRAFT_MAX_LIMIT} "
                     "tokens a round (a verify is draft-max + 1 rows), or draft none to run the target alone")

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
            raise draft_max_error(self.draft_max)
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

    # ---- builders: every caller that makes these settings goes through one -------------------

    @classmethod
    def from_options(
        cls, *, draft_max: int = DRAFT_MAX, draft_min: int = 0, draft_p_min: float = 0.0,
        draft_extend: int = DRAFT_EXTEND, fixed: bool = False, always_draft: bool = False,
        accept: str | None = None, variant: str = Variant.LEVIATHAN.value,
    ) -> "SpeculativeSettings":
        """The settings the speculation flags name (--draft-max .. --variant), checked; UserError if bad."""
        return cls(
            accept=AcceptRule.parse(accept) if accept else None,
            variant=Variant.parse(variant),
            length=DraftLengthSettings(draft_max=draft_max, draft_min=draft_min, draft_p_min=draft_p_min,
                                       draft_extend=draft_extend, fixed=fixed, always_draft=always_draft),
        )

    @classmethod
    def from_request(cls, fields: Mapping[str, Any], *, server: "SpeculativeSettings") -> "SpeculativeSettings":
        """A server request's `REQUEST_FIELDS` (None or absent: the server's, `server`, its serve flags)
        over the server's settings. The request may move draft_max anywhere in [1, DRAFT_MAX_LIMIT],
        as `ggufspec run --draft-max` may: the verify of a long draft fits the batch the server
        loaded (the engine caps a round at n_batch - 1). UserError (the CLI's messages) if bad."""
        given = {name: fields.get(name) for name in REQUEST_FIELDS if fields.get(name) is not None}
        accept = given.pop("accept", None)
        chosen = server.with_length(**given)
        return chosen if accept is None else replace(chosen, accept=AcceptRule.parse(str(accept)))

    def after_slash(self, name: str, arg: str) -> "SpeculativeSettings":
        """These settings after a console command: `/k N` (draft N tokens every round: fixed,
        draft_max N), `/k auto` (the controller chooses, up to draft_max), `/accept RULE`.
        UserError if bad (these settings stay)."""
        if name == "k":
            if arg.strip().lower() == "auto":
                return self.with_length(fixed=False)
            try:
                draft_max = int(arg)
            except ValueError:
                raise UserError(f"/k takes a whole number or 'auto', got {arg!r}") from None
            if draft_max == 0:
                raise UserError("/k 0 drafts nothing; use /draft none for the target alone")
            if not 1 <= draft_max <= DRAFT_MAX_LIMIT:
                raise draft_max_error(draft_max)
            # a lower cap takes --draft-min down with it (a draft_min above draft_max is refused)
            return self.with_length(draft_max=draft_max, fixed=True, draft_min=min(self.length.draft_min, draft_max))
        if name == "accept":
            return replace(self, accept=AcceptRule.parse(arg))
        raise ValueError(f"/{name} is not a speculation setting")  # a bug in the caller, not user input

    def with_length(self, **changes: Any) -> "SpeculativeSettings":
        """The same settings with these DraftLengthSettings fields changed (checked again)."""
        return replace(self, length=replace(self.length, **changes))
