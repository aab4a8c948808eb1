"""Sessions on disk: a pair's KV caches saved after a generation, loaded into a fresh process.

A session file holds, for the target and each draft model, llama.cpp's serialised KV cache of
sequence 0 (llama_state_seq_get_data, through `llama.Context.state`) and the token ids it holds,
with what it belongs to: the model file's fingerprint, the context size and the KV cache types.
Loading checks those against the pair first and refuses a mismatch, a truncated or corrupt file,
or a file that is not a session, with one line naming the problem and the fix.

Layout (all integers little-endian):

    MAGIC (17 bytes) | u64 header length H | header: H bytes of UTF-8 JSON | blob 0 | blob 1 | ...

The header lists the blobs in file order ("caches": target first, then drafts), each with its
byte count and sha256, so a short file reads as truncated and a damaged one as corrupt.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from ggufspec.errors import UserError
from ggufspec.temps import remove_stale

MAGIC = b"ggufspec-session\n"
VERSION = 1
_FINGERPRINT_SPAN = 1 << 20  # bytes hashed at each end of a model file
# a save in progress: ".NAME.PID.XXXXXXXX.session-tmp" beside NAME; one whose process is gone
# (a save killed midway) is swept by the next save into that folder
_TEMP_SUFFIX = ".session-tmp"
_TEMP = re.compile(r"^\..+\.(?P<pid>\d+)\.[^.]+" + re.escape(_TEMP_SUFFIX) + "$")


@dataclass(frozen=True)
class SessionInfo:
    """What a loaded session put in the pair: the target's cached tokens and the caller's meta."""

    tokens: tuple[int, ...]
    meta: dict = field(default_factory=dict)


def fingerprint(path: str | Path) -> str:
    """Which model file this is, cheaply: sha256 of its size, first and last MiB (the GGUF
    header and metadata, the tensor table, the last weights)."""
    path = Path(path)
    size = path.stat().st_size
    h = hashlib.sha256(struct.pack("<Q", size))
    with path.open("rb") as f:
        h.update(f.read(_FINGERPRINT_SPAN))
        f.seek(max(0, size - _FINGERPRINT_SPAN))
        h.update(f.read(_FINGERPRINT_SPAN))
    return h.hexdigest()


# ---- the file format (pure) -----------------------------------------------------------------


def check_save_path(path: str | Path) -> Path:
    """`path` can take a session: a regular file or nothing yet, in a folder that exists and that
    this process may write (a session is written beside it, then renamed over it).

    Raises:
        UserError: a folder, a FIFO, a device or a symbolic link there (saving would replace it),
            a missing folder, or one this process may not write.
    """
    path = Path(path)
    if path.is_symlink() or (path.exists() and not path.is_file()):
        what = "a symbolic link" if path.is_symlink() else "a folder" if path.is_dir() else "not a regular file"
        raise UserError(f"cannot save the session to {path}: it is {what}, which saving would replace; "
                        "name a regular file")
    if not path.parent.is_dir():
        raise UserError(f"cannot save the session to {path}: folder {path.parent} does not exist")
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise UserError(f"cannot save the session to {path}: folder {path.parent} is not writable; "
                        "name a file in a folder you may write")
    return path


def write_session(path: str | Path, header: Mapping[str, Any], blobs: Sequence[bytes]) -> None:
    """Write header + blobs atomically (a temp file in the same folder, then os.replace)."""
    path = Path(path)
    caches = header["caches"]
    if len(caches) != len(blobs):
        raise ValueError("one cache entry per blob")
    try:
        text = json.dumps(dict(header), separators=(",", ":"), allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise UserError(f"session meta must be plain JSON (strings, numbers, lists, dicts): {exc}") from None
    check_save_path(path)
    remove_stale(path.parent, _TEMP, glob=f".*{_TEMP_SUFFIX}")
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{os.getpid()}.", suffix=_TEMP_SUFFIX)
    except OSError as exc:
        raise UserError(f"cannot save the session to {path}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(MAGIC + struct.pack("<Q", len(text)) + text)
            for blob in blobs:
                f.write(blob)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):  # a full disk, a folder swapped in meanwhile, ...
            raise UserError(f"cannot save the session to {path}: {exc.strerror or exc}") from None
        raise


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


# each cache entry's fields and what they must be (a header is checked field by field: its
# checksums cover the blobs only, so a hand-edited header reads as well as a saved one)
_CACHE_FIELDS: dict[str, tuple[str, Any]] = {
    "role": ("a string", lambda x: isinstance(x, str)),
    "file": ("a string", lambda x: isinstance(x, str)),
    "fingerprint": ("a string", lambda x: isinstance(x, str)),
    "n_ctx": ("a whole number", lambda x: _is_int(x) and x > 0),
    "cache_type_k": ("a string", lambda x: isinstance(x, str)),
    "cache_type_v": ("a string", lambda x: isinstance(x, str)),
    "tokens": ("a list of token ids", lambda x: isinstance(x, list) and all(_is_int(t) and t >= 0 for t in x)),
    "bytes": ("a byte count", lambda x: _is_int(x) and x >= 0),
    "sha256": ("a string", lambda x: isinstance(x, str)),
}


def _check_header(header: Any, path: Path) -> None:
    """Refuse (UserError) a header whose fields are missing or of the wrong type."""
    def corrupt(what: str) -> UserError:
        return UserError(f"session file {path} is corrupt (header: {what}); save the session again")

    if not isinstance(header, dict):
        raise corrupt("not a JSON object")
    if not isinstance(header.get("meta", {}), dict):
        raise corrupt("meta is not an object")
    caches = header.get("caches")
    if not isinstance(caches, list) or not caches:
        raise corrupt("caches is not a list of caches")
    for i, cache in enumerate(caches):
        if not isinstance(cache, dict):
            raise corrupt(f"caches[{i}] is not an object")
        for key, (kind, ok) in _CACHE_FIELDS.items():
            if key not in cache or not ok(cache[key]):
                raise corrupt(f"caches[{i}].{key} is not {kind}")
        if len(cache["tokens"]) > cache["n_ctx"]:
            raise corrupt(f"caches[{i}] holds more tokens than its context")


def read_session(path: str | Path) -> tuple[dict, list[bytes]]:
    """(header, blobs) of a session file, checked for magic, version, length and checksums
    (a foreign file is refused after reading its first bytes only)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"no session file at {path}; save one first (or check the path)")
    size = path.stat().st_size
    prefix = len(MAGIC) + 8
    truncated = f"session file {path} is truncated ({size} bytes); save the session again"
    with path.open("rb") as f:
        head = f.read(prefix)
        if not head.startswith(MAGIC):
            if len(head) < len(MAGIC) and MAGIC.startswith(head):
                raise UserError(truncated)
            raise UserError(f"{path} is not a ggufspec session file; give a file written by save_session / /save")
        if len(head) < prefix:
            raise UserError(truncated)
        (n_header,) = struct.unpack_from("<Q", head, len(MAGIC))
        if size < prefix + n_header:
            raise UserError(truncated)
        try:
            header = json.loads(f.read(n_header))
        except ValueError:
            raise UserError(f"session file {path} is corrupt (unreadable header); save the session again") from None
        if isinstance(header, dict) and header.get("version") != VERSION:
            raise UserError(
                f"session file {path} has format version {header.get('version')!r}, this ggufspec reads {VERSION}; "
                "save the session again with this version"
            )
        _check_header(header, path)
        caches = header["caches"]
        sizes = [c["bytes"] for c in caches]
        expected = prefix + n_header + sum(sizes)
        if size < expected:
            raise UserError(
                f"session file {path} is truncated ({size} of {expected} bytes); save the session again"
            )
        if size > expected:
            raise UserError(f"session file {path} is corrupt ({size - expected} bytes past its end); save it again")
        blobs = []
        for cache, n in zip(caches, sizes):
            blob = f.read(n)
            if hashlib.sha256(blob).hexdigest() != cache.get("sha256"):
                raise UserError(
                    f"session file {path} is corrupt (checksum of the {cache.get('role')} cache); save it again"
                )
            blobs.append(blob)
    return header, blobs


