"""One llama.cpp context holding several sequences, and a `Target` view of each (server slots).

`MultiContext` makes a context with `n_seq_max = n_seq` and `kv_unified = False`: every sequence
gets its own KV stream of `n_ctx` tokens. With a unified cache, the cells one sequence frees on a
rollback get reused by another, so a sequence's cells leave position order; flash attention then
sums in another order and greedy near-ties can flip. With one stream each, a sequence's cache is
laid out exactly as a one-sequence `Context` lays it out, whatever the others do.

With one stream per sequence llama.cpp splits a batch into ubatches of *consecutive* sequence ids
(a ubatch views a range of streams), so sequences 0 and 2 cost two passes over the weights where
0, 1 and 2 cost one: 41.8 ms against 25.1 for 0 and 1, and 0, 1, 3 46.4 ms against 31.5 for all
four (F32 SmolLM2, 2 threads). Server slots leave such gaps whenever a request ends before the next
one starts. A merged decode therefore fills each gap with one throwaway token of the idle sequence
at its next position, no logits, removed from its cache right after (`filled` counts them): one
pass for one more row. The sequence's cache is left as it was (the freed cell is where its next
token goes, as before), so its logits stay bit-identical (tests/test_multi.py).

`SeqView` implements `target.Target` for one sequence: its `decode` is a request to the context's
`Batcher`, which merges the decodes that views submit at the same time into ONE `llama_decode`
(different seq_ids in one llama_batch) and hands each view copies of its logits rows. Every
llama.cpp call of every context built with the same `lock` is serialized by it (rollbacks and
clears too: they must not run during a decode).
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass
from typing import Literal, Sequence

import numpy as np

from ggufspec.errors import UserError
from ggufspec.llama import lib, stall
from ggufspec.llama.context import RowViews, context_params
from ggufspec.llama.lib import HeldInterrupt, llama
from ggufspec.llama.model import Model
from ggufspec.loop.batcher import Batcher, Request
from ggufspec.loop.drafters import SharedPrefix
from ggufspec.settings import ContextSettings

LogitsMode = Literal["last", "all", "none"]


@dataclass(frozen=True)
class _Chunk:
    """A view's part of a merged decode: where it starts and which rows want logits."""

    seq: int
    pos: int  # KV position of its first token
    rows: tuple[bool, ...]  # per token: compute (and copy back) its logits


