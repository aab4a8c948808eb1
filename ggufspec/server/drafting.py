"""A request's drafters and draft length, within what the server loaded (the console's /draft and /k).

``draft`` names drafters the server loaded (its --draft: a draft model by file name or stem, or
"lookup"), in order; "none" (or ``[]``) runs the target alone; left out, all of them. ``draft_max``,
``draft_min``, ``fixed`` and ``always_draft`` are the CLI's flags of those names, checked by
`DraftLengthSettings`: the same limits and the same messages as ``ggufspec run``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ggufspec.errors import UserError
from ggufspec.loop.speculation import DraftLengthSettings
from ggufspec.server.adapter import PairInfo
from ggufspec.server.error_bodies import invalid
from ggufspec.server.schemas import Params

NONE = "none"
#: request fields checked by DraftLengthSettings, by the CLI flag its messages name
_LENGTH_FIELDS = {"draft-max": "draft_max", "draft-min": "draft_min"}


@dataclass(frozen=True, kw_only=True)
class Drafting:
    """What one request drafts with."""

    drafters: tuple[str, ...] | None  # the drafters' names, in order; None: every one the server loaded
    length: DraftLengthSettings
    shown: str  # the response's speculative.draft: file names and/or "lookup" joined by "+", or "none"


def choose(body: Params, *, info: PairInfo, length: DraftLengthSettings) -> Drafting:
    """The request's drafting fields over the server's (`length`: serve's flags); 400 if out of bounds."""
    names = _drafters(body.draft, info=info)
    try:
        chosen = replace(
            length,
            draft_max=length.draft_max if body.draft_max is None else body.draft_max,
            draft_min=length.draft_min if body.draft_min is None else body.draft_min,
            fixed=length.fixed if body.fixed is None else body.fixed,
            always_draft=length.always_draft if body.always_draft is None else body.always_draft,
        )
    except UserError as exc:
        flag = str(exc).split(" ", 1)[0]
        raise invalid(str(exc), param=_LENGTH_FIELDS.get(flag)) from None
    files = dict(info.drafters)
    shown = info.draft_name if names is None else "+".join(files[n] for n in names) or NONE
    return Drafting(drafters=names, length=chosen, shown=shown)


def _drafters(draft: str | list[str] | None, *, info: PairInfo) -> tuple[str, ...] | None:
    if draft is None:
        return None
    asked = [draft] if isinstance(draft, str) else list(draft)
    if asked == [NONE]:
        return ()
    by_ref = {name: name for name, _ in info.drafters} | {file: name for name, file in info.drafters}
    loaded = ", ".join(file for _, file in info.drafters) or "none"
    names: list[str] = []
    for ref in asked:
        if ref == NONE:
            raise invalid("draft 'none' (the target alone) cannot be combined with drafters", param="draft")
        name = by_ref.get(ref)
        if name is None:
            raise invalid(f"draft '{ref}' is not loaded on this server; it has: {loaded} "
                          "(or 'none': the target alone); restart it with --draft to add one", param="draft")
        if name in names:
            raise invalid(f"two drafters are named {name!r}; give each --draft once", param="draft")
        names.append(name)
    return tuple(names)