# ---- a pair's caches --------------------------------------------------------------------------


def _describe(role: str, path: Path, ctx: Any) -> dict:
    return {
        "role": role,
        "file": path.name,
        "fingerprint": fingerprint(path),
        "n_ctx": ctx.n_ctx,
        "cache_type_k": ctx.settings.cache_type_k,
        "cache_type_v": ctx.settings.cache_type_v,
    }


def save_caches(path: str | Path, target: tuple[Path, Any], drafts: Sequence[tuple[Any, Path, Any]], *,
                meta: Mapping[str, Any] | None = None) -> None:
    """Write the target's and every draft model's KV cache (and the tokens they hold) to `path`.

    target: (model path, context); drafts: (drafter, model path, context) for each draft model."""
    caches, blobs = [], []
    for role, model_path, ctx in [("target", *target)] + [("draft", p, ctx) for _, p, ctx in drafts]:
        blob = ctx.state()
        entry = _describe(role, model_path, ctx)
        entry.update(tokens=list(ctx.tokens), bytes=len(blob), sha256=hashlib.sha256(blob).hexdigest())
        caches.append(entry)
        blobs.append(blob)
    header = {"format": "ggufspec-session", "version": VERSION, "meta": dict(meta or {}), "caches": caches}
    write_session(path, header, blobs)


