"""An inference context on one model: its KV cache, batch decode, logits rows, rollback."""

from __future__ import annotations

import ctypes
from typing import Literal, Sequence

import numpy as np

from ggufspec.errors import UserError
from ggufspec.hardware import physical_cores
from ggufspec.llama import devices, lib, stall
from ggufspec.llama.lib import HeldInterrupt, llama
from ggufspec.llama.model import Model
from ggufspec.loop.drafters import SharedPrefix
from ggufspec.settings import CACHE_TYPES as SETTINGS_CACHE_TYPES
from ggufspec.settings import ContextSettings

# ggufspec.settings holds the one ContextSettings (shared with the planner); here, llama.cpp's enums
CACHE_TYPES: dict[str, int] = {
    "f32": llama.GGML_TYPE_F32,
    "f16": llama.GGML_TYPE_F16,
    "q8_0": llama.GGML_TYPE_Q8_0,
    "q4_0": llama.GGML_TYPE_Q4_0,
}
assert set(CACHE_TYPES) == set(SETTINGS_CACHE_TYPES)
FLASH_ATTN: dict[str, int] = {
    "auto": llama.LLAMA_FLASH_ATTN_TYPE_AUTO,
    "on": llama.LLAMA_FLASH_ATTN_TYPE_ENABLED,
    "off": llama.LLAMA_FLASH_ATTN_TYPE_DISABLED,
}


def context_params(settings: ContextSettings, *, n_ctx: int, n_seq: int = 1):
    """llama.cpp's context parameters for `settings` (a resolved cache type): `n_ctx` tokens in
    all, `n_seq` sequences (several: one KV stream each, not a unified cache)."""
    params = llama.llama_context_default_params()
    params.n_ctx = n_ctx
    params.n_batch = settings.n_batch
    params.n_ubatch = min(settings.n_batch, settings.n_ubatch)
    params.n_seq_max = n_seq
    if n_seq > 1:
        params.kv_unified = False
    threads = settings.n_threads or physical_cores()
    params.n_threads = threads
    params.n_threads_batch = settings.n_threads_batch or threads
    params.flash_attn_type = FLASH_ATTN[settings.flash_attn]
    params.type_k = CACHE_TYPES[settings.cache_type_k]
    params.type_v = CACHE_TYPES[settings.cache_type_v]
    params.no_perf = True
    return params


class RowViews:
    """Float32 (n_vocab,) numpy views of llama.cpp's logits rows, one made per row address and kept.

    A row read runs right after a decode has evicted the caches: there a fresh view (a ctypes
    pointer taken apart, an array type over it, np.frombuffer) cost 33 us a row and a lookup of
    the address 2 (the target alone's round: 50 us for its row before the argmax, 17 after; a
    2-core EPYC, Q8_0 SmolLM2). A kept view is handed out only for an address llama.cpp has just
    returned as a row's, so its memory is that row's (valid until the next decode, as any view)."""

    __slots__ = ("_type", "_views", "_keep")

    def __init__(self, n_vocab: int, *, keep: int = 4096) -> None:
        self._type = ctypes.c_float * n_vocab
        self._views: dict[int, np.ndarray] = {}
        # views kept at most (a context's rows are at most n_batch addresses per output buffer)
        self._keep = keep

    def read(self, ctx: object, i: int) -> np.ndarray:
        """Batch row i of context `ctx`'s last decode (waits for the decode's graph, on RPC workers too)."""
        address = stall.watched(lib.logits_address, ctx, i)
        if not address:
            raise RuntimeError(f"no logits for batch row {i}")
        return self(address)

    def __call__(self, address: int) -> np.ndarray:
        view = self._views.get(address)
        if view is None:
            if len(self._views) >= self._keep:  # (the output buffer moved more than a few times)
                self._views.clear()
            view = self._views[address] = np.frombuffer(self._type.from_address(address), dtype=np.float32)
        return view