class MultiContext:
    """A context on one model with `n_seq` sequences of `settings.n_ctx` tokens each."""

    def __init__(self, model: Model, *, settings: ContextSettings, n_seq: int, lock: threading.Lock,
                 max_wait_s: float = 0.002) -> None:
        if n_seq < 1:
            raise ValueError(f"n_seq must be >= 1, got {n_seq}")
        if not settings.resolved:
            raise ValueError("resolve the 'auto' KV cache type first (ContextSettings.with_cache_type)")
        self.model = model
        self.settings = settings
        self.n_seq = n_seq
        self.lock = lock
        # n_ctx: llama.cpp divides it among the sequences
        params = context_params(settings, n_ctx=(settings.n_ctx or model.n_ctx_train) * n_seq, n_seq=n_seq)
        self._ptr = lib.new_context(model._ptr, params)
        if not self._ptr:
            raise UserError(
                f"llama.cpp could not create a context of {n_seq} sequences of {settings.n_ctx} tokens for "
                f"{model.path.name}; try a smaller --ctx or --parallel"
            )
        self.n_ctx: int = llama.llama_n_ctx_seq(self._ptr)  # per sequence
        self.n_batch: int = llama.llama_n_batch(self._ptr)
        self._mem = llama.llama_get_memory(self._ptr)
        self._batch = llama.llama_batch_init(self.n_batch, 0, 1)
        self._row_views = RowViews(model.n_vocab)
        self.batcher = Batcher(self._run, max_tokens=self.n_batch, max_wait_s=max_wait_s)
        self.views = tuple(SeqView(self, seq) for seq in range(n_seq))
        self.filled = 0  # throwaway tokens that filled a gap between the sequences of a decode

    def _run(self, requests: Sequence[Request]) -> None:
        """One llama_decode for every request; each gets {row: logits copy} for its asked rows."""
        # In sequence order: with one KV stream per sequence llama.cpp splits a batch into ubatches
        # of consecutive seq_ids in batch order (llama_batch_allocr::split_equal, sequential), so
        # sequences 1, 0 in arrival order would cost two passes over the weights, 0, 1 one; and
        # a gap (0, 2) is filled with a throwaway token of the idle sequence (module docstring).
        requests = sorted(requests, key=lambda r: r.payload.seq)
        seqs = [r.payload.seq for r in requests]
        gaps = sorted(set(range(seqs[0], seqs[-1] + 1)) - set(seqs))
        if sum(len(r.tokens) for r in requests) + len(gaps) > self.n_batch:
            gaps = []
        b = self._batch
        with self.lock, HeldInterrupt():
            fill = {}  # idle sequence -> the position of its throwaway token
            for s in gaps:
                pos = llama.llama_memory_seq_pos_max(self._mem, s) + 1
                if pos >= self.n_ctx:  # its cache is full: two passes, then
                    fill = {}
                    break
                fill[s] = pos
            i = 0
            for r in self._with_fill(requests, fill):
                if isinstance(r, tuple):  # (sequence, position) of a throwaway token
                    b.token[i], b.pos[i], b.n_seq_id[i], b.seq_id[i][0], b.logits[i] = 0, r[1], 1, r[0], False
                    i += 1
                    continue
                chunk: _Chunk = r.payload
                for j, tok in enumerate(r.tokens):
                    b.token[i] = tok
                    b.pos[i] = chunk.pos + j
                    b.n_seq_id[i] = 1
                    b.seq_id[i][0] = chunk.seq
                    b.logits[i] = chunk.rows[j]
                    i += 1
            b.n_tokens = i
            rc = lib.decode(self._ptr, b)  # waits for the device (Context.decode)
            for s, pos in fill.items():  # what reached the cache of an idle sequence goes again
                llama.llama_memory_seq_rm(self._mem, s, pos, -1)
            self.filled += len(fill)
            if rc != 0:
                # whatever part reached the caches is dropped: each view's tokens stay what it holds
                for r in requests:
                    llama.llama_memory_seq_rm(self._mem, r.payload.seq, r.payload.pos, -1)
                raise RuntimeError(f"llama_decode failed with code {rc}")
            i = 0
            for r in self._with_fill(requests, fill):
                if isinstance(r, tuple):
                    i += 1
                    continue
                rows: dict[int, np.ndarray] = {}
                for j, want in enumerate(r.payload.rows):
                    if want:
                        rows[j] = self._row_views.read(self._ptr, i + j).copy()
                r.result = rows
                i += len(r.tokens)

    @staticmethod
    def _with_fill(requests: Sequence[Request], fill: dict[int, int]) -> list:
        """The requests (in sequence order) with each throwaway (sequence, position) in its place."""
        out: list = [*requests, *fill.items()]
        return sorted(out, key=lambda r: r[0] if isinstance(r, tuple) else r.payload.seq)

    def warmup(self) -> None:
        """One throwaway decode (pages the weights in, builds the graph), then empty caches."""
        tok = self.model.bos if self.model.bos >= 0 else 0
        self.views[0].decode([tok, tok], logits="all")
        for v in self.views:
            v.clear()

    def close(self) -> None:
        ptr, self._ptr = getattr(self, "_ptr", None), None
        if ptr:
            llama.llama_batch_free(self._batch)
            lib.free_context(ptr)

    def __del__(self) -> None:  # pragma: no cover
        try:
            self.close()
        except Exception:
            pass


