"""The one module that imports llama_cpp (its low-level C API).

Everything else in ggufspec talks to llama.cpp through `Model` and `Context` here:
load, batch decode with logits only where asked, zero-copy logits rows, KV rollback,
tokenize / incremental detokenize, end-of-generation tokens, quantize.
"""

from __future__ import annotations

import codecs
import ctypes
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Literal, Sequence

import numpy as np

import llama_cpp as llama

from ggufspec.errors import UserError

# ---- process-wide set-up -------------------------------------------------------------------

_init_lock = threading.Lock()
_initialised = False
_verbose = False


@llama.llama_log_callback
def _log_callback(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    # llama.cpp and ggml log through here; quiet unless asked (--verbose-llama / set_verbose).
    if _verbose:
        sys.stderr.write(text.decode("utf-8", errors="replace"))


def set_verbose(verbose: bool) -> None:
    """Show llama.cpp's own log on stderr (off by default)."""
    global _verbose
    _verbose = verbose


def _ensure_init() -> None:
    global _initialised
    with _init_lock:
        if not _initialised:
            llama.llama_log_set(_log_callback, ctypes.c_void_p(0))
            llama.llama_backend_init()
            _initialised = True


def physical_cores() -> int:
    """Physical cores (psutil), the best default thread count for llama.cpp's matmuls."""
    import psutil

    return psutil.cpu_count(logical=False) or os.cpu_count() or 1


# ---- settings ------------------------------------------------------------------------------

CacheType = Literal["f16", "q8_0", "q4_0", "f32"]
_CACHE_TYPES: dict[str, int] = {
    "f32": llama.GGML_TYPE_F32,
    "f16": llama.GGML_TYPE_F16,
    "q8_0": llama.GGML_TYPE_Q8_0,
    "q4_0": llama.GGML_TYPE_Q4_0,
}
_FLASH = {
    "auto": llama.LLAMA_FLASH_ATTN_TYPE_AUTO,
    "on": llama.LLAMA_FLASH_ATTN_TYPE_ENABLED,
    "off": llama.LLAMA_FLASH_ATTN_TYPE_DISABLED,
}


@dataclass(frozen=True, kw_only=True)
class ModelSettings:
    """Where a model's weights go (see plan.OffloadPlan.to_load_kwargs)."""

    n_gpu_layers: int = 0  # -1 = all
    main_gpu: int = 0
    tensor_split: tuple[float, ...] | None = None
    use_mmap: bool = True


@dataclass(frozen=True, kw_only=True)
class ContextSettings:
    """One inference context: its KV cache size and threads."""

    n_ctx: int = 4096
    n_batch: int = 512
    n_threads: int | None = None  # None = physical cores
    n_threads_batch: int | None = None
    # "on": with it, Q8_0/Q4_0/Q4_1 weights give bit-identical logits whatever the batch shape on CPU
    # (measured), which greedy speculative decoding needs to equal the target alone token for token.
    flash_attn: Literal["auto", "on", "off"] = "on"
    cache_type_k: CacheType = "f16"
    cache_type_v: CacheType = "f16"

    def __post_init__(self) -> None:
        if self.n_ctx < 8:
            raise UserError(f"context size must be at least 8 tokens, got {self.n_ctx}")
        for name in (self.cache_type_k, self.cache_type_v):
            if name not in _CACHE_TYPES:
                raise UserError(f"unknown KV cache type {name!r}; choose one of: {', '.join(_CACHE_TYPES)}")


# ---- model ---------------------------------------------------------------------------------


class Model:
    """A loaded GGUF model: weights, vocabulary and tokenizer."""

    def __init__(self, path: Path | str, *, settings: ModelSettings = ModelSettings()) -> None:
        _ensure_init()
        self.path = Path(path)
        if not self.path.is_file():
            raise UserError(f"model file not found: {self.path}; check the path or pull it first")
        params = llama.llama_model_default_params()
        params.n_gpu_layers = settings.n_gpu_layers
        params.main_gpu = settings.main_gpu
        params.use_mmap = settings.use_mmap
        self._split = None
        if settings.tensor_split:
            n = llama.llama_max_devices()
            arr = (ctypes.c_float * n)(*list(settings.tensor_split)[:n])
            self._split = arr  # keep alive for the duration of the load
            params.tensor_split = arr
        self._ptr = llama.llama_model_load_from_file(str(self.path).encode(), params)
        if not self._ptr:
            raise UserError(
                f"llama.cpp could not load {self.path}: not a valid GGUF model, truncated, or an "
                "architecture this llama.cpp does not know; re-download it or run `ggufspec inspect` on it"
            )
        self._vocab = llama.llama_model_get_vocab(self._ptr)
        self.n_vocab: int = llama.llama_vocab_n_tokens(self._vocab)
        self.n_ctx_train: int = llama.llama_model_n_ctx_train(self._ptr)
        self.n_layer: int = llama.llama_model_n_layer(self._ptr)
        self.bos: int = llama.llama_vocab_bos(self._vocab)
        self.eos: int = llama.llama_vocab_eos(self._vocab)
        self.add_bos: bool = bool(llama.llama_vocab_get_add_bos(self._vocab))
        self._piece_cache: dict[int, bytes] = {}
        self._eog_cache: dict[int, bool] = {}

    # tokenizer -----------------------------------------------------------------------------

    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = False) -> list[int]:
        """Text -> token ids (add_special adds BOS where the model wants it)."""
        data = text.encode("utf-8")
        cap = len(data) + 8
        buf = (llama.llama_token * cap)()
        n = llama.llama_tokenize(self._vocab, data, len(data), buf, cap, add_special, parse_special)
        if n < 0:
            cap = -n
            buf = (llama.llama_token * cap)()
            n = llama.llama_tokenize(self._vocab, data, len(data), buf, cap, add_special, parse_special)
        return list(buf[:n])

    def token_bytes(self, token: int) -> bytes:
        """The bytes one token renders to (control tokens render to nothing)."""
        piece = self._piece_cache.get(token)
        if piece is None:
            buf = ctypes.create_string_buffer(64)
            n = llama.llama_token_to_piece(self._vocab, token, buf, 64, 0, False)
            if n < 0:
                buf = ctypes.create_string_buffer(-n)
                n = llama.llama_token_to_piece(self._vocab, token, buf, -n, 0, False)
            piece = buf.raw[:n]
            self._piece_cache[token] = piece
        return piece

    def token_text(self, token: int) -> str:
        """The vocabulary's stored text of a token (as in the GGUF), for messages."""
        raw = llama.llama_vocab_get_text(self._vocab, token)
        return raw.decode("utf-8", errors="replace") if raw else ""

    def detokenize(self, tokens: Iterable[int]) -> str:
        return b"".join(self.token_bytes(t) for t in tokens).decode("utf-8", errors="replace")

    def is_eog(self, token: int) -> bool:
        """End of generation (EOS, EOT, <|im_end|>, ...), as the model's vocabulary marks it."""
        hit = self._eog_cache.get(token)
        if hit is None:
            hit = bool(llama.llama_vocab_is_eog(self._vocab, token))
            self._eog_cache[token] = hit
        return hit

    def chat_template(self) -> str | None:
        raw = llama.llama_model_chat_template(self._ptr, None)
        return raw.decode("utf-8") if raw else None

    def special_text(self, token: int) -> str:
        """Text of a special token (BOS/EOS) as templates spell it."""
        if token < 0:
            return ""
        buf = ctypes.create_string_buffer(256)
        n = llama.llama_token_to_piece(self._vocab, token, buf, 256, 0, True)
        return buf.raw[: max(n, 0)].decode("utf-8", errors="replace")

    def meta(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(1024)
        n = llama.llama_model_meta_val_str(self._ptr, key.encode(), buf, 1024)
        return buf.value.decode("utf-8", errors="replace") if n >= 0 else None

    def close(self) -> None:
        if getattr(self, "_ptr", None):
            llama.llama_model_free(self._ptr)
            self._ptr = None

    def __del__(self) -> None:  # pragma: no cover - interpreter shutdown order varies
        try:
            self.close()
        except Exception:
            pass


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


# ---- context -------------------------------------------------------------------------------


class Context:
    """An inference context on one model: a KV cache for sequence 0 and a reusable batch."""

    def __init__(self, model: Model, *, settings: ContextSettings = ContextSettings()) -> None:
        self.model = model
        self.settings = settings
        params = llama.llama_context_default_params()
        params.n_ctx = settings.n_ctx
        params.n_batch = settings.n_batch
        params.n_ubatch = min(settings.n_batch, 512)
        params.n_seq_max = 1
        threads = settings.n_threads or physical_cores()
        params.n_threads = threads
        params.n_threads_batch = settings.n_threads_batch or threads
        params.flash_attn_type = _FLASH[settings.flash_attn]
        params.type_k = _CACHE_TYPES[settings.cache_type_k]
        params.type_v = _CACHE_TYPES[settings.cache_type_v]
        params.no_perf = True
        self._ptr = llama.llama_init_from_model(model._ptr, params)
        if not self._ptr:
            raise UserError(
                f"llama.cpp could not create a context of {settings.n_ctx} tokens for {model.path.name}; "
                "try a smaller --ctx, or f16 KV cache (quantized V cache needs flash attention)"
            )
        self.n_ctx: int = llama.llama_n_ctx(self._ptr)
        self.n_batch = settings.n_batch
        self._mem = llama.llama_get_memory(self._ptr)
        self._batch = llama.llama_batch_init(self.n_batch, 0, 1)
        self._n_vocab = model.n_vocab
        self.n_past = 0  # tokens in the KV cache (positions 0..n_past-1)

    def decode(self, tokens: Sequence[int], *, logits: Literal["last", "all", "none"] = "last") -> None:
        """Append tokens to the KV cache at positions n_past.., computing logits only where asked.

        "all" is for verification: row i (0-based) then scores the token after tokens[i].
        Long inputs are split into n_batch chunks; "all" must fit one batch.
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
            for i, tok in enumerate(chunk):
                b.token[i] = tok
                b.pos[i] = self.n_past + i
                b.n_seq_id[i] = 1
                b.seq_id[i][0] = 0
                b.logits[i] = logits == "all"
            if logits == "last" and last_chunk:
                b.logits[len(chunk) - 1] = True
            b.n_tokens = len(chunk)
            rc = llama.llama_decode(self._ptr, b)
            if rc != 0:
                raise RuntimeError(f"llama_decode failed with code {rc} at position {self.n_past}")
            self.n_past += len(chunk)

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
        ptr = llama.llama_get_logits_ith(self._ptr, i)
        if not ptr:
            raise RuntimeError(f"no logits for batch row {i}")
        return np.ctypeslib.as_array(ptr, shape=(self._n_vocab,))

    def truncate(self, n_keep: int) -> None:
        """Roll the KV cache back to its first n_keep tokens (drop positions >= n_keep)."""
        if n_keep < self.n_past:
            if not llama.llama_memory_seq_rm(self._mem, 0, n_keep, -1):
                raise RuntimeError(f"KV rollback to {n_keep} failed")
            self.n_past = n_keep

    def clear(self) -> None:
        llama.llama_memory_clear(self._mem, True)
        self.n_past = 0

    def close(self) -> None:
        if getattr(self, "_ptr", None):
            llama.llama_batch_free(self._batch)
            llama.llama_free(self._ptr)
            self._ptr = None

    def __del__(self) -> None:  # pragma: no cover
        try:
            self.close()
        except Exception:
            pass


# ---- quantize ------------------------------------------------------------------------------

FTYPES: dict[str, int] = {
    name.removeprefix("LLAMA_FTYPE_MOSTLY_").removeprefix("LLAMA_FTYPE_ALL_"): getattr(llama, name)
    for name in dir(llama)
    if name.startswith(("LLAMA_FTYPE_MOSTLY_", "LLAMA_FTYPE_ALL_"))
}


def quantize(*, src: Path, dst: Path, ftype: str, n_threads: int | None = None) -> Path:
    """Re-encode a GGUF with llama.cpp's own quantizer (requantizing allowed), atomically.

    Args:
        src: input GGUF.
        dst: output path; written to a temporary file beside it, then renamed.
        ftype: "F32", "F16", "Q8_0", "Q4_0", "Q2_K", ... (llama.cpp's LLAMA_FTYPE names).

    Raises:
        UserError: unknown ftype, or llama.cpp failed.
    """
    _ensure_init()
    key = ftype.upper()
    if key not in FTYPES:
        raise UserError(f"unknown quantization {ftype!r}; choose one of: {', '.join(sorted(FTYPES))}")
    params = llama.llama_model_quantize_default_params()
    params.ftype = FTYPES[key]
    params.allow_requantize = True
    params.nthread = n_threads or physical_cores()
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
    try:
        rc = llama.llama_model_quantize(str(src).encode(), str(tmp).encode(), ctypes.byref(params))
        if rc != 0:
            raise UserError(f"llama.cpp failed to quantize {src.name} to {key} (code {rc})")
        os.replace(tmp, dst)
    finally:
        tmp.unlink(missing_ok=True)
    return dst
