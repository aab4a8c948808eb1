"""The conversation the console keeps, and how it is fitted into the context (pure).

Messages are {role, content} dicts as the GGUF chat template takes them; the system prompt, when
set, is the first. A turn's prompt is the whole conversation rendered by the template; it must
leave room for the reply. When it does not, the console either says so (one line) or, with
--context-shift, drops the oldest turns (whole user/assistant exchanges; the system prompt stays)
until it does: the prompt is then re-rendered, and prefix reuse keeps what still matches the cache
(at least the system prompt).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ggufspec.errors import UserError

Message = dict[str, str]


@dataclass
class Conversation:
    system: str | None = None
    turns: list[Message] = field(default_factory=list)  # user/assistant messages, oldest first

    @property
    def messages(self) -> list[Message]:
        head = [{"role": "system", "content": self.system}] if self.system else []
        return head + [dict(m) for m in self.turns]

    @classmethod
    def from_messages(cls, messages: list[Message]) -> Conversation:
        """A conversation saved in a session's meta; UserError when it is not one."""
        if not isinstance(messages, list) or not all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in messages
        ):
            raise UserError("the session's conversation is malformed; start a new one without --session")
        system = messages[0]["content"] if messages and messages[0]["role"] == "system" else None
        return cls(system=system, turns=[dict(m) for m in messages[1 if system is not None else 0:]])

    def ask(self, text: str) -> None:
        self.turns.append({"role": "user", "content": text})

    def answer(self, text: str) -> None:
        self.turns.append({"role": "assistant", "content": text})

    def withdraw(self) -> None:
        """Take the last user message back (its turn was refused)."""
        if self.turns and self.turns[-1]["role"] == "user":
            self.turns.pop()

    def last_prompt(self) -> list[Message] | None:
        """The messages the last reply answered (for /compare), or None before any reply."""
        if len(self.turns) < 2 or self.turns[-1]["role"] != "assistant":
            return None
        return self.messages[:-1]


def overflow_message(*, prompt_tokens: int, room: int, n_ctx: int) -> str:
    return (f"the conversation is {prompt_tokens} tokens and the context holds {n_ctx}, with {room} kept for the "
            "reply; /reset to start over, or restart with --context-shift (drops the oldest turns) or a larger --ctx")


def fit(conv: Conversation, *, count: Callable[[list[Message]], int], n_ctx: int, room: int,
        shift: bool) -> tuple[int, int]:
    """Make the conversation's prompt leave `room` tokens of the context for the reply.

    Args:
        count: messages -> prompt tokens (the template rendered and tokenized).
        shift: drop the oldest exchanges while needed (else refuse).

    Returns:
        (prompt tokens, messages dropped).

    Raises:
        UserError: it does not fit (without shift; or with it, not even the last user message).
    """
    limit = n_ctx - room
    n = count(conv.messages)
    dropped = 0
    while n > limit and shift and len(conv.turns) > 1:
        # one exchange: the oldest user message and the replies up to the next user message
        del conv.turns[0]
        dropped += 1
        while len(conv.turns) > 1 and conv.turns[0]["role"] != "user":
            del conv.turns[0]
            dropped += 1
        n = count(conv.messages)
    if n > limit:
        raise UserError(overflow_message(prompt_tokens=n, room=room, n_ctx=n_ctx))
    return n, dropped