class SeqView:
    """One sequence of a `MultiContext` as a `Target` (the calls `llama.Context` offers)."""

    def __init__(self, owner: MultiContext, seq: int) -> None:
        self._owner = owner
        self.seq = seq
        self.model = owner.model
        self.settings = owner.settings
        self.n_ctx = owner.n_ctx
        self.n_batch = owner.n_batch
        self._tokens: list[int] = []
        self._shared = SharedPrefix()  # how much of the last history asked `_tokens` holds
        self._rows: dict[int, np.ndarray] = {}

    @property
    def multi(self) -> MultiContext:
        """The context this sequence lives in (its other sequences are the other slots')."""
        return self._owner

    @property
    def n_past(self) -> int:
        return len(self._tokens)

    @property
    def tokens(self) -> tuple[int, ...]:
        return tuple(self._tokens)

    def common_prefix(self, seq: Sequence[int]) -> int:
        """As `Context.common_prefix`."""
        return self._shared.ask(self._tokens, seq)

    def decode(self, tokens: Sequence[int], *, logits: LogitsMode = "last", wait: bool = True) -> None:
        """As `Context.decode`: n_batch chunks (the same boundaries), each merged with whatever the
        other sequences decode at that moment (the merged decode always waits for the device)."""
        n = len(tokens)
        if n == 0:
            return
        if self.n_past + n > self.n_ctx:
            raise UserError(
                f"context full: {self.n_past + n} tokens do not fit a context of {self.n_ctx}; raise --ctx"
            )
        if logits == "all" and n > self.n_batch:
            raise ValueError(f"cannot score {n} rows in one batch of {self.n_batch}")
        self._rows = {}
        for start in range(0, n, self.n_batch):
            chunk = [int(t) for t in tokens[start : start + self.n_batch]]
            last_chunk = start + self.n_batch >= n
            rows = [logits == "all"] * len(chunk)
            if logits == "last" and last_chunk:
                rows[-1] = True
            got = self._owner.batcher.submit(self.seq, chunk, _Chunk(self.seq, self.n_past, tuple(rows)))
            self._tokens.extend(chunk)
            if any(rows):
                self._rows = got

    def logits(self, i: int = -1) -> np.ndarray:
        """Logits (n_vocab,) of batch row i of the last decode (a copy; negative i from the last
        row with logits)."""
        if i < 0:
            order = sorted(self._rows)
            if -i > len(order):
                raise RuntimeError(f"no logits for batch row {i}")
            return self._rows[order[i]]
        row = self._rows.get(i)
        if row is None:
            raise RuntimeError(f"no logits for batch row {i}")
        return row

    def truncate(self, n_keep: int) -> None:
        if n_keep < self.n_past:
            with self._owner.lock:
                ok = llama.llama_memory_seq_rm(self._owner._mem, self.seq, n_keep, -1)
            if not ok:
                raise RuntimeError(f"KV rollback to {n_keep} failed")
            del self._tokens[n_keep:]
            self._shared.cut(n_keep)

    def clear(self) -> None:
        with self._owner.lock:
            llama.llama_memory_seq_rm(self._owner._mem, self.seq, -1, -1)
        self._tokens.clear()
        self._shared.reset()

    def warmup(self) -> None:
        self._owner.warmup()

    def state(self) -> bytes:
        """This sequence's KV cache as llama.cpp serialises it."""
        ptr = self._owner._ptr
        with self._owner.lock:
            size = llama.llama_state_seq_get_size(ptr, self.seq)
            buf = (ctypes.c_uint8 * size)()
            with HeldInterrupt(), stall.watching():
                n = llama.llama_state_seq_get_data(ptr, buf, size, self.seq)
        if n != size:
            raise RuntimeError(f"llama_state_seq_get_data wrote {n} of {size} bytes")
        return bytes(buf)

    def load_state(self, data: bytes, tokens: Sequence[int]) -> bool:
        """Replace this sequence's cache with `data` from `state()`; False (left empty) if refused."""
        self.clear()
        ptr = self._owner._ptr
        buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        with self._owner.lock:
            with HeldInterrupt(), stall.watching():
                n = llama.llama_state_seq_set_data(ptr, buf, len(data), self.seq)
            ok = n != 0 and llama.llama_memory_seq_pos_max(self._owner._mem, self.seq) == len(tokens) - 1
        if not ok:
            self.clear()
            return False
        self._tokens = [int(t) for t in tokens]
        self._shared.reset()
        return True

    def close(self) -> None:
        self._owner.close()