class Context:
    """An inference context on one model: a KV cache for sequence 0 and a reusable batch."""

    def __init__(self, model: Model, *, settings: ContextSettings | None = None) -> None:
        # no settings: the defaults with an f16 cache
        settings = settings if settings is not None else ContextSettings().with_cache_type("f16")
        if not settings.resolved:
            raise ValueError("resolve the 'auto' KV cache type first (ContextSettings.with_cache_type)")
        self.model = model
        self.settings = settings
        self._ptr = lib.new_context(model._ptr, context_params(settings, n_ctx=settings.n_ctx))
        if not self._ptr:
            raise UserError(
                f"llama.cpp could not create a context of {settings.n_ctx} tokens for {model.path.name} "
                "(most often: not enough memory for its KV cache; --llama-log shows llama.cpp's reason); "
                "try a smaller --ctx"
            )
        # llama.cpp may round n_ctx up and clamp n_batch to it: use what it actually made.
        self.n_ctx: int = llama.llama_n_ctx(self._ptr)
        self.n_batch: int = llama.llama_n_batch(self._ptr)
        self._mem = llama.llama_get_memory(self._ptr)
        self._batch = llama.llama_batch_init(self.n_batch, 0, 1)
        for i in range(self.n_batch):  # every token of every batch: sequence 0 alone
            self._batch.n_seq_id[i] = 1
            self._batch.seq_id[i][0] = 0
        self._row_views = RowViews(model.n_vocab)
        # llama_synchronize after a decode: not where every device is the CPU's (decodes return done)
        self._sync = not devices.cpu_only()
        # `Target.asynchronous`: a decode may return before the device is done (a GPU's, an RPC
        # worker's), so the loop can do its bookkeeping meanwhile
        self.asynchronous: bool = self._sync
        self._tokens: list[int] = []  # the ids at KV positions 0..n_past-1
        self._shared = SharedPrefix()  # how much of the last history asked `_tokens` holds

    @property
    def n_past(self) -> int:
        """Tokens in the KV cache (positions 0..n_past-1)."""
        return len(self._tokens)

    @property
    def tokens(self) -> tuple[int, ...]:
        """The token ids in the KV cache, in position order (only chunks that decoded)."""
        return tuple(self._tokens)

    def common_prefix(self, seq: Sequence[int]) -> int:
        """How many leading tokens of `seq` the KV cache holds (its token list, not a copy)."""
        return self._shared.ask(self._tokens, seq)

    def decode(self, tokens: Sequence[int], *, logits: Literal["last", "all", "none"] = "last",
               wait: bool = True) -> None:
        """Append tokens to the KV cache at positions n_past.., computing logits only where asked.

        "all" is for verification: row i (0-based) then scores the token after tokens[i].
        Long inputs are split into n_batch chunks; "all" must fit one batch.
        wait: return once the backend is done. A GPU backend returns from llama_decode before its
        work is, and the seconds then land on whatever waits next (the logits read): on an H200
        a 7B stand-in's verify read 0.3 ms a token where it takes 2.1. False only where another
        decode follows at once inside the same timed span.
        """
        n = len(tokens)
        if n == 0:
            return
        if self.n_past + n > self.n_ctx:
            raise UserError(
                f"context full: {self.n_past + n} tokens do not fit a context of {self.n_ctx}; raise --ctx"
            )
        if logits == "all" and n > self.n_batch:
            raise ValueError(f"cannot score {n} rows in one batch of {self.n_batch}")
        b = self._batch
        for start in range(0, n, self.n_batch):
            chunk = tokens[start : start + self.n_batch]
            last_chunk = start + self.n_batch >= n
            n_past, every = self.n_past, logits == "all"
            for i, tok in enumerate(chunk):
                b.token[i] = tok
                b.pos[i] = n_past + i
                b.logits[i] = every
            if logits == "last" and last_chunk:
                b.logits[len(chunk) - 1] = True
            b.n_tokens = len(chunk)
            with HeldInterrupt():  # llama.cpp may log from inside a decode (see lib)
                rc = lib.decode(self._ptr, b, wait=wait and self._sync)
                if rc == 0:
                    self._tokens.extend(map(int, chunk))
            if rc != 0:
                # whatever part of the chunk reached the cache is dropped: tokens stay what it holds
                llama.llama_memory_seq_rm(self._mem, 0, self.n_past, -1)
                raise RuntimeError(f"llama_decode failed with code {rc} at position {self.n_past}")

    def warmup(self) -> None:
        """One throwaway decode: pages the weights in and builds the compute graph, so the first
        measured generation is not charged for it (llama.cpp's own tools do the same)."""
        tok = self.model.bos if self.model.bos >= 0 else 0
        self.decode([tok, tok], logits="all")
        self.clear()

    def logits(self, i: int = -1) -> np.ndarray:
        """Logits (n_vocab,) float32 of batch row i of the last decode: a view, not a copy.

        Valid until the next decode. Negative i counts from the last row with logits.
        """
        return self._row_views.read(self._ptr, i)

    def truncate(self, n_keep: int) -> None:
        """Roll the KV cache back to its first n_keep tokens (drop positions >= n_keep)."""
        if n_keep < self.n_past:
            if not llama.llama_memory_seq_rm(self._mem, 0, n_keep, -1):
                raise RuntimeError(f"KV rollback to {n_keep} failed")
            del self._tokens[n_keep:]
            self._shared.cut(n_keep)

    def state(self) -> bytes:
        """The KV cache of sequence 0 as llama.cpp serialises it (llama_state_seq_get_data)."""
        size = llama.llama_state_seq_get_size(self._ptr, 0)
        buf = (ctypes.c_uint8 * size)()
        with HeldInterrupt(), stall.watching():
            n = llama.llama_state_seq_get_data(self._ptr, buf, size, 0)
        if n != size:
            raise RuntimeError(f"llama_state_seq_get_data wrote {n} of {size} bytes")
        return bytes(buf)

    def load_state(self, data: bytes, tokens: Sequence[int]) -> bool:
        """Replace the KV cache with `data` from `state()` holding `tokens`; False (cache left
        empty) when llama.cpp refuses it (another model, context or cache type)."""
        self.clear()
        buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        with HeldInterrupt(), stall.watching():
            n = llama.llama_state_seq_set_data(self._ptr, buf, len(data), 0)
        if n == 0 or llama.llama_memory_seq_pos_max(self._mem, 0) != len(tokens) - 1:
            self.clear()
            return False
        self._tokens = [int(t) for t in tokens]
        self._shared.reset()
        return True

    def clear(self) -> None:
        llama.llama_memory_clear(self._mem, True)
        self._tokens.clear()
        self._shared.reset()

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
