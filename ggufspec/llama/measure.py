"""What a model and a context take, as llama.cpp itself reports it (a dry-run load by default).

A load with `no_alloc` model parameters simulates every allocation, and the log then reports each
buffer it would have made (KV cache, compute, output) plus where each layer went. In this build the
weight buffers of a no_alloc load are zero-sized dummies, so the weights figure is llama.cpp's own
tensor total (`llama_model_size`) unless a buffer line reports more. Everything here is read from
llama.cpp's log through `llama_log_set`; the previous log callback is restored afterwards.
"""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from ggufspec.errors import UserError
from ggufspec.llama import lib
from ggufspec.llama.context import CACHE_TYPES, FLASH_ATTN
from ggufspec.llama.lib import llama


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


def _parse_buffers(text: str) -> list[tuple[str, str, int]]:
    kinds = {"model": "model", "KV": "kv", "compute": "compute", "output": "output"}
    return [(kinds[m.group(2)], m.group(1), round(float(m.group(3)) * _MIB))
            for m in re.finditer(_BUFFER_LINE, text, re.M)]


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
            if t not in CACHE_TYPES:
                raise UserError(f"unknown KV cache type {t!r}; choose one of: {', '.join(CACHE_TYPES)}")
        if s["flash_attn"] not in FLASH_ATTN:
            raise UserError(f"unknown flash attention mode {s['flash_attn']!r}; choose auto, on or off")
        settings.append(s)
    path = Path(path)
    if not path.is_file():
        raise UserError(f"model file not found: {path}; check the path")

    lines: list[str] = []

    @llama.llama_log_callback
    def capture(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        lines.append(text.decode("utf-8", errors="replace"))

    lib.ensure_init()
    prev_cb = llama.llama_log_callback()
    prev_ud = ctypes.c_void_p()
    llama.llama_log_get(ctypes.byref(prev_cb), ctypes.byref(prev_ud))
    llama.llama_log_set(capture, ctypes.c_void_p(0))
    model = None
    split_arr = None
    results: list[MeasuredMemory] = []
    try:
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
        model = lib.load_model(path, mp)
        if not model:
            raise UserError(f"llama.cpp could not load {path}: {_last_error(lines)}")
        model_text = "".join(lines)
        model_size = int(llama.llama_model_size(model))
        n_layer = int(llama.llama_model_n_layer(model))
        weight_buffers = sum(b for k, _, b in _parse_buffers(model_text) if k == "model")
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
            cp.type_k = CACHE_TYPES[s["cache_type_k"]]
            cp.type_v = CACHE_TYPES[s["cache_type_v"]]
            cp.flash_attn_type = FLASH_ATTN[s["flash_attn"]]
            cp.swa_full = bool(s["swa_full"])
            cp.no_perf = True
            ctx = lib.new_context(model, cp)
            if not ctx:
                raise UserError(
                    f"llama.cpp could not make a context of {s['n_ctx']} tokens for {path.name}: "
                    f"{_last_error(lines)} (a quantized V cache needs flash attention)"
                )
            try:
                actual_ctx = int(llama.llama_n_ctx(ctx))
            finally:
                lib.free_context(ctx)
            text = "".join(lines)
            buffers = _parse_buffers(model_text) + _parse_buffers(text)
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
        try:
            if model:
                lib.free_model(model)
        finally:
            llama.llama_log_set(prev_cb, prev_ud)
            del split_arr
    return results
