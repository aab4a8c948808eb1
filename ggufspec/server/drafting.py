"""A request's drafters and draft length, within what the server loaded (the console's /draft and /k).

``draft`` names drafters the server loaded (its --draft: a draft model by file name or stem, or
"lookup"), in order; "none" (or ``[]``) runs the target alone; left out, all of them. ``draft_max``,
``draft_min``, ``fixed``, ``always_draft`` and ``accept`` are the CLI's flags of those names, over the
server's own (serve's flags), built by `SpeculativeSettings.from_request`: the same limits and the
same messages as ``ggufspec run``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ggufspec.errors import UserError
from ggufspec.loop.speculation import REQUEST_FIELDS, SpeculativeSettings
from ggufspec.server.adapter import PairInfo
from ggufspec.server.error_bodies import invalid
from ggufspec.server.schemas import Params

NONE = "none"
#: request fields checked by DraftLengthSettings, by the CLI flag its messages name first
_LENGTH_FIELDS = {"draft-max": "draft_max", "draft-min": "draft_min"}


@dataclass(frozen=True, kw_only=True)
class Drafting:
    """What one request drafts with."""

    drafters: tuple[str, ...] | None  # the drafters' names, in order; None: every one the server loaded
    speculative: SpeculativeSettings  # the server's, with the request's fields over them
    shown: str  # the response's speculative.draft: file names and/or "lookup" joined by "+", or "none"


def choose(body: Params, *, info: PairInfo, speculative: SpeculativeSettings) -> Drafting:
    """The request's drafting fields over the server's (`speculative`: serve's flags); 400 if out of bounds."""
    names = _drafters(body.draft, info=info)
    try:
        chosen = SpeculativeSettings.from_request(body.model_dump(include=set(REQUEST_FIELDS)), server=speculative)
    except UserError as exc:
        flag = str(exc).split(" ", 1)[0]
        raise invalid(str(exc), param=_LENGTH_FIELDS.get(flag)) from None
    files = dict(info.drafters)
    shown = info.draft_name if names is None else "+".join(files[n] for n in names) or NONE
    return Drafting(drafters=names, speculative=chosen, shown=shown)


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
