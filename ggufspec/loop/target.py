"""What the draft/verify loop needs from a model: the `Target` protocol (pure).

`ggufspec.llama.Context` implements it on llama.cpp; `tests/fakes.py` implements it in pure
Python, so the loop, rollback, stop strings, the draft controller and every acceptance path are tested in
milliseconds without compiled llama.cpp or weights. A draft model's context is a `Target` too:
the `ModelDrafter` drives it through the same five calls.

Positions: the KV cache holds tokens 0..n_past-1 of one sequence. `decode` appends at n_past;
row i of its logits scores the token after batch token i; `truncate(n)` keeps positions 0..n-1.
`tokens` are the ids at those positions (len(tokens) == n_past, always: a decode that fails
leaves neither), so a new prompt can start from its longest common prefix with them.
"""

from __future__ import annotations

from typing import Literal, Protocol, Sequence

import numpy as np

LogitRows = Literal["last", "all", "none"]


class Vocab(Protocol):
    """The vocabulary facts the loop asks for."""

    def is_eog(self, token: int) -> bool:
        """End of generation (EOS, EOT, <|im_end|>, ...)."""
        ...

    def token_bytes(self, token: int) -> bytes:
        """The bytes one token renders to."""
        ...


class Target(Protocol):
    """A model context with a rollback-able KV cache for one sequence."""

    n_ctx: int  # KV cache capacity, tokens
    n_batch: int  # most tokens one decode takes; a verify of K+1 rows must fit
    n_past: int  # tokens in the KV cache
    # decodes run on a device that computes while the caller goes on (a GPU, an RPC worker):
    # `decode(wait=False)` returns at once and the first `logits` read waits for the result. The
    # loop then does its bookkeeping in between (ggufspec.loop.round_runner). Optional: a Target
    # without it is taken as synchronous.
    asynchronous: bool

    @property
    def tokens(self) -> Sequence[int]:
        """The token ids in the KV cache, positions 0..n_past-1 (read-only for callers)."""
        ...

    def common_prefix(self, seq: Sequence[int]) -> int:
        """How many leading tokens of `seq` the KV cache holds (`drafters.common_prefix` of
        `tokens` and `seq`, without copying `tokens`: a draft model asks every round)."""
        ...

    @property
    def model(self) -> Vocab: ...

    def decode(self, tokens: Sequence[int], *, logits: LogitRows = "last", wait: bool = True) -> None:
        """Append tokens at n_past; compute logits for the last row, every row, or none. `wait`:
        return once the device is done, so that the call's seconds are its own (False: another
        decode follows at once)."""
        ...

    def logits(self, i: int = -1) -> np.ndarray:
        """(n_vocab,) float32 logits of row i of the last decode (negative i from the end)."""
        ...

    def truncate(self, n: int) -> None:
        """Keep KV positions 0..n-1 (drop rejected drafts)."""
        ...

    def clear(self) -> None:
        """Empty the KV cache."""
        ...
