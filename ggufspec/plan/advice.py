"""What would make a plan that does not fit fit: fewer layers, a smaller context, a cheaper cache (pure)."""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from ggufspec.errors import UserError
from ggufspec.ggufinfo import ModelInfo
from ggufspec.hardware import format_bytes
from ggufspec.plan.memory import CACHE_BLOCKS, KV_PAD, MemoryEstimate, check_cache_types, layer_kv_bytes, pad
from ggufspec.plan.placement import GpuBudget, OffloadPlan, Placement, place_pair, usage
from ggufspec.settings import ContextSettings

# ---- advice --------------------------------------------------------------------------------


def _whole_need(info: ModelInfo, context: ContextSettings) -> MemoryEstimate:
    """What the whole model puts on one GPU (blocks + output layer, KV, compute)."""
    whole = info.n_layer + 1
    gpu_est, _ = usage(info, context, Placement(n_gpu_layers=whole, slots=(0,) * whole, gpus=(0,)))
    return gpu_est[0]


def _quiet(target: ModelInfo, draft: ModelInfo | None, context: ContextSettings, draft_context: ContextSettings,
           gpus: Sequence[GpuBudget], margin: int) -> tuple[bool, int, bool]:
    """(pair wholly on GPUs?, target layers offloaded, draft wholly on a GPU?) for other settings."""
    tplace, dplace, _ = place_pair(target, draft, context, draft_context, gpus, margin)
    d_ok = draft is None or (dplace is not None and dplace.n_gpu_layers >= draft.n_layer + 1)
    return d_ok and tplace.n_gpu_layers >= target.n_layer + 1, tplace.n_gpu_layers, d_ok


def advice(plan: OffloadPlan, target: ModelInfo, draft: ModelInfo | None, context: ContextSettings,
            draft_context: ContextSettings, gpus: Sequence[GpuBudget], margin: int) -> list[str]:
    lines: list[str] = []
    t_all, d_all = target.n_layer + 1, (draft.n_layer + 1 if draft else 0)
    if not plan.ram_ok:
        lines.append(
            f"RAM: the CPU side needs {format_bytes(plan.ram_bytes)} but {format_bytes(plan.ram_available_bytes or 0)} is available"
        )
    if not gpus:
        lines.append(
            f"no GPU: everything runs on the CPU ({format_bytes(plan.ram_bytes)} of RAM); "
            "plan for a GPU with --vram SIZE"
        )
        return lines
    t_est = _whole_need(target, context)
    d_est = _whole_need(draft, draft_context) if draft else MemoryEstimate()
    t_need, d_need = t_est.total_bytes, d_est.total_bytes
    usable = sum(max(0, g.free_bytes - margin) for g in gpus)
    best = max(max(0, g.free_bytes - margin) for g in gpus)
    if draft is not None and plan.draft is not None and not plan.draft.whole_on_gpu:
        lines.append(
            f"the draft does not fit whole on a GPU: it needs {format_bytes(d_need)} "
            f"(weights {format_bytes(d_est.weights_bytes)}, KV {format_bytes(d_est.kv_bytes)}, compute {format_bytes(d_est.compute_bytes)}) "
            f"but the largest GPU has {format_bytes(best)} usable; a smaller draft (at most {format_bytes(best)} on GPU) would fit, "
            f"{plan.draft.n_gpu_layers}/{d_all} of its layers are on GPU now"
        )
    if not plan.target.whole_on_gpu:
        lines.append(
            f"{plan.target.n_gpu_layers}/{t_all} target layers on GPU: the pair needs {format_bytes(t_need + d_need)} of GPU "
            f"memory (target {format_bytes(t_need)}" + (f", draft {format_bytes(d_need)}" if draft else "") +
            f") but {format_bytes(usable)} is usable ({format_bytes(margin)} margin kept per GPU)"
        )
    # a smaller context: the largest that fits the pair wholly, else the draft wholly
    n_now = pad(context.n_ctx or target.context_length or 4096, KV_PAD)

    def largest_ctx(pred_index: int) -> int:
        lo, hi, found = 1, n_now // KV_PAD - 1, 0
        while lo <= hi:
            mid = (lo + hi) // 2
            s = replace(context, n_ctx=mid * KV_PAD)
            ds = replace(draft_context, n_ctx=mid * KV_PAD)
            if _quiet(target, draft, s, ds, gpus, margin)[pred_index]:
                found, lo = mid, mid + 1
            else:
                hi = mid - 1
        return found * KV_PAD

    pair_ctx = largest_ctx(0)
    if pair_ctx:
        lines.append(f"--ctx {pair_ctx} would fit the pair wholly on GPU (now {n_now})")
    elif draft is not None and plan.draft is not None and not plan.draft.whole_on_gpu:
        draft_ctx = largest_ctx(2)
        if draft_ctx:
            lines.append(f"--ctx {draft_ctx} would fit the draft wholly on GPU (now {n_now})")
    # a quantized KV cache
    for qt in ("q8_0", "q4_0"):
        if CACHE_BLOCKS[qt][1] / CACHE_BLOCKS[qt][0] >= CACHE_BLOCKS[context.cache_type_k][1] / CACHE_BLOCKS[context.cache_type_k][0]:
            continue
        s = replace(context, cache_type_k=qt, cache_type_v=qt)
        ds = replace(draft_context, cache_type_k=qt, cache_type_v=qt)
        try:
            check_cache_types(target, s)
            if draft is not None:
                check_cache_types(draft, ds)
        except UserError:
            continue
        ok, ngl, _ = _quiet(target, draft, s, ds, gpus, margin)
        kv_now = sum(layer_kv_bytes(target, context)) + (sum(layer_kv_bytes(draft, draft_context)) if draft else 0)
        kv_q = sum(layer_kv_bytes(target, s)) + (sum(layer_kv_bytes(draft, ds)) if draft else 0)
        if not ok and ngl <= plan.target.n_gpu_layers:
            continue  # no better than now
        what = "would fit the pair wholly on GPU" if ok else f"would put {ngl}/{t_all} target layers on GPU"
        lines.append(f"--cache-type {qt} (KV {format_bytes(kv_now)} -> {format_bytes(kv_q)}) {what}")
        if ok:
            break
    # more memory
    per_gpu_extra = max(0, t_need + d_need + margin * len(gpus) - sum(g.free_bytes for g in gpus))
    if per_gpu_extra:
        lines.append(f"about {format_bytes(per_gpu_extra)} more free GPU memory would fit the pair at these settings")
    return lines

