"""Which target and drafters a command, a request or a library call means (pure).

One resolver for `run`, `serve`, `plan`, `bench` and `load_pair`, so `--pair`, `--target`,
`--draft REF|lookup|none` and the embedded default mean the same everywhere:

    nothing named              -> the embedded default target, its draft model and prompt lookup
    --pair NAME                -> the catalog pair's target and draft (bench: more --draft after it)
    --target only              -> the target alone (bench: prompt lookup, something to measure)
    --draft only               -> the embedded default target with that drafter
    --draft none               -> the target alone
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ggufspec.errors import UserError
from ggufspec.models.catalog import get_pair
from ggufspec.models.embedded import DEFAULT_DRAFT, DEFAULT_TARGET

LOOKUP = "lookup"  # prompt lookup: drafts copied from the history, no second model
NONE = "none"  # no drafter: the target alone


@dataclass(frozen=True, kw_only=True)
class PairRefs:
    """A target reference and its drafters: model references or LOOKUP; () = the target alone."""

    target: str
    drafts: tuple[str, ...]

    @property
    def draft(self) -> str | None:
        """The first (default) drafter, or None for the target alone."""
        return self.drafts[0] if self.drafts else None


def resolve_pair_refs(
    *,
    target: str | Path | None = None,
    draft: str | Path | Sequence[str | Path] | None = None,
    pair: str | None = None,
    extra_drafts: bool = False,
    target_only_drafts: Sequence[str] = (),
) -> PairRefs:
    """Resolve what the user named into a target and its drafters.

    Args:
        target: a model reference, or None.
        draft: one reference, several (bench), "lookup", "none", or None (nothing said).
        pair: a catalog pair name (`ggufspec pairs`), or None.
        extra_drafts: with `pair`, drafts named too come after the pair's own (bench); else
            `pair` and `draft` are exclusive.
        target_only_drafts: the drafters when only a target is named (bench: lookup).

    Raises:
        UserError: an unknown pair, or a pair named together with a target (or a draft).
    """
    drafts = _draft_list(draft)
    if pair:
        if target is not None or (drafts is not None and not extra_drafts):
            raise UserError("--pair names both models; drop --target/--draft, or drop --pair")
        entry = get_pair(pair)
        return PairRefs(target=entry.target, drafts=_dedupe([entry.draft, *(drafts or [])]))
    if target is None:
        return PairRefs(target=DEFAULT_TARGET, drafts=_dedupe([DEFAULT_DRAFT, LOOKUP] if drafts is None else drafts))
    return PairRefs(target=str(target), drafts=_dedupe(list(target_only_drafts) if drafts is None else drafts))


def _draft_list(draft: str | Path | Sequence[str | Path] | None) -> list[str] | None:
    if draft is None:
        return None
    items = [draft] if isinstance(draft, (str, Path)) else list(draft)
    names = [str(d).strip() for d in items]
    if any(not n for n in names):
        raise UserError("an empty --draft; give a model reference, 'lookup' or 'none'")
    if NONE in names:
        if len(names) > 1:
            raise UserError("--draft none means the target alone; drop the other --draft")
        return []
    return names


def _dedupe(names: Sequence[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(names))
