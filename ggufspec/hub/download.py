"""Fetching a model's files into the Hugging Face cache and verifying them.

``hf_hub_download`` fetches each file (progress bars, ``HF_TOKEN``, redirects, in-call resume with
a ``Range`` request; a file appears in the cache only once complete). On top of that: every shard
of a split model, first shard first; each new download's size and LFS sha256 checked
(``huggingface_hub`` checks only the size), cached files re-hashed on demand; a mismatch deletes
the blob, never handing it back.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from ggufspec.errors import UserError
from ggufspec.hub.env import COMMIT, is_offline
from ggufspec.hub.failures import user_error
from ggufspec.hub.listing import RepoListing, list_repo
from ggufspec.hub.quants import QuantFiles, check_complete, gguf_quant_files, pick_quant_files
from ggufspec.models.shards import split_info


@dataclass(frozen=True)
class HubModel:
    """A model fetched from the Hub: local paths of all its files, first shard first."""

    repo_id: str
    revision: str
    commit: str | None
    files: tuple[str, ...]  # paths in the repo
    paths: tuple[Path, ...]  # local paths in the Hugging Face cache
    sizes: tuple[int, ...]
    sha256: tuple[str | None, ...]  # digests computed during this call (None: not hashed this time)


def fetch(
    repo_id: str,
    *,
    quant: str | None = None,
    filename: str | None = None,
    revision: str | None = None,
    offline: bool = False,
    progress: bool = True,
    verify: bool = False,
) -> HubModel:
    """Download (or find in the cache) a GGUF model of a Hub repo, with all its shards.

    Args:
        repo_id: ``owner/name``.
        quant: pick the file carrying this quant (``Q4_K_M``); ignored when ``filename`` is given.
        filename: an exact path in the repo; a shard stands for its whole split model.
        revision: branch, tag or commit; None for ``main``.
        offline: cache only (``local_files_only=True``); ``HF_HUB_OFFLINE=1`` does the same.
        progress: show ``huggingface_hub``'s progress bars.
        verify: also hash files that were already cached (new downloads are always hashed).

    Returns:
        Local paths, sizes and the sha256 digests computed.

    Raises:
        UserError: see ``list_repo`` and ``pick_quant_files``; gated repo; file missing; download
            incomplete or corrupted (the bad file is deleted).
    """
    listing = list_repo(repo_id, revision=revision, offline=offline)
    try:
        if filename is not None:
            variant = _variant_of_file(listing, filename)
        else:
            variant = pick_quant_files(listing.paths, quant, repo_id=repo_id)
    except UserError as exc:
        if listing.from_cache:  # say that only the cached files were considered
            raise UserError(f"{exc} (listing the local cache only: offline, or the Hub is unreachable)") from None
        raise
    cache_only = is_offline(offline) or listing.from_cache
    paths: list[Path] = []
    sizes: list[int] = []
    digests: list[str | None] = []
    for path_in_repo in variant.files:
        local, size, digest = _fetch_file(listing, path_in_repo, cache_only=cache_only,
                                          progress=progress, verify=verify)
        paths.append(local)
        sizes.append(size)
        digests.append(digest)
    return HubModel(repo_id, listing.revision, listing.commit, variant.files, tuple(paths),
                    tuple(sizes), tuple(digests))


def _variant_of_file(listing: RepoListing, filename: str) -> QuantFiles:
    if listing.get(filename) is None:
        models = [v.first for v in gguf_quant_files(listing.paths)]
        shown = ", ".join(models[:12]) + (f", ... ({len(models)} in all)" if len(models) > 12 else "")
        raise UserError(f"{filename} is not in {listing.repo_id}@{listing.revision}; its GGUF files: {shown or 'none'}")
    info = split_info(filename)
    if info is None or info[2] <= 1:
        return QuantFiles((filename,), 1)
    variant = next(v for v in gguf_quant_files(listing.paths) if filename in v.files)
    return check_complete(variant, listing.repo_id)


def _quiet_tqdm() -> type:
    """A tqdm class that shows nothing, for ``progress=False``."""
    from tqdm.auto import tqdm

    class QuietTqdm(tqdm):  # type: ignore[misc]
        def __init__(self, *args: object, **kwargs: object) -> None:
            kwargs.pop("name", None)
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)

    return QuietTqdm


def _fetch_file(listing: RepoListing, path_in_repo: str, *, cache_only: bool, progress: bool,
                verify: bool) -> tuple[Path, int, str | None]:
    from huggingface_hub import hf_hub_download, try_to_load_from_cache

    repo_id = listing.repo_id
    expected = listing.get(path_in_repo)
    assert expected is not None
    was_cached = listing.commit is not None and isinstance(
        try_to_load_from_cache(repo_id, path_in_repo, revision=listing.commit), str)
    # Cache-only: pin the commit we listed. Online: ask for the revision as given, so that
    # huggingface_hub records refs/<revision> in the cache and offline runs find it later.
    revision = listing.commit if cache_only and listing.commit else listing.revision
    try:
        local = Path(hf_hub_download(repo_id, path_in_repo, revision=revision, local_files_only=cache_only,
                                     tqdm_class=None if progress else _quiet_tqdm()))
    except Exception as exc:  # noqa: BLE001 - mapped or re-raised
        raise user_error(exc, repo_id=repo_id, revision=listing.revision, filename=path_in_repo,
                          offline=cache_only) from exc

    commit = _snapshot_commit(local)
    if not cache_only and commit and listing.commit and commit != listing.commit:
        # The repo moved between listing and download: check against what was downloaded.
        expected = list_repo(repo_id, revision=commit).get(path_in_repo) or expected

    size = local.stat().st_size
    if expected.size is not None and size != expected.size:
        _discard(local)
        raise UserError(f"{repo_id}/{path_in_repo} has {size} bytes but the Hub lists {expected.size}; "
                        "the cached file was removed, run the command again")
    digest: str | None = None
    if expected.sha256 and (verify or not was_cached):
        digest = sha256_file(local)
        if digest != expected.sha256.lower():
            _discard(local)
            raise UserError(f"{repo_id}/{path_in_repo} is corrupted: sha256 {digest[:16]}... but the Hub lists "
                            f"{expected.sha256[:16]}...; the file was removed, run the command again")
    return local, size, digest


def _snapshot_commit(local: Path) -> str | None:
    parts = local.parts
    if "snapshots" in parts:
        i = len(parts) - 1 - parts[::-1].index("snapshots")
        if i + 1 < len(parts) and COMMIT.match(parts[i + 1]):
            return parts[i + 1]
    return None


def _discard(local: Path) -> None:
    """Remove a bad cached file: the blob and the snapshot link to it."""
    blob = Path(os.path.realpath(local))
    for p in (blob, local):
        try:
            p.unlink()
        except FileNotFoundError:
            pass


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file (the one definition: Hub checks, ``pull``, embedded-model cache names)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()
