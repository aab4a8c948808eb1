"""The one module that imports llama_cpp (its low-level C API).

Everything else in ggufspec talks to llama.cpp through `Model` and `Context` here:
load, batch decode with logits only where asked, zero-copy logits rows, KV rollback,
tokenize / incremental detokenize, end-of-generation tokens, quantize.
"""

from __future__ import annotations

import codecs
import ctypes
import functools
import os
import re
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Literal, Mapping, Sequence

import numpy as np

from ggufspec import kernels

kernels.activate()  # before llama_cpp is imported: it loads its libraries at import

import llama_cpp as llama  # noqa: E402

from ggufspec.errors import UserError  # noqa: E402
from ggufspec.settings import CACHE_TYPES, ContextSettings, ModelSettings  # noqa: E402
from ggufspec.text import Detokenizer  # noqa: E402,F401  (re-exported: it needs only token_bytes)

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


@functools.cache
def batch_invariant_kernels() -> bool:
    """True when llama.cpp's CPU matmuls give a token the same logits whatever its batch holds,
    for every weight type: a CPU backend without llamafile's tinyBLAS (see ggufspec.kernels).
    With tinyBLAS only Q8_0/Q4_0/Q4_1 weights are batch-invariant (measured)."""
    return b"LLAMAFILE = 1" not in llama.llama_print_system_info()


def physical_cores() -> int:
    """Physical cores (psutil), the best default thread count for llama.cpp's matmuls."""
    import psutil

    return psutil.cpu_count(logical=False) or os.cpu_count() or 1


# ---- settings (ggufspec.settings: one definition shared with the planner) -------------------

_CACHE_TYPES: dict[str, int] = {
    "f32": llama.GGML_TYPE_F32,
    "f16": llama.GGML_TYPE_F16,
    "q8_0": llama.GGML_TYPE_Q8_0,
    "q4_0": llama.GGML_TYPE_Q4_0,
}
assert set(_CACHE_TYPES) == set(CACHE_TYPES)
_FLASH = {
    "auto": llama.LLAMA_FLASH_ATTN_TYPE_AUTO,
    "on": llama.LLAMA_FLASH_ATTN_TYPE_ENABLED,
    "off": llama.LLAMA_FLASH_ATTN_TYPE_DISABLED,
}


@functools.cache
def gpu_offload_supported() -> bool:
    """True when this llama.cpp build has a device to offload layers to (CUDA, Metal, Vulkan, ...)."""
    return bool(llama.llama_supports_gpu_offload())


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
        if not settings.use_mmap:  # 0.3.36 has load_mode, not use_mmap
            params.load_mode = llama.LLAMA_LOAD_MODE_NONE
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


# ---- context -------------------------------------------------------------------------------


class Context:
    """An inference context on one model: a KV cache for sequence 0 and a reusable batch."""

    def __init__(self, model: Model, *, settings: ContextSettings | None = None) -> None:
        # no settings: the defaults with an f16 cache
        settings = settings if settings is not None else ContextSettings().with_cache_type("f16")
        if not settings.resolved:
            raise ValueError("resolve the 'auto' KV cache type first (ContextSettings.with_cache_type)")
        self.model = model
        self.settings = settings
        params = llama.llama_context_default_params()
        params.n_ctx = settings.n_ctx
        params.n_batch = settings.n_batch
        params.n_ubatch = min(settings.n_batch, settings.n_ubatch)
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
        # llama.cpp may round n_ctx up and clamp n_batch to it: use what it actually made.
        self.n_ctx: int = llama.llama_n_ctx(self._ptr)
        self.n_batch: int = llama.llama_n_batch(self._ptr)
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


# ---- dry-run memory measurement ----------------------------------------------------------
#
# llama.cpp itself says what a model and a context would take: a load with `no_alloc` model
# parameters simulates every allocation, and the log then reports each buffer it would have made
# (KV cache, compute, output) plus where each layer went. In this build the weight buffers of a
# no_alloc load are zero-sized dummies, so the weights figure is llama.cpp's own tensor total
# (`llama_model_size`) unless a buffer line reports more. Everything here is read from llama.cpp's
# log through `llama_log_set`; the previous log callback is restored afterwards.


@dataclass(frozen=True, kw_only=True)
class MeasuredMemory:
    """What llama.cpp reports for one model and one context (bytes).

    `buffers` holds every buffer line as (kind, buffer name, bytes) with kind in
    model / kv / compute / output; `kv_bytes` sums the KV caches (both caches of an
    interleaved sliding-window model). Log figures are printed in MiB with two decimals, so
    each one is exact to +/- 0.005 MiB (about 5 KiB).
    """

    weights_bytes: int
    kv_bytes: int
    compute_bytes: int
    output_bytes: int
    n_ctx: int
    buffers: tuple[tuple[str, str, int], ...]
    layer_devices: tuple[str, ...]  # one per layer, then the output layer
    swa_layers: tuple[bool, ...]
    dry_run: bool

    @property
    def n_offloaded(self) -> int:
        """Layers (blocks and the output layer) llama.cpp put on a device other than the CPU."""
        return sum(d != "CPU" for d in self.layer_devices)


