"""Bench prompts: the two built-in sets (package data) and `--prompts FILE.jsonl`, checked line by line.

Two built-in sets, so that a figure can be checked on prompts nobody tuned on:
    tuned    ggufspec/prompts/bench.jsonl: chat, code, summarise, maths, long; the defaults
             (draft lengths, pacing, controller) were chosen looking at figures on these
    heldout  ggufspec/prompts/heldout.jsonl: 24 prompts (chat, code, summarise, maths, 6 each)
             written fresh for issue 12 and never used for tuning; keep it that way
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Mapping, Sequence

from ggufspec.errors import UserError

CATEGORIES = ("chat", "code", "summarise", "maths", "long")  # of the built-in sets
PROMPT_SETS = {"tuned": "bench.jsonl", "heldout": "heldout.jsonl"}  # built-in set -> file in ggufspec/prompts
FILE_SET = "file"  # the set name of prompts read from --prompts FILE


@dataclass(frozen=True, kw_only=True)
class BenchPrompt:
    """One benchmark prompt: chat messages rendered with the target's own template."""

    id: str
    category: str
    messages: tuple[Mapping[str, str], ...]
    prompt_set: str = FILE_SET  # "tuned" | "heldout" (built-in) | "file" (--prompts FILE)


def builtin_prompts(prompt_set: str = "tuned") -> Traversable:
    """A built-in prompt set's file (see PROMPT_SETS), shipped as package data: found in a wheel
    install as in a source tree."""
    if prompt_set not in PROMPT_SETS:
        raise UserError(f"unknown prompt set {prompt_set!r}; use {', '.join(PROMPT_SETS)} or both")
    return files("ggufspec") / "prompts" / PROMPT_SETS[prompt_set]


def load_prompt_sets(choice: str = "both") -> list[BenchPrompt]:
    """The built-in prompts of `choice` ("tuned", "heldout" or "both": tuned first), each
    tagged with its set.

    Raises:
        UserError: an unknown choice, or an id found in both sets.
    """
    names = list(PROMPT_SETS) if choice == "both" else [choice]
    if any(n not in PROMPT_SETS for n in names):
        raise UserError(f"unknown prompt set {choice!r}; use {', '.join(PROMPT_SETS)} or both")
    out: list[BenchPrompt] = []
    for name in names:
        out += load_prompts(prompt_set=name)
    ids = [p.id for p in out]
    if len(set(ids)) != len(ids):
        raise UserError(f"prompt ids repeat across the built-in sets: {sorted({i for i in ids if ids.count(i) > 1})}")
    return out


def load_prompts(path: Path | str | None = None, *, prompt_set: str = "tuned") -> list[BenchPrompt]:
    """Read a prompt file (None: the built-in set `prompt_set`): one JSON object a line, {"id", "category", "messages"}.

    `category` is free text (the built-in set uses chat, code, summarise, maths, long);
    `messages` is a non-empty list of {"role", "content"} with roles system/user/assistant.
    Blank lines and lines starting with '#' are skipped.

    Raises:
        UserError: a missing file, bad JSON, a missing or ill-typed field, a duplicate id,
            or no prompts at all; the message names the file and line.
    """
    source: Path | Traversable = Path(path) if path is not None else builtin_prompts(prompt_set)
    set_name = FILE_SET if path is not None else prompt_set
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
        prompt = _parse_line(line, where=f"{source}:{n}", seen=seen, prompt_set=set_name)
        seen.add(prompt.id)
        prompts.append(prompt)
    if not prompts:
        raise UserError(f"{source} holds no prompts")
    return prompts


def _parse_line(line: str, *, where: str, seen: set[str], prompt_set: str) -> BenchPrompt:
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
    return BenchPrompt(id=pid, category=cat, messages=tuple(dict(m) for m in msgs), prompt_set=prompt_set)


def pick_prompts(prompts: Sequence[BenchPrompt], per_category: Mapping[str, int]) -> list[BenchPrompt]:
    """The first n prompts of each named category of each set, in file order (for --quick)."""
    taken: dict[tuple[str, str], int] = {}
    out = []
    for p in prompts:
        key = (p.prompt_set, p.category)
        if taken.get(key, 0) < per_category.get(p.category, 0):
            taken[key] = taken.get(key, 0) + 1
            out.append(p)
    return out


def limit_per_set(prompts: Sequence[BenchPrompt], n: int) -> list[BenchPrompt]:
    """The first n prompts of each set, in order (for --limit)."""
    taken: dict[str, int] = {}
    out = []
    for p in prompts:
        if taken.get(p.prompt_set, 0) < n:
            taken[p.prompt_set] = taken.get(p.prompt_set, 0) + 1
            out.append(p)
    return out


def set_names(prompts: Sequence[BenchPrompt]) -> list[str]:
    """The sets these prompts come from, in order of first appearance."""
    return list(dict.fromkeys(p.prompt_set for p in prompts))
