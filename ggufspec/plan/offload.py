"""The offload plan: the draft and the target placed, each device's bytes, and advice where it does not fit (pure).

`placement` places the layers; `advice` works out what would make a plan that does not fit fit;
this module puts them together.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal, Sequence

from ggufspec.errors import UserError
from ggufspec.ggufinfo import ModelInfo
from ggufspec.loop.exactness import auto_cache_type
from ggufspec.plan.advice import advice
from ggufspec.plan.memory import DEFAULT_MARGIN, MemoryEstimate, check_cache_types
from ggufspec.plan.placement import (DeviceUse, GpuBudget, ModelPlan, OffloadPlan, Placement, batch_gpu, place_pair,
                                     usage)
from ggufspec.settings import ContextSettings


def _layers_on(place: Placement | None, index: int) -> int:
    """Offloaded slots (blocks and the output layer) of a placement on the device `index`."""
    return 0 if place is None else sum(1 for pos in place.slots if place.gpus[pos] == index)


def _model_plan(role: Literal["target", "draft"], info: ModelInfo, context: ContextSettings, placement: Placement,
                gpus: Sequence[GpuBudget]) -> ModelPlan:
    gpu_est, ram = usage(info, context, placement, batch_gpu=batch_gpu(gpus) if role == "target" else None)
    total = ram
    for est in gpu_est.values():
        total = total + est
    split: tuple[float, ...] | None = None
    main = placement.gpus[placement.slots[-1]] if placement.slots else (gpus[0].index if gpus else 0)
    if len(gpus) > 1 and placement.slots:
        counts = {g.index: 0 for g in gpus}
        for pos in placement.slots:
            counts[placement.gpus[pos]] += 1
        # llama.cpp hands out offloaded slots by cumulative proportion in device order, so slot
        # counts per GPU reproduce this placement exactly (placements are contiguous, in order).
        split = tuple(float(counts[g.index]) for g in sorted(gpus, key=lambda g: g.index))
    return ModelPlan(role=role, n_layer=info.n_layer, n_gpu_layers=placement.n_gpu_layers, tensor_split=split,
                     main_gpu=main, estimate=total, gpu=gpu_est, ram=ram)


def plan_offload(
    *,
    target: ModelInfo,
    draft: ModelInfo | None,
    gpus: Sequence[GpuBudget],
    context: ContextSettings = ContextSettings(),
    draft_context: ContextSettings | None = None,
    margin_bytes: int = DEFAULT_MARGIN,
    ram_available_bytes: int | None = None,
    advise: bool = True,
) -> OffloadPlan:
    """Plan where the target's and the draft's layers go.

    Args:
        target: the target model.
        draft: the draft model, or None for a target alone (or a prompt-lookup draft).
        gpus: the GPUs and their free memory (`GpuBudget.from_gpus(devices.system_info().gpus)`).
        context: the target's context.
        draft_context: the draft's context (default: the same as the target's).
        margin_bytes: memory to leave free on each GPU.
        ram_available_bytes: RAM available for what stays on the CPU (None: do not check).
        advise: work out what would make a plan that does not fit fit.

    Returns:
        The plan: layers and split per model, bytes per device, headroom, RAM, fit and advice.

    Raises:
        UserError: a KV cache type the model cannot use, or a negative margin.
    """
    if margin_bytes < 0:
        raise UserError("the GPU margin must not be negative; give a size like 1GiB or 0")
    # "auto" as load_pair resolves it: the target's cache q8_0 on the CPU, f16 on a GPU; the
    # draft's f16 (its numerics never reach the output)
    draft_context = (draft_context or context).with_cache_type("f16")
    context = context.with_cache_type(auto_cache_type(target, on_gpu=any(g.kind == "gpu" for g in gpus)))
    check_cache_types(target, context)
    if draft is not None:
        check_cache_types(draft, draft_context)
    tplace, dplace, _ = place_pair(target, draft, context, draft_context, gpus, margin_bytes)
    tplan = _model_plan("target", target, context, tplace, gpus)
    dplan = _model_plan("draft", draft, draft_context, dplace, gpus) if draft is not None and dplace is not None else None

    devices = []
    for g in gpus:
        devices.append(DeviceUse(
            name=f"{'RPC' if g.kind == 'rpc' else 'GPU'} {g.index} ({g.name})", index=g.index, free_bytes=g.free_bytes,
            kind=g.kind, target_layers=_layers_on(tplace, g.index), draft_layers=_layers_on(dplace, g.index),
            usable_bytes=max(0, g.free_bytes - margin_bytes),
            target=tplan.gpu.get(g.index, MemoryEstimate()),
            draft=dplan.gpu.get(g.index, MemoryEstimate()) if dplan else MemoryEstimate(),
        ))
    ram_bytes = tplan.ram.total_bytes + (dplan.ram.total_bytes if dplan else 0)
    devices.append(DeviceUse(name="RAM", index=None, free_bytes=ram_available_bytes, usable_bytes=ram_available_bytes,
                             target=tplan.ram, draft=dplan.ram if dplan else MemoryEstimate(),
                             target_layers=target.n_layer + 1 - tplace.n_gpu_layers,
                             draft_layers=(draft.n_layer + 1 - dplace.n_gpu_layers) if draft is not None and dplace else 0))
    # the draft stays on the CPU by design when no local GPU can take it (only RPC workers)
    local_gpu = any(g.kind == "gpu" for g in gpus)
    whole = tplan.whole_on_gpu and (dplan is None or dplan.whole_on_gpu or not local_gpu)
    ram_ok = ram_available_bytes is None or ram_bytes <= ram_available_bytes
    fits = whole and ram_ok
    plan = OffloadPlan(target=tplan, draft=dplan, devices=tuple(devices), context=context, draft_context=draft_context, margin_bytes=margin_bytes,
                       ram_bytes=ram_bytes, ram_available_bytes=ram_available_bytes, fits=fits, advice=())
    if advise and not fits:
        plan = replace(plan, advice=tuple(advice(plan, target, draft, context, draft_context, gpus, margin_bytes)))
    return plan

