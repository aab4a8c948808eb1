"""GGUF models from the Hugging Face Hub: pick a quant, fetch every shard, verify, cache.

All HTTP goes through ``huggingface_hub``: ``HfApi.model_info(files_metadata=True)`` lists the
repo (file names, sizes, LFS sha256) and ``hf_hub_download`` fetches each file into the standard
Hugging Face cache (``HF_HUB_CACHE``), with its own progress bars, ``HF_TOKEN``, ``HF_ENDPOINT``,
revisions, redirects, and in-call resume: a connection dropped mid-file is retried with a ``Range``
request, and the file only appears in the cache once complete (a process-unique ``.incomplete``
file is renamed into place). On top of that this module:

* picks the file like llama.cpp's ``-hf owner/repo:QUANT``: the GGUF whose name carries the quant
  as a token (case-insensitive, bounded by ``-``, ``.`` or ``/``), skipping ``mmproj``/``imatrix``
  files; with no quant, the only model, else Q4_K_M, else Q8_0. An ambiguous or missing quant is a
  ``UserError`` listing what the repo has;
* fetches every shard of a split model (``-00001-of-00003.gguf``), first shard first;
* verifies each file's size and LFS sha256 (``huggingface_hub`` checks only the size) on every new
  download, and on demand for cached files; a mismatch deletes the blob, never handing it back;
* works from the cache alone with ``offline=True`` or ``HF_HUB_OFFLINE=1``
  (``local_files_only=True``), and falls back to the cache when the Hub cannot be reached;
* turns 401/403 (gated), 404 (repo, revision, file) and connection failures into one ``UserError``.
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from ggufspec.errors import UserError
from ggufspec.shards import split_info

__all__ = [
    "DEFAULT_QUANTS",
    "HubModel",
    "RepoFile",
    "RepoListing",
    "QuantFiles",
    "available_quants",
    "check_repo_id",
    "check_revision",
    "fetch",
    "gguf_quant_files",
    "list_repo",
    "pick_quant_files",
    "sha256_file",
    "split_info",
]

log = logging.getLogger(__name__)

#: Tried in order when a ref names no quant and the repo holds several models (llama.cpp's order).
DEFAULT_QUANTS = ("Q4_K_M", "Q8_0")

_QUANT_LABEL = re.compile(
    r"(?:^|[-._])((?:UD-)?(?:I?Q\d+(?:_[A-Z0-9]+)*|TQ\d_\d|BF16|F16|F32|FP16|FP32|MXFP4(?:_MOE)?))$",
    re.IGNORECASE,
)
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
# What `git check-ref-format` refuses anywhere in a branch or tag name (a commit hash passes).
_REV_FORBIDDEN = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]|\.\.|@\{|//")


# --------------------------------------------------------------------------- names


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


# --------------------------------------------------------------------------- choosing a file


def _is_model_file(path: str) -> bool:
    name = path.rsplit("/", 1)[-1].lower()
    return name.endswith(".gguf") and "mmproj" not in name and "imatrix" not in name


@dataclass(frozen=True)
class QuantFiles:
    """One model in a repo: a single GGUF file, or all shards of a split one (first shard first)."""

    files: tuple[str, ...]
    count: int  # shards the name announces (1 for a single file)

    @property
    def first(self) -> str:
        return self.files[0]

    @property
    def stem(self) -> str:
        """The path without ``.gguf`` and without the shard suffix."""
        info = split_info(self.first)
        return info[0] if info else self.first[: -len(".gguf")]

    @property
    def quant(self) -> str:
        """The quant label the name carries (``Q4_K_M``, ``UD-Q4_K_XL``, ``F16``...), upper case."""
        name = self.stem.rsplit("/", 1)[-1]
        m = _QUANT_LABEL.search(name)
        if m:
            return m[1].upper()
        tail = re.search(r"[-.]([A-Za-z0-9_]+)$", name)  # llama.cpp's fallback: the last name part
        return tail[1].upper() if tail else name

    @property
    def missing(self) -> tuple[int, ...]:
        """Shard numbers the repo does not have."""
        have = {split_info(f)[1] for f in self.files if split_info(f)}  # type: ignore[index]
        return tuple(n for n in range(1, self.count + 1) if n not in have) if self.count > 1 else ()


def gguf_quant_files(paths: Iterable[str]) -> tuple[QuantFiles, ...]:
    """Group a repo's file paths into models: shards of one split model become one ``QuantFiles``."""
    singles: list[QuantFiles] = []
    groups: dict[tuple[str, int], list[tuple[int, str]]] = {}
    for path in paths:
        if not _is_model_file(path):
            continue
        info = split_info(path)
        if info is None or info[2] <= 1:
            singles.append(QuantFiles((path,), 1))
        else:
            prefix, no, count = info
            groups.setdefault((prefix, count), []).append((no, path))
    for (_prefix, count), members in groups.items():
        singles.append(QuantFiles(tuple(p for _, p in sorted(members)), count))
    return tuple(sorted(singles, key=lambda v: v.first))


