"""Incremental detokenizing: token ids -> text pieces that never split a UTF-8 character."""

from __future__ import annotations

import codecs

from ggufspec.llama.model import Model


class Detokenizer:
    """Token ids -> text pieces, never splitting a multi-byte UTF-8 character.

    Bytes of an incomplete character are held back until the token that completes it arrives.
    """

    def __init__(self, model: Model) -> None:
        self._model = model
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token: int) -> str:
        return self._decoder.decode(self._model.token_bytes(token))

    def flush(self) -> str:
        return self._decoder.decode(b"", final=True)