def load_caches(path: str | Path, target: tuple[Path, Any], drafts: Sequence[tuple[Any, Path, Any]],
                drafters: Sequence[Any]) -> SessionInfo:
    """Replace the caches with a saved session's; a draft model the session lacks is reset (it
    catches up on the history at its first draft).

    target: (model path, context); drafts: (drafter, model path, context) for each draft model;
    drafters: every drafter (those without a model are reset: rebuilt from the history)."""
    header, blobs = read_session(path)
    saved = header["caches"]
    if not saved or saved[0].get("role") != "target":
        raise UserError(f"session file {path} is corrupt (no target cache); save it again")
    target_path, target_ctx = target
    want = _describe("target", target_path, target_ctx)
    got = saved[0]
    if got.get("fingerprint") != want["fingerprint"]:
        raise UserError(
            f"session {path} belongs to another target model ({got.get('file')}), not {want['file']}; "
            f"load it with that target or start a new session"
        )
    if got.get("n_ctx") != want["n_ctx"]:
        raise UserError(
            f"session {path} was saved with a context of {got.get('n_ctx')} tokens, this pair has {want['n_ctx']}; "
            f"use --ctx {got.get('n_ctx')} or start a new session"
        )
    for key in ("cache_type_k", "cache_type_v"):
        if got.get(key) != want[key]:
            raise UserError(
                f"session {path} was saved with a {got.get(key)} KV cache, this pair's is {want[key]}; "
                f"use --cache-type {got.get(key)} or start a new session"
            )
    tokens = list(got["tokens"])  # checked by read_session
    if not target_ctx.load_state(blobs[0], tokens):
        for drafter in drafters:
            drafter.reset()
        raise UserError(
            f"llama.cpp refused the target cache in session {path} (saved by another build or with other "
            "attention settings?); start a new session"
        )
    for drafter, draft_path, ctx in drafts:
        mine = _describe("draft", draft_path, ctx)
        match = next(
            (i for i, c in enumerate(saved) if i > 0 and all(c.get(k) == mine[k] for k in mine if k != "file")), None
        )
        if match is None or not ctx.load_state(blobs[match], saved[match]["tokens"]):
            drafter.reset()
    for drafter in drafters:
        if all(drafter is not d for d, _, _ in drafts):
            drafter.reset()  # prompt lookup: rebuilt from the history
    return SessionInfo(tokens=tuple(tokens), meta=dict(header.get("meta") or {}))