def available_quants(paths: Iterable[str]) -> tuple[str, ...]:
    """The quant labels of a repo's GGUF models, sorted."""
    return tuple(sorted({v.quant for v in gguf_quant_files(paths)}, key=_natural))


def _natural(text: str) -> list[object]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text)]


def _match_level(variant: QuantFiles, quant: str) -> int:
    """2: the name ends with the quant token; 1: the quant is a token somewhere in the path; 0: no."""
    q = quant.lower()
    name = variant.stem.rsplit("/", 1)[-1].lower()
    if name == q or (name.endswith(q) and name[-len(q) - 1] in "-._"):
        return 2
    if re.search(rf"(?<![a-z0-9]){re.escape(q)}(?=[-./]|$)", variant.stem.lower()):
        return 1
    return 0


def pick_quant_files(paths: Sequence[str], quant: str | None, *, repo_id: str) -> QuantFiles:
    """The model of a repo that ``repo_id:quant`` names.

    Args:
        paths: every file path of the repo.
        quant: a quant such as ``Q4_K_M`` (any case), or None for the default choice.
        repo_id: the repo, for messages.

    Returns:
        The chosen model, with all its shards.

    Raises:
        UserError: no GGUF model, no file for the quant, several files for it, or missing shards.
    """
    variants = gguf_quant_files(paths)
    if not variants:
        raise UserError(f"{repo_id} has no GGUF model files ({len(paths)} files listed); "
                        "check the repo name")
    quants = ", ".join(available_quants(paths))
    if quant is None:
        if len(variants) == 1:
            return _complete(variants[0], repo_id)
        for default in DEFAULT_QUANTS:
            chosen = _by_quant(variants, default)
            if len(chosen) == 1:
                return _complete(chosen[0], repo_id)
        raise UserError(f"{repo_id} holds several GGUF models; name one: {repo_id}:QUANT with QUANT one of {quants}")
    chosen = _by_quant(variants, quant)
    if not chosen:
        raise UserError(f"{repo_id} has no GGUF file for quant {quant!r}; available quants: {quants}")
    if len(chosen) > 1:
        names = ", ".join(v.first for v in chosen)
        raise UserError(f"quant {quant!r} is ambiguous in {repo_id}: it matches {names}; "
                        f"name the file: {repo_id}/<file>.gguf")
    return _complete(chosen[0], repo_id)


def _by_quant(variants: Sequence[QuantFiles], quant: str) -> list[QuantFiles]:
    levels = [(_match_level(v, quant), v) for v in variants]
    best = max((lvl for lvl, _ in levels), default=0)
    return [v for lvl, v in levels if best and lvl == best]


def _complete(variant: QuantFiles, repo_id: str) -> QuantFiles:
    if variant.missing:
        raise UserError(f"{repo_id} lacks shard(s) {', '.join(map(str, variant.missing))} of "
                        f"{variant.count} of {variant.first}; the repo is incomplete")
    return variant


# --------------------------------------------------------------------------- listing


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


def _offline(flag: bool) -> bool:
    from huggingface_hub import constants

    env = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}
    return bool(flag or constants.HF_HUB_OFFLINE or env)


def _endpoint() -> str:
    from huggingface_hub import constants

    return constants.ENDPOINT


def _storage_folder(repo_id: str) -> Path:
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE) / ("models--" + repo_id.replace("/", "--"))


def _cached_listing(repo_id: str, revision: str) -> RepoListing | None:
    """The files of ``repo_id`` at ``revision`` that the local cache holds, or None."""
    storage = _storage_folder(repo_id)
    commit: str | None = revision if _COMMIT.match(revision) else None
    if commit is None:
        ref = storage / "refs" / revision
        try:
            commit = ref.read_text().strip()
        except OSError:
            return None
        if not _COMMIT.match(commit):  # a refs file holds a commit hash, nothing else
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
                              blob if _SHA256.match(blob) else None))
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
    if _offline(offline):
        cached = _cached_listing(repo_id, rev)
        if cached is None:
            raise UserError(f"{repo_id}@{rev} is not in the Hugging Face cache ({_storage_folder(repo_id).parent}) "
                            "and offline mode is on (--offline or HF_HUB_OFFLINE=1); "
                            "run `ggufspec pull` with network access first")
        return cached
    from huggingface_hub import HfApi

    try:
        info = HfApi().model_info(repo_id, revision=revision, files_metadata=True)
    except Exception as exc:  # noqa: BLE001 - mapped or re-raised below
        if _is_unreachable(exc):
            cached = _cached_listing(repo_id, rev)
            if cached is not None:
                log.warning("the Hugging Face Hub at %s cannot be reached (%s); using the cached %s@%s",
                            _endpoint(), type(exc).__name__, repo_id, rev)
                return cached
            raise UserError(f"cannot reach the Hugging Face Hub at {_endpoint()} ({_reason(exc)}) and "
                            f"{repo_id}@{rev} is not in the cache; check the network (and HF_ENDPOINT)") from exc
        raise _user_error(exc, repo_id=repo_id, revision=rev) from exc
    files = tuple(
        RepoFile(s.rfilename, s.lfs.size if s.lfs else s.size, s.lfs.sha256 if s.lfs else None)
        for s in (info.siblings or ())
    )
    return RepoListing(repo_id, rev, info.sha, files, from_cache=False)


