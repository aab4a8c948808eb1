"""Listing a repo's files (path, size, LFS sha256) from the Hub, or from the local cache.

``HfApi.model_info(files_metadata=True)`` online; the cached snapshot offline (``offline=True``
or ``HF_HUB_OFFLINE=1``) or when the Hub cannot be reached.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from ggufspec.errors import UserError
from ggufspec.hub.env import COMMIT, SHA256, hub_endpoint, is_offline, storage_folder
from ggufspec.hub.failures import failure_reason, is_unreachable, user_error
from ggufspec.hub.names import check_repo_id, check_revision

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RepoFile:
    """One file of a repo: its path, size and LFS sha256 (None for files stored in git)."""

    path: str
    size: int | None
    sha256: str | None


@dataclass(frozen=True)
class RepoListing:
    """A repo's files at one revision, from the Hub or from the local cache."""

    repo_id: str
    revision: str
    commit: str | None
    files: tuple[RepoFile, ...]
    from_cache: bool

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(f.path for f in self.files)

    def get(self, path: str) -> RepoFile | None:
        return next((f for f in self.files if f.path == path), None)



def _cached_listing(repo_id: str, revision: str) -> RepoListing | None:
    """The files of ``repo_id`` at ``revision`` that the local cache holds, or None."""
    storage = storage_folder(repo_id)
    commit: str | None = revision if COMMIT.match(revision) else None
    if commit is None:
        ref = storage / "refs" / revision
        try:
            commit = ref.read_text().strip()
        except OSError:
            return None
        if not COMMIT.match(commit):  # a refs file holds a commit hash, nothing else
            return None
    snapshot = storage / "snapshots" / commit
    if not snapshot.is_dir():
        return None
    files = []
    for p in sorted(snapshot.rglob("*")):
        if not p.is_file():
            continue
        blob = Path(os.path.realpath(p)).name  # the blob of an LFS file is named by its sha256
        files.append(RepoFile(p.relative_to(snapshot).as_posix(), p.stat().st_size,
                              blob if SHA256.match(blob) else None))
    return RepoListing(repo_id, revision, commit, tuple(files), from_cache=True)


def list_repo(repo_id: str, *, revision: str | None = None, offline: bool = False) -> RepoListing:
    """List a model repo's files with sizes and LFS sha256.

    Asks the Hub (``HfApi.model_info(files_metadata=True)``); offline (``offline=True`` or
    ``HF_HUB_OFFLINE``), or when the Hub cannot be reached, lists the cached snapshot instead.

    Args:
        repo_id: ``owner/name``.
        revision: branch, tag or commit; None for ``main``.
        offline: use the local cache only.

    Returns:
        The listing; ``from_cache`` says where it came from.

    Raises:
        UserError: repo or revision not found, access refused, Hub unreachable and nothing cached.
    """
    check_repo_id(repo_id)
    rev = revision or "main"
    check_revision(rev)
    if is_offline(offline):
        cached = _cached_listing(repo_id, rev)
        if cached is None:
            raise UserError(f"{repo_id}@{rev} is not in the Hugging Face cache ({storage_folder(repo_id).parent}) "
                            "and offline mode is on (--offline or HF_HUB_OFFLINE=1); "
                            "run `ggufspec pull` with network access first")
        return cached
    from huggingface_hub import HfApi

    try:
        info = HfApi().model_info(repo_id, revision=revision, files_metadata=True)
    except Exception as exc:  # noqa: BLE001 - mapped or re-raised below
        if is_unreachable(exc):
            cached = _cached_listing(repo_id, rev)
            if cached is not None:
                log.warning("the Hugging Face Hub at %s cannot be reached (%s); using the cached %s@%s",
                            hub_endpoint(), type(exc).__name__, repo_id, rev)
                return cached
            raise UserError(f"cannot reach the Hugging Face Hub at {hub_endpoint()} ({failure_reason(exc)}) and "
                            f"{repo_id}@{rev} is not in the cache; check the network (and HF_ENDPOINT)") from exc
        raise user_error(exc, repo_id=repo_id, revision=rev) from exc
    files = tuple(
        RepoFile(s.rfilename, s.lfs.size if s.lfs else s.size, s.lfs.sha256 if s.lfs else None)
        for s in (info.siblings or ())
    )
    return RepoListing(repo_id, rev, info.sha, files, from_cache=False)
