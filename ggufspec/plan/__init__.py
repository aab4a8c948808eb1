"""Offload planning for a target and a draft: a memory model and a placement (pure).

    memory     bytes of weights, KV cache and compute buffer per model and device
    placement  where each model's layers go over the GPUs; what a plan and its devices hold
    advice     what would make a plan that does not fit fit
    offload    the plan: placement, each device's bytes, advice (`plan_offload`)
    load       the plan as llama.cpp load arguments (`--ngl auto`)
    fit        does a --ctx fit the machine at all (checked before llama.cpp makes a context)

Checked against llama.cpp's own dry run (tests/test_plan_measure.py, scripts/plan_vs_measure.py).
"""

from ggufspec.plan.fit import ContextNeed, check_context_fits
from ggufspec.plan.load import plan_for_load
from ggufspec.plan.memory import (
    DEFAULT_MARGIN,
    GiB,
    KV_PAD,
    MemoryEstimate,
    check_cache_types,
    compute_bytes,
    estimate_memory,
    kv_cells,
    layer_kv_bytes,
)
from ggufspec.plan.offload import plan_offload
from ggufspec.plan.placement import (
    DeviceUse,
    GpuBudget,
    ModelPlan,
    OffloadPlan,
    Placement,
    batch_gpu,
    offload_copy_bytes,
    place_model,
    usage,
)

__all__ = [
    "DEFAULT_MARGIN", "GiB", "KV_PAD", "ContextNeed", "DeviceUse", "GpuBudget", "MemoryEstimate", "ModelPlan", "OffloadPlan",
    "Placement", "batch_gpu", "check_cache_types", "check_context_fits", "compute_bytes", "estimate_memory", "kv_cells",
    "layer_kv_bytes", "offload_copy_bytes", "place_model", "plan_for_load", "plan_offload", "usage",
]