_MIB = 1024 * 1024
_BUFFER_LINE = r"^\S+:\s+(\S+)\s+(model|KV|compute|output) buffer size =\s*([\d.]+) MiB"


def _last_error(lines: list[str]) -> str:
    """llama.cpp's own reason, for a one-line message: its last error line, else its last line."""
    meaningful = [ln.strip() for ln in lines if ln.strip().strip(".")]
    for line in reversed(meaningful):
        if "error" in line.lower() or "failed" in line.lower():
            return line
    return meaningful[-1] if meaningful else "no reason given in its log"


def measure_memory(
    *,
    path: Path | str,
    n_ctx: int,
    cache_type_k: str = "f16",
    cache_type_v: str = "f16",
    n_gpu_layers: int = 0,
    tensor_split: tuple[float, ...] | None = None,
    main_gpu: int = 0,
    n_batch: int = 512,
    n_ubatch: int = 512,
    flash_attn: str = "auto",
    swa_full: bool = True,
    dry_run: bool = True,
) -> MeasuredMemory:
    """Ask llama.cpp what loading `path` with one context of `n_ctx` tokens takes.

    Args:
        path: the GGUF file (first shard of a split model).
        n_ctx: context size in tokens (0 = the trained context).
        cache_type_k: KV cache type for K: f16, q8_0, q4_0 or f32.
        cache_type_v: KV cache type for V.
        n_gpu_layers: layers to offload, counted from the output layer back (-1 = all).
        tensor_split: proportion of the offloaded layers per GPU.
        main_gpu: the GPU for scratch buffers.
        n_batch: logical batch size of the context.
        n_ubatch: physical batch size (the compute buffer is reserved for it).
        flash_attn: auto, on or off.
        swa_full: keep full-size caches for sliding-window layers (llama.cpp's default).
        dry_run: simulate allocations (`no_alloc`); False loads for real (mmap) and measures
            the real buffers.

    Returns:
        The measured sizes.

    Raises:
        UserError: the file is missing or llama.cpp cannot load it or make the context.
    """
    context = dict(n_ctx=n_ctx, cache_type_k=cache_type_k, cache_type_v=cache_type_v, n_batch=n_batch,
                   n_ubatch=n_ubatch, flash_attn=flash_attn, swa_full=swa_full)
    return measure_contexts(path=path, contexts=[context], n_gpu_layers=n_gpu_layers, tensor_split=tensor_split,
                            main_gpu=main_gpu, dry_run=dry_run)[0]


