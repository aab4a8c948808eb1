"""The console's one door into the library: every call it makes on the loaded pair is here, so a
change in the library's API is a change in this file only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ggufspec.console.conversation import Message
from ggufspec.console.slash import ChatSettings
from ggufspec.loop.drafters import Drafter
from ggufspec.loop.engine import Generation
from ggufspec.runtime import SpeculativePair

Pair = SpeculativePair
Drafters = tuple[Drafter, ...]  # who proposes; () is the target alone


def encode(pair: Pair, messages: list[Message]) -> list[int]:
    """The conversation rendered with the GGUF chat template, as token ids."""
    return pair.encode(messages=messages)


def n_ctx(pair: Pair) -> int:
    return pair.target_ctx.n_ctx


def start_turn(pair: Pair, *, tokens: list[int], drafters: Drafters, settings: ChatSettings) -> Generation:
    """One reply: the draft/verify loop with `drafters` (empty: the target alone), reusing the
    longest prefix of `tokens` the pair's KV caches hold."""
    return pair.generate(prompt_tokens=tokens, drafters=tuple(drafters),
                         max_tokens=settings.max_tokens, sampling=settings.sampling(),
                         speculative=settings.speculative)


def own_drafters(pair: Pair) -> Drafters:
    """The drafters the pair was loaded with (its --draft)."""
    return tuple(pair.drafters)


def load_drafter(pair: Pair, ref: str) -> Drafters:
    """A draft model reference or "lookup" -> a drafter the pair owns (UserError: cannot)."""
    return (pair.load_drafter(ref),)


def drafters_name(pair: Pair, drafters: Drafters) -> str:
    """"none", "lookup", a draft model's file name, or several joined by "+"."""
    names = [pair.draft_name(d) for d in drafters]
    return "+".join(n if n in ("none", "lookup") else Path(n).name for n in names) or "none"


def reset(pair: Pair) -> None:
    pair.reset()


def save_session(pair: Pair, path: Path, meta: dict[str, Any]) -> None:
    pair.save_session(path, meta=meta)


def load_session(pair: Pair, path: Path) -> tuple[int, dict[str, Any]]:
    """(tokens now in the target's cache, the session's meta); UserError: not this pair's."""
    info = pair.load_session(path)
    return len(info.tokens), dict(info.meta)
