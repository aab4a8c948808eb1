"""The speculation flags, one definition for every command that generates (run, chat, serve, bench),
and the one door from parsed argv to `SpeculativeSettings` (ggufspec.loop.speculation).

Each command reads them as its own: run and chat for the generation they run (chat's /k and /accept
change them live), serve for the server's defaults that a request's draft_max, draft_min, fixed,
always_draft and accept fields override, bench for its default configuration (ggufspec.bench.configs).
Limits and messages are the dataclasses' (settings.DRAFT_MAX_LIMIT ...), checked by
`speculative_settings` before anything loads.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ggufspec.settings import DRAFT_EXTEND, DRAFT_MAX, DRAFT_MAX_LIMIT

if TYPE_CHECKING:
    from ggufspec.loop.speculation import SpeculativeSettings

#: the flags `add_speculation_arguments` adds, by their argparse dest
FLAGS = ("draft_max", "draft_min", "draft_p_min", "draft_extend", "fixed", "always_draft", "accept", "variant")


def add_speculation_arguments(group: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """--draft-max, --draft-min, --draft-p-min, --draft-extend, --fixed, --always-draft, --accept, --variant."""
    group.add_argument("--draft-max", type=int, default=DRAFT_MAX, metavar="N",
                       help=f"most tokens drafted per round, 1 to {DRAFT_MAX_LIMIT} (default {DRAFT_MAX})")
    group.add_argument("--draft-min", type=int, default=0, metavar="N",
                       help="skip drafts shorter than this (default 0)")
    group.add_argument("--draft-p-min", type=float, default=0.0, metavar="P",
                       help="stop drafting when the draft's top probability < P (default 0: never)")
    group.add_argument("--draft-extend", type=int, default=DRAFT_EXTEND, metavar="N",
                       help="most tokens of prompt lookup's continuation appended to a draft model's full proposal, "
                            "where they pay for their verify rows (default %(default)s; 0: never)")
    group.add_argument("--fixed", action="store_true",
                       help="the first drafter drafts --draft-max tokens every round (default: the controller chooses)")
    group.add_argument("--always-draft", action="store_true",
                       help="the controller never runs the target alone, even when it measures that drafting loses")
    group.add_argument("--accept", default=None, metavar="RULE",
                       help="greedy | rejection | match (default: greedy at temp 0, else rejection)")
    group.add_argument("--variant", default="leviathan", metavar="NAME", help="rejection variant: leviathan | chen")


def speculative_settings(args: argparse.Namespace) -> "SpeculativeSettings":
    """The speculation flags of parsed argv, checked (UserError: one line, before anything loads)."""
    from ggufspec.loop.speculation import SpeculativeSettings

    return SpeculativeSettings.from_options(**{name: getattr(args, name) for name in FLAGS})
