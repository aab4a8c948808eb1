"""The console's one door into the library: every call it makes on the loaded pair is here, so a
change in the library's API is a change in this file only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ggufspec.console.conversation import Message
from ggufspec.console.settings import ChatSettings
from ggufspec.drafters import Drafter
from ggufspec.engine import Generation
from ggufspec.runtime import SpeculativePair

Pair = SpeculativePair


def encode(pair: Pair, messages: list[Message]) -> list[int]:
    """The conversation rendered with the GGUF chat template, as token ids."""
    return pair.encode(messages=messages)


def n_ctx(pair: Pair) -> int:
    return pair.target_ctx.n_ctx


def start_turn(pair: Pair, *, tokens: list[int], drafter: Drafter | None, settings: ChatSettings) -> Generation:
    """One reply: the draft/verify loop with `drafter` (None: the target alone), reusing the longest
    prefix of `tokens` the pair's KV caches hold."""
    return pair.generate(prompt_tokens=tokens, drafter=drafter, max_tokens=settings.max_tokens,
                         sampling=settings.sampling(), speculative=settings.speculative())


def own_drafter(pair: Pair) -> Drafter | None:
    return pair.drafter


def load_drafter(pair: Pair, ref: str) -> Drafter:
    """A draft model reference or "lookup" -> a drafter the pair owns (UserError: cannot)."""
    return pair.load_drafter(ref)


def drafter_name(pair: Pair, drafter: Drafter | None) -> str:
    name = pair.draft_name(drafter)
    return Path(name).name if name not in ("none", "lookup") else name


def reset(pair: Pair) -> None:
    pair.reset()


def save_session(pair: Pair, path: Path, meta: dict[str, Any]) -> None:
    pair.save_session(path, meta=meta)


def load_session(pair: Pair, path: Path) -> tuple[int, dict[str, Any]]:
    """(tokens now in the target's cache, the session's meta); UserError: not this pair's."""
    info = pair.load_session(path)
    return len(info.tokens), dict(info.meta)
