"""Hub names: a repo id and a revision are checked before they touch the network or the cache."""

from __future__ import annotations

import re

from ggufspec.errors import UserError

# What `git check-ref-format` refuses anywhere in a branch or tag name (a commit hash passes).
_REV_FORBIDDEN = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]|\.\.|@\{|//")


def check_repo_id(repo_id: str, *, ref: str | None = None) -> None:
    """Refuse a repo name the Hub cannot have (``huggingface_hub.utils.validate_repo_id``'s rules).

    Args:
        repo_id: ``owner/name``.
        ref: the model reference it came from, for the message.

    Raises:
        UserError: not ``owner/name`` of letters, digits, ``-``, ``_``, ``.`` (no ``--``, ``..``, ...).
    """
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        if repo_id.count("/") != 1:
            raise HFValidationError(f"Repo id must be in the form 'namespace/repo_name': '{repo_id}'.")
        validate_repo_id(repo_id)
    except HFValidationError as exc:
        where = f" in {ref!r}" if ref else ""
        raise UserError(f"bad repo name {repo_id!r}{where}: {exc} Write owner/repo as huggingface.co "
                        "shows it") from None


def check_revision(revision: str, *, ref: str | None = None) -> None:
    """Refuse a revision that is no branch, tag or commit name git allows.

    A revision becomes a path under the cache's ``refs/`` folder, so besides git's rules (no
    ``..``, no control characters, space or any of ``~^:?*[\\``, no ``@{``, no component starting
    with ``.`` or ending with ``.lock``, no ``//``, not ending with ``/`` or ``.``) it must not start
    with ``/``: it can never name a file outside the cache.

    Args:
        revision: a branch, tag or commit.
        ref: the model reference it came from, for the message.

    Raises:
        UserError: the revision breaks one of these rules.
    """
    parts = revision.split("/")
    if (not revision or revision == "@" or _REV_FORBIDDEN.search(revision) or revision.startswith("/")
            or revision.endswith(("/", ".")) or any(p.startswith(".") or p.endswith(".lock") for p in parts)):
        where = f" in {ref!r}" if ref else ""
        raise UserError(f"bad revision {revision!r}{where}: a revision is a branch, tag or commit hash as git allows "
                        "(no '..', no leading '/', no spaces, control characters or any of ~^:?*[\\); "
                        "write e.g. @main, @v1.0 or @<40-hex commit>")
