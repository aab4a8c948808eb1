"""Bench prompts: the built-in set (package data) and `--prompts FILE.jsonl`, checked line by line."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Mapping, Sequence

from ggufspec.errors import UserError

CATEGORIES = ("chat", "code", "summarise", "maths", "long")  # of the built-in set


@dataclass(frozen=True, kw_only=True)
class BenchPrompt:
    """One benchmark prompt: chat messages rendered with the target's own template."""

    id: str
    category: str
    messages: tuple[Mapping[str, str], ...]


def builtin_prompts() -> Traversable:
    """The built-in prompt set (chat, code, summarising a pasted text, maths, long answers),
    shipped as package data: found in a wheel install as in a source tree."""
    return files("ggufspec") / "prompts" / "bench.jsonl"


def load_prompts(path: Path | str | None = None) -> list[BenchPrompt]:
    """Read a prompt file (None: the built-in set): one JSON object a line, {"id", "category", "messages"}.

    `category` is free text (the built-in set uses chat, code, summarise, maths, long);
    `messages` is a non-empty list of {"role", "content"} with roles system/user/assistant.
    Blank lines and lines starting with '#' are skipped.

    Raises:
        UserError: a missing file, bad JSON, a missing or ill-typed field, a duplicate id,
            or no prompts at all; the message names the file and line.
    """
    source: Path | Traversable = Path(path) if path is not None else builtin_prompts()
    try:
        text = source.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"prompt file not found: {source}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read prompt file {source}: {exc}") from None
    prompts: list[BenchPrompt] = []
    seen: set[str] = set()
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        prompt = _parse_line(line, where=f"{source}:{n}", seen=seen)
        seen.add(prompt.id)
        prompts.append(prompt)
    if not prompts:
        raise UserError(f"{source} holds no prompts")
    return prompts


def _parse_line(line: str, *, where: str, seen: set[str]) -> BenchPrompt:
    """One prompt line whose id is not in `seen`; `where` (file:line) heads every error."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise UserError(f"{where}: not valid JSON ({exc.msg}); write one JSON object a line") from None
    if not isinstance(obj, dict):
        raise UserError(f"{where}: expected a JSON object with id, category and messages")
    for key in ("id", "category", "messages"):
        if key not in obj:
            raise UserError(f"{where}: missing {key!r}; each line needs id, category and messages")
    pid, cat, msgs = obj["id"], obj["category"], obj["messages"]
    if not isinstance(pid, str) or not pid.strip():
        raise UserError(f"{where}: 'id' must be a non-empty string")
    if pid in seen:
        raise UserError(f"{where}: duplicate id {pid!r}")
    if not isinstance(cat, str) or not cat.strip():
        raise UserError(f"{where}: 'category' must be a non-empty string")
    if not isinstance(msgs, list) or not msgs:
        raise UserError(f"{where}: 'messages' must be a non-empty list of {{role, content}}")
    for m in msgs:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise UserError(f"{where}: each message needs string 'role' and 'content'")
        if m["role"] not in ("system", "user", "assistant"):
            raise UserError(f"{where}: unknown role {m['role']!r}; use system, user or assistant")
    if msgs[-1]["role"] != "user":
        raise UserError(f"{where}: the last message must be the user's")
    return BenchPrompt(id=pid, category=cat, messages=tuple(dict(m) for m in msgs))


def pick_prompts(prompts: Sequence[BenchPrompt], per_category: Mapping[str, int]) -> list[BenchPrompt]:
    """The first n prompts of each named category, in file order (for --quick)."""
    taken: dict[str, int] = {}
    out = []
    for p in prompts:
        if taken.get(p.category, 0) < per_category.get(p.category, 0):
            taken[p.category] = taken.get(p.category, 0) + 1
            out.append(p)
    return out
