"""The planner's answer as llama.cpp load arguments (what `--ngl auto` uses)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from ggufspec.ggufinfo import read_model_info
from ggufspec.plan.memory import DEFAULT_MARGIN
from ggufspec.plan.offload import plan_offload
from ggufspec.plan.placement import GpuBudget
from ggufspec.settings import ContextSettings


def plan_for_load(
    *,
    target: Path | str,
    draft: Path | str | None,
    gpus: Sequence[object],
    context: ContextSettings = ContextSettings(),
    margin_bytes: int = DEFAULT_MARGIN,
) -> tuple[dict[str, object], dict[str, object]]:
    """Load arguments for a target and a draft file on these GPUs.

    Args:
        target: the target GGUF (first shard).
        draft: the draft GGUF, or None.
        gpus: `devices.Gpu` objects (index, name, free_bytes, total_bytes).
        context: the context both models run with.
        margin_bytes: memory to keep free on each GPU.

    Returns:
        (target kwargs, draft kwargs), each with n_gpu_layers, tensor_split and main_gpu
        (`settings.ModelSettings` fields); the draft's are all-CPU when there is no draft.

    Raises:
        UserError: unreadable GGUF, or a KV cache type the model cannot use.
    """
    t_info = read_model_info(target)
    d_info = read_model_info(draft) if draft is not None else None
    plan = plan_offload(target=t_info, draft=d_info, gpus=GpuBudget.from_gpus(gpus), context=context,
                        margin_bytes=margin_bytes, advise=False)
    cpu: dict[str, object] = {"n_gpu_layers": 0, "tensor_split": None, "main_gpu": 0}
    return plan.to_load_kwargs("target"), (plan.to_load_kwargs("draft") if plan.draft is not None else cpu)