# --------------------------------------------------------------------------- fetching


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
    cache_only = _offline(offline) or listing.from_cache
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
    return _complete(variant, listing.repo_id)


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
        raise _user_error(exc, repo_id=repo_id, revision=listing.revision, filename=path_in_repo,
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
        if i + 1 < len(parts) and _COMMIT.match(parts[i + 1]):
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


# --------------------------------------------------------------------------- errors


def _connection_errors() -> tuple[type[BaseException], ...]:
    classes: list[type[BaseException]] = [ConnectionError, TimeoutError]
    for module, names in (("httpx2", ("TransportError",)), ("httpx", ("TransportError",)),
                          ("requests", ("ConnectionError", "Timeout"))):
        try:
            mod = importlib.import_module(module)
        except ImportError:
            continue
        classes += [getattr(mod, n) for n in names if isinstance(getattr(mod, n, None), type)]
    return tuple(classes)


def _status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    return getattr(response, "status_code", None)


def _reason(exc: BaseException) -> str:
    status = _status(exc)
    return f"HTTP {status}" if status is not None else type(exc).__name__


def _is_unreachable(exc: BaseException) -> bool:
    status = _status(exc)
    return isinstance(exc, _connection_errors()) or (status is not None and status >= 500)


def _user_error(exc: BaseException, *, repo_id: str, revision: str, filename: str | None = None,
                offline: bool = False) -> BaseException:
    """One clear ``UserError`` for a ``huggingface_hub`` failure (other exceptions pass through)."""
    from huggingface_hub import errors, get_token

    endpoint = _endpoint()
    what = f"{repo_id}/{filename}" if filename else repo_id
    status = _status(exc)
    if isinstance(exc, (errors.LocalEntryNotFoundError, errors.OfflineModeIsEnabled)):
        if offline:
            return UserError(f"{what}@{revision} is not in the Hugging Face cache and offline mode is on "
                             "(--offline or HF_HUB_OFFLINE=1); run `ggufspec pull` with network access first")
        return UserError(f"cannot reach the Hugging Face Hub at {endpoint} to fetch {what}, and it is not "
                         "cached; check the network (and HF_ENDPOINT), or use --offline for cached models")
    if isinstance(exc, errors.GatedRepoError):
        page = f"{endpoint}/{repo_id}"
        if get_token() and status == 403:
            return UserError(f"{repo_id} is gated and your HF_TOKEN has not been granted access: "
                             f"request it at {page}")
        return UserError(f"{repo_id} is gated: accept its terms at {page}, then set HF_TOKEN to a token "
                         "of that account (or run `hf auth login`)")
    if isinstance(exc, errors.RevisionNotFoundError):
        return UserError(f"revision {revision!r} not found in {repo_id}; use a branch, tag or commit it has")
    if isinstance(exc, errors.RepositoryNotFoundError):
        hint = "check the name" if get_token() else "check the name; a private repo needs HF_TOKEN"
        return UserError(f"repo {repo_id} not found on {endpoint} ({status or 404}); {hint}")
    if isinstance(exc, errors.EntryNotFoundError):
        return UserError(f"{filename or 'the file'} not found in {repo_id}@{revision} (404)")
    if isinstance(exc, errors.HfHubHTTPError) and status is not None:
        if status == 401:
            return UserError(f"the Hub at {endpoint} rejected HF_TOKEN (401 invalid credentials); "
                             "fix or unset HF_TOKEN")
        if status == 403:
            return UserError(f"access to {repo_id} refused (403); check that HF_TOKEN may read it")
        if status == 429:
            return UserError(f"the Hub at {endpoint} is rate-limiting requests (429); wait and retry, "
                             "or set HF_TOKEN for a higher limit")
        if status >= 500:
            return UserError(f"the Hub at {endpoint} failed ({status}) on {what}; try again later, "
                             "or use --offline for cached models")
    if isinstance(exc, _connection_errors()):
        return UserError(f"cannot reach the Hugging Face Hub at {endpoint} ({type(exc).__name__}) to fetch "
                         f"{what}; check the network (and HF_ENDPOINT), or use --offline for cached models")
    if isinstance(exc, OSError) and "Consistency check failed" in str(exc):
        first = str(exc).splitlines()[0]
        return UserError(f"download of {what} was incomplete ({first}); nothing partial was kept, "
                         "run the command again")
    return exc