def measure_contexts(
    *,
    path: Path | str,
    contexts: Sequence[Mapping[str, Any]],
    n_gpu_layers: int = 0,
    tensor_split: tuple[float, ...] | None = None,
    main_gpu: int = 0,
    dry_run: bool = True,
) -> list[MeasuredMemory]:
    """`measure_memory` for several contexts of one model, loading the model once.

    Args:
        path: the GGUF file (first shard of a split model).
        contexts: one mapping per context with `measure_memory`'s context keywords (n_ctx,
            cache_type_k, cache_type_v, n_batch, n_ubatch, flash_attn, swa_full).
        n_gpu_layers: layers to offload, counted from the output layer back (-1 = all).
        tensor_split: proportion of the offloaded layers per GPU.
        main_gpu: the GPU for scratch buffers.
        dry_run: simulate allocations (`no_alloc`); False allocates for real.

    Returns:
        One measurement per context, in order.

    Raises:
        UserError: the file is missing, llama.cpp cannot load it or make a context, or a
            context has an unknown setting.
    """
    allowed = {"n_ctx", "cache_type_k", "cache_type_v", "n_batch", "n_ubatch", "flash_attn", "swa_full"}
    settings = []
    for c in contexts:
        unknown = set(c) - allowed
        if unknown or "n_ctx" not in c:
            raise UserError(f"a context needs n_ctx and only {', '.join(sorted(allowed))}; got {sorted(c)}")
        s = {"cache_type_k": "f16", "cache_type_v": "f16", "n_batch": 512, "n_ubatch": 512,
             "flash_attn": "auto", "swa_full": True, **c}
        for t in (s["cache_type_k"], s["cache_type_v"]):
            if t not in _CACHE_TYPES:
                raise UserError(f"unknown KV cache type {t!r}; choose one of: {', '.join(_CACHE_TYPES)}")
        if s["flash_attn"] not in _FLASH:
            raise UserError(f"unknown flash attention mode {s['flash_attn']!r}; choose auto, on or off")
        settings.append(s)
    path = Path(path)
    if not path.is_file():
        raise UserError(f"model file not found: {path}; check the path")

    lines: list[str] = []

    @llama.llama_log_callback
    def capture(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        lines.append(text.decode("utf-8", errors="replace"))

    def parse_buffers(text: str) -> list[tuple[str, str, int]]:
        kinds = {"model": "model", "KV": "kv", "compute": "compute", "output": "output"}
        return [(kinds[m.group(2)], m.group(1), round(float(m.group(3)) * _MIB))
                for m in re.finditer(_BUFFER_LINE, text, re.M)]

    prev_cb = llama.llama_log_callback()
    prev_ud = ctypes.c_void_p()
    llama.llama_log_get(ctypes.byref(prev_cb), ctypes.byref(prev_ud))
    llama.llama_log_set(capture, ctypes.c_void_p(0))
    model = None
    split_arr = None
    results: list[MeasuredMemory] = []
    try:
        llama.llama_backend_init()
        mp = llama.llama_model_default_params()
        mp.n_gpu_layers = n_gpu_layers
        mp.main_gpu = main_gpu
        if tensor_split:
            n = llama.llama_max_devices()
            split_arr = (ctypes.c_float * n)(*list(tensor_split)[:n])
            mp.tensor_split = split_arr
        if dry_run:
            # the mmap path asserts !no_alloc, and repacked (extra) buffer types are real allocations
            mp.no_alloc = True
            mp.load_mode = llama.LLAMA_LOAD_MODE_NONE
            mp.lazy_mode = llama.LLAMA_LAZY_MODE_OFF
            mp.use_extra_bufts = False
        else:
            mp.load_mode = llama.LLAMA_LOAD_MODE_MMAP
        model = llama.llama_model_load_from_file(str(path).encode(), mp)
        if not model:
            raise UserError(f"llama.cpp could not load {path}: {_last_error(lines)}")
        model_text = "".join(lines)
        model_size = int(llama.llama_model_size(model))
        n_layer = int(llama.llama_model_n_layer(model))
        weight_buffers = sum(b for k, _, b in parse_buffers(model_text) if k == "model")
        layer_devices: dict[int, tuple[str, bool]] = {}
        for m in re.finditer(r"layer\s+(\d+) assigned to device (\S+), is_swa = (\d)", model_text):
            layer_devices[int(m.group(1))] = (m.group(2), m.group(3) == "1")
        order = sorted(layer_devices)
        for s in settings:
            lines.clear()
            cp = llama.llama_context_default_params()
            cp.n_ctx = int(s["n_ctx"])
            cp.n_batch = int(s["n_batch"])
            cp.n_ubatch = min(int(s["n_ubatch"]), int(s["n_batch"]))
            cp.n_seq_max = 1
            cp.type_k = _CACHE_TYPES[s["cache_type_k"]]
            cp.type_v = _CACHE_TYPES[s["cache_type_v"]]
            cp.flash_attn_type = _FLASH[s["flash_attn"]]
            cp.swa_full = bool(s["swa_full"])
            cp.no_perf = True
            ctx = llama.llama_init_from_model(model, cp)
            if not ctx:
                raise UserError(
                    f"llama.cpp could not make a context of {s['n_ctx']} tokens for {path.name}: "
                    f"{_last_error(lines)} (a quantized V cache needs flash attention)"
                )
            try:
                actual_ctx = int(llama.llama_n_ctx(ctx))
            finally:
                llama.llama_free(ctx)
            text = "".join(lines)
            buffers = parse_buffers(model_text) + parse_buffers(text)
            kv_total = sum(round(float(m.group(1)) * _MIB)
                           for m in re.finditer(r"llama_kv_cache: size =\s*([\d.]+) MiB", text))
            results.append(MeasuredMemory(
                weights_bytes=weight_buffers or model_size,
                kv_bytes=sum(b for k, _, b in buffers if k == "kv") or kv_total,
                compute_bytes=sum(b for k, _, b in buffers if k == "compute"),
                output_bytes=sum(b for k, _, b in buffers if k == "output"),
                n_ctx=actual_ctx,
                buffers=tuple(buffers),
                layer_devices=tuple(layer_devices[i][0] for i in order),
                swa_layers=tuple(layer_devices[i][1] for i in order if i < n_layer),
                dry_run=dry_run,
            ))
    finally:
        if model:
            llama.llama_model_free(model)
        llama.llama_log_set(prev_cb, prev_ud)
        del split_arr
    return results
