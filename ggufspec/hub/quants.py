"""Choosing a model file in a repo, like llama.cpp's ``-hf owner/repo:QUANT``.

The GGUF whose name carries the quant as a token (case-insensitive, bounded by ``-``, ``.`` or
``/``), skipping ``mmproj``/``imatrix`` files; with no quant, the only model, else Q4_K_M, else
Q8_0. The shards of a split model (``-00001-of-00003.gguf``) form one ``QuantFiles``. Pure: works
on the repo's file paths only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Sequence

from ggufspec.errors import UserError
from ggufspec.models.shards import split_info

#: Tried in order when a ref names no quant and the repo holds several models (llama.cpp's order).
DEFAULT_QUANTS = ("Q4_K_M", "Q8_0")

_QUANT_LABEL = re.compile(
    r"(?:^|[-._])((?:UD-)?(?:I?Q\d+(?:_[A-Z0-9]+)*|TQ\d_\d|BF16|F16|F32|FP16|FP32|MXFP4(?:_MOE)?))$",
    re.IGNORECASE,
)


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
            return check_complete(variants[0], repo_id)
        for default in DEFAULT_QUANTS:
            chosen = _by_quant(variants, default)
            if len(chosen) == 1:
                return check_complete(chosen[0], repo_id)
        raise UserError(f"{repo_id} holds several GGUF models; name one: {repo_id}:QUANT with QUANT one of {quants}")
    chosen = _by_quant(variants, quant)
    if not chosen:
        raise UserError(f"{repo_id} has no GGUF file for quant {quant!r}; available quants: {quants}")
    if len(chosen) > 1:
        names = ", ".join(v.first for v in chosen)
        raise UserError(f"quant {quant!r} is ambiguous in {repo_id}: it matches {names}; "
                        f"name the file: {repo_id}/<file>.gguf")
    return check_complete(chosen[0], repo_id)


def _by_quant(variants: Sequence[QuantFiles], quant: str) -> list[QuantFiles]:
    levels = [(_match_level(v, quant), v) for v in variants]
    best = max((lvl for lvl, _ in levels), default=0)
    return [v for lvl, v in levels if best and lvl == best]


def check_complete(variant: QuantFiles, repo_id: str) -> QuantFiles:
    if variant.missing:
        raise UserError(f"{repo_id} lacks shard(s) {', '.join(map(str, variant.missing))} of "
                        f"{variant.count} of {variant.first}; the repo is incomplete")
    return variant
