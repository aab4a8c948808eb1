"""Token ids -> the text a user sees: incremental UTF-8 decoding and stop strings (pure).

Both hold text back rather than release something wrong: the bytes of an unfinished UTF-8
character until the token that completes it, and any tail that could still become a stop string.
"""

from __future__ import annotations

import codecs
from typing import Protocol, Sequence


class TokenBytes(Protocol):
    def token_bytes(self, token: int) -> bytes:
        """The bytes one token renders to (control tokens render to nothing)."""
        ...


class Detokenizer:
    """Token ids -> text pieces, never splitting a multi-byte UTF-8 character."""

    def __init__(self, vocab: TokenBytes) -> None:
        self._vocab = vocab
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token: int) -> str:
        return self._decoder.decode(self._vocab.token_bytes(token))

    def flush(self) -> str:
        return self._decoder.decode(b"", final=True)


class StopText:
    """Releases text, holding back any tail that could start a stop string."""

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = [s for s in stops if s]
        self.pending = ""

    def push(self, piece: str) -> tuple[str, bool]:
        """Returns (text to release, stopped): on a stop, the text before it."""
        text = self.pending + piece
        if not self.stops:
            self.pending = ""
            return text, False
        hits = [i for i in (text.find(s) for s in self.stops) if i >= 0]
        if hits:
            self.pending = ""
            return text[: min(hits)], True
        hold = 0
        for s in self.stops:  # longest suffix of text that is a proper prefix of a stop string
            for n in range(min(len(s) - 1, len(text)), hold, -1):
                if text.endswith(s[:n]):
                    hold = n
                    break
        self.pending = text[len(text) - hold :] if hold else ""
        return text[: len(text) - hold], False

    def flush(self) -> str:
        text, self.pending = self.pending, ""
        return text
