"""Subcommands of the ggufspec CLI, one module each, and the model options they share."""

from __future__ import annotations

import argparse

from ggufspec.errors import UserError


def add_pair_argument(group: argparse._ArgumentGroup) -> None:
    """`--pair NAME`: a catalog pair (models/*.toml) instead of --target and --draft."""
    group.add_argument("--pair", metavar="NAME", help="target and draft of a known pair (see `ggufspec pairs`)")


def apply_pair(args: argparse.Namespace, *, drafts_extend: bool = False) -> None:
    """Fill `args.target` and `args.draft` from `--pair NAME`, if given.

    With `drafts_extend` (bench, whose --draft takes several), drafts named with --draft come
    after the pair's own; elsewhere --pair and --target/--draft are exclusive.

    Raises:
        UserError: an unknown pair, or --pair with --target (or with --draft where exclusive).
    """
    name = getattr(args, "pair", None)
    if not name:
        return
    if args.target is not None or (args.draft and not drafts_extend):
        raise UserError("--pair names both models; drop --target/--draft, or drop --pair")
    from ggufspec.catalog import get_pair

    entry = get_pair(name)
    args.target = entry.target
    args.draft = [entry.draft, *(args.draft or [])] if drafts_extend else entry.draft
