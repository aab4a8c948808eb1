"""The catalog of known target/draft pairs: one TOML file per pair in ``ggufspec/pairs/`` (package data).

A pair file (its name, without ``.toml``, is the pair's name)::

    title = "Qwen3 8B, drafted by Qwen3 0.6B"
    target = "Qwen/Qwen3-8B-GGUF:Q4_K_M"        # any Hub or embedded reference (ggufspec.models.refs)
    draft = "Qwen/Qwen3-0.6B-GGUF:Q8_0"
    context = 32768                              # tokens both models handle (optional)
    licence = "Apache-2.0"                       # optional
    notes = "..."                                # optional

    [expected]                                   # optional: only from a public report
    accept_rate = 0.72                           # accepted / drafted, 0..1
    speedup = 1.71                               # speculative / target-alone generation tokens/s
    source = "https://..."                       # the report (required with [expected])
    conditions = "RTX 3060, Q8_0 target and draft, one prompt"
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ggufspec.errors import UserError
from ggufspec.models.refs import LocalRef, parse_ref

__all__ = ["PairEntry", "get_pair", "load_pairs", "models_dir"]

_KEYS = {"title", "target", "draft", "context", "licence", "notes", "expected"}
_EXPECTED_KEYS = {"accept_rate", "speedup", "source", "conditions"}
_PAIR_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


@dataclass(frozen=True)
class PairEntry:
    """A known target/draft pair.

    ``accept_rate``, ``speedup``, ``source`` and ``conditions`` come from a public report and are
    None where there is none.
    """

    name: str
    title: str
    target: str
    draft: str
    context: int | None = None
    licence: str | None = None
    notes: str | None = None
    accept_rate: float | None = None
    speedup: float | None = None
    source: str | None = None
    conditions: str | None = None
    path: Path | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {
            "name": self.name, "title": self.title, "target": self.target, "draft": self.draft,
            "context": self.context, "licence": self.licence, "notes": self.notes,
            "expected": None if self.source is None else {
                "accept_rate": self.accept_rate, "speedup": self.speedup,
                "source": self.source, "conditions": self.conditions,
            },
        }


def models_dir() -> Path:
    """The catalog directory: ``pairs/`` inside the installed package (editable or not)."""
    return Path(__file__).resolve().parent.parent / "pairs"


def load_pairs(directory: Path | None = None) -> tuple[PairEntry, ...]:
    """Read every pair of the catalog, sorted by name (the embedded ``default`` first).

    Args:
        directory: where the TOML files are; the catalog's ``ggufspec/pairs/`` by default.

    Returns:
        The pairs.

    Raises:
        UserError: a file is not valid TOML or breaks the schema (names the file and the key).
    """
    directory = models_dir() if directory is None else Path(directory)
    if not directory.is_dir():
        raise UserError(f"the pair catalog {directory} is missing; reinstall ggufspec (pip install ggufspec)")
    pairs = [_load(path) for path in sorted(directory.glob("*.toml"))]
    return tuple(sorted(pairs, key=lambda p: (p.name != "default", p.name)))


def get_pair(name: str, directory: Path | None = None) -> PairEntry:
    """The pair called ``name``.

    Raises:
        UserError: no such pair (lists the names).
    """
    pairs = load_pairs(directory)
    for pair in pairs:
        if pair.name == name.strip().lower():
            return pair
    raise UserError(f"unknown pair {name!r}; choose one of: {', '.join(p.name for p in pairs)} (see `ggufspec pairs`)")


def _load(path: Path) -> PairEntry:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    name = path.stem
    where = f"pair file {path}"
    if not _PAIR_NAME.match(name):
        raise UserError(f"{where}: the name {name!r} must be lower case letters, digits, '.', '_' or '-'")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UserError(f"{where} cannot be read: {exc}") from exc
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise UserError(f"{where}: unknown key {unknown[0]!r}; allowed: {', '.join(sorted(_KEYS))}")

    def text(key: str, table: dict[str, Any] = data, required: bool = False) -> str | None:
        value = table.get(key)
        if value is None and not required:
            return None
        if not isinstance(value, str) or not value.strip():
            raise UserError(f"{where}: {key!r} must be a non-empty string")
        return value.strip()

    refs = {}
    for role in ("target", "draft"):
        ref = text(role, required=True)
        assert ref is not None
        if isinstance(parse_ref(ref), LocalRef):
            raise UserError(f"{where}: {role} {ref!r} is a local path; the catalog names Hub or embedded models")
        refs[role] = ref
    context = data.get("context")
    if context is not None and (not isinstance(context, int) or isinstance(context, bool) or context <= 0):
        raise UserError(f"{where}: 'context' must be a positive integer")

    expected = data.get("expected")
    accept = speedup = None
    source = conditions = None
    if expected is not None:
        if not isinstance(expected, dict):
            raise UserError(f"{where}: 'expected' must be a table")
        unknown = sorted(set(expected) - _EXPECTED_KEYS)
        if unknown:
            raise UserError(f"{where}: unknown key expected.{unknown[0]}; allowed: {', '.join(sorted(_EXPECTED_KEYS))}")
        source = text("source", expected, required=True)
        if not (source or "").startswith("https://"):
            raise UserError(f"{where}: expected.source must be an https:// URL of the public report")
        conditions = text("conditions", expected)
        accept = _number(expected, "accept_rate", where, low=0.0, high=1.0)
        speedup = _number(expected, "speedup", where, low=0.0, high=None)
        if accept is None and speedup is None:
            raise UserError(f"{where}: [expected] needs accept_rate or speedup")
    return PairEntry(
        name=name, title=text("title", required=True) or name, target=refs["target"], draft=refs["draft"],
        context=context, licence=text("licence"), notes=text("notes"), accept_rate=accept, speedup=speedup,
        source=source, conditions=conditions, path=path,
    )


def _number(table: dict[str, Any], key: str, where: str, *, low: float, high: float | None) -> float | None:
    value = table.get(key)
    if value is None:
        return None
    numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not numeric or value <= low or (high is not None and value > high):
        bound = f"in ({low}, {high}]" if high is not None else f"> {low}"
        raise UserError(f"{where}: expected.{key} must be a number {bound}")
    return float(value)
