"""Placement: where the target's and the draft's layers go over the GPUs, and what a plan holds (pure).

Planner order: the draft first and whole onto the fastest GPU (its latency is paid K times per
round), then target layers from the last one back, spread over the GPUs in proportion to their
free memory (or packed in order when they do not all fit).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal, Sequence

from ggufspec.ggufinfo import ModelInfo
from ggufspec.plan.memory import (
    MemoryEstimate,
    compute_bytes,
    layer_kv_bytes,
)
from ggufspec.settings import ContextSettings


@dataclass(frozen=True, kw_only=True)
class GpuBudget:
    """A GPU as the planner sees it: its index in llama.cpp's device order and its memory."""

    index: int
    name: str
    free_bytes: int
    total_bytes: int
    kind: Literal["gpu", "rpc"] = "gpu"  # "rpc": a worker over the network, never the draft's

    @classmethod
    def from_gpus(cls, gpus: Sequence[object]) -> tuple["GpuBudget", ...]:
        """From `devices.Gpu` / `devices.Device` objects (index, name, free_bytes, total_bytes,
        optionally kind); CPU devices are left out."""
        return tuple(cls(index=g.index, name=g.name, free_bytes=g.free_bytes, total_bytes=g.total_bytes,  # type: ignore[attr-defined]
                         kind="rpc" if getattr(g, "kind", "gpu") == "rpc" else "gpu")
                     for g in gpus if getattr(g, "kind", "gpu") != "cpu")



# ---- placement -----------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Placement:
    """Where one model's layers go: `slots[j]` is the GPU position of offloaded slot j.

    Slots are the offloaded layers in llama.cpp's order: blocks i_gpu_start .. n_layer-1, then
    the output layer last. `gpus` are the GPU indices the positions refer to.
    """

    n_gpu_layers: int
    slots: tuple[int, ...]  # per offloaded slot: index into `gpus`
    gpus: tuple[int, ...]


def _slot_costs(info: ModelInfo, kv: tuple[int, ...], ngl: int) -> list[tuple[int, int]]:
    """(weights, kv) bytes of each offloaded slot, lowest block first, the output layer last."""
    ngl = max(0, min(ngl, info.n_layer + 1))
    start = info.n_layer + 1 - ngl
    out = [(info.layer_bytes[il], kv[il]) for il in range(start, info.n_layer)]
    if ngl:
        out.append((info.output_layer_bytes, 0))
    return out


def offload_copy_bytes(info: ModelInfo, n_cpu_layers: int) -> int:
    """The largest weight tensor of the blocks left on the CPU. llama.cpp's scheduler runs a
    product of a CPU-resident weight with a batch of 32+ rows (a prompt) on the first GPU
    (`op_offload`), copying the weight into that GPU's compute buffer. Measured on an H200
    (`smollm2-as-7b`, 16, 32 and 48 of its 64 blocks on the GPU): the GPU's compute buffer 40.9 MiB
    over this module's estimate at each split; its largest block tensor (an FFN matrix) 36.5 MiB."""
    return max((t.n_bytes for t in info.tensors if t.layer is not None and t.layer < n_cpu_layers), default=0)


def usage(info: ModelInfo, context: ContextSettings, placement: Placement, *,
          batch_gpu: int | None = None) -> tuple[dict[int, MemoryEstimate], MemoryEstimate]:
    """Bytes per GPU (by GPU index) and in RAM for one model placed as `placement` says.
    `batch_gpu`: the GPU that runs the prompt batches of the blocks left on the CPU (llama.cpp's
    first; None: none, or not counted), whose compute buffer then holds a copy of their largest
    weight (`offload_copy_bytes`) where the model is split between the CPU and the GPUs; an entry
    of compute bytes only where that GPU holds none of its layers.

    Returns:
        (GPU index -> estimate, RAM estimate).
    """
    kv = layer_kv_bytes(info, context)
    costs = _slot_costs(info, kv, placement.n_gpu_layers)
    per_gpu: dict[int, list[int]] = {}
    for (w, k), pos in zip(costs, placement.slots):
        g = placement.gpus[pos]
        acc = per_gpu.setdefault(g, [0, 0, 0, 0])  # weights, kv, has-layer, has-output
        acc[0] += w
        acc[1] += k
    n_off = len(costs)
    if n_off:
        last_gpu = placement.gpus[placement.slots[-1]]
        for j, pos in enumerate(placement.slots):
            g = placement.gpus[pos]
            if j < n_off - 1:
                per_gpu[g][2] = 1
        per_gpu[last_gpu][3] = 1
    gpu_est = {
        g: MemoryEstimate(weights_bytes=a[0], kv_bytes=a[1],
                          compute_bytes=compute_bytes(info, context, layers=bool(a[2]), output=bool(a[3])))
        for g, a in per_gpu.items()
    }
    n_cpu_layers = info.n_layer - max(0, n_off - 1)
    if batch_gpu is not None and n_off and n_cpu_layers:
        est = gpu_est.get(batch_gpu, MemoryEstimate())
        gpu_est[batch_gpu] = replace(est, compute_bytes=est.compute_bytes + offload_copy_bytes(info, n_cpu_layers))
    out_on_cpu = n_off == 0
    cpu_weights = info.input_bytes + sum(info.layer_bytes[:n_cpu_layers])
    if out_on_cpu:
        cpu_weights += info.output_bytes + info.other_bytes
    ram = MemoryEstimate(
        weights_bytes=cpu_weights,
        kv_bytes=sum(kv[:n_cpu_layers]),
        compute_bytes=compute_bytes(info, context, layers=n_cpu_layers > 0, output=out_on_cpu)
        + 4 * info.vocab_size * context.output_rows,
    )
    return gpu_est, ram


def _greedy(info: ModelInfo, context: ContextSettings, kv: tuple[int, ...], ngl: int,
            caps: Sequence[int]) -> tuple[int, ...] | None:
    """Pack `ngl` slots into GPUs in order, each up to its capacity; None if they do not fit."""
    costs = _slot_costs(info, kv, ngl)
    slots: list[int] = []
    g, used, j, n = 0, 0, 0, len(costs)
    while j < n:
        if g >= len(caps):
            return None
        w, k = costs[j]
        is_out = j == n - 1
        has_block = not is_out or (bool(slots) and slots[-1] == g)
        if used + w + k + compute_bytes(info, context, layers=has_block, output=is_out) <= caps[g]:
            slots.append(g)
            used += w + k
            j += 1
        else:
            g, used = g + 1, 0
    return tuple(slots)


def _fits(info: ModelInfo, context: ContextSettings, placement: Placement, caps: dict[int, int]) -> bool:
    gpu_est, _ = usage(info, context, placement)
    return all(est.total_bytes <= caps.get(g, 0) for g, est in gpu_est.items())


def _proportional(info: ModelInfo, kv: tuple[int, ...], ngl: int, caps: Sequence[int]) -> tuple[int, ...]:
    """Spread `ngl` slots over GPUs in order, in proportion to their capacity (by bytes)."""
    costs = [w + k for w, k in _slot_costs(info, kv, ngl)]
    total = sum(costs) or 1
    cap_total = sum(max(c, 0) for c in caps) or 1
    bounds = []
    acc = 0.0
    for c in caps:
        acc += max(c, 0) / cap_total
        bounds.append(acc * total)
    slots = []
    run = 0
    g = 0
    for c in costs:
        mid = run + c / 2
        while g < len(caps) - 1 and mid > bounds[g]:
            g += 1
        slots.append(g)
        run += c
    return tuple(slots)


def place_model(info: ModelInfo, context: ContextSettings, caps: dict[int, int], *,
                gpu_order: Sequence[int] | None = None, batch_gpu: int | None = None) -> Placement:
    """The most layers of `info` that fit the GPU capacities `caps` (GPU index -> bytes).

    Layers go from the output layer back; over several GPUs in proportion to capacity when that
    fits, else packed in order. `batch_gpu` (one of `caps`): as `usage`'s; a split that leaves it
    no room for the weight copy does not fit.
    """
    order = list(gpu_order if gpu_order is not None else sorted(caps))
    if not order:
        return Placement(n_gpu_layers=0, slots=(), gpus=())
    kv = layer_kv_bytes(info, context)
    for ngl in range(info.n_layer + 1, 0, -1):
        room = caps
        n_cpu_layers = info.n_layer - max(0, ngl - 1)
        if batch_gpu is not None and n_cpu_layers:
            copy = offload_copy_bytes(info, n_cpu_layers)
            if caps.get(batch_gpu, 0) < copy:
                continue
            room = {**caps, batch_gpu: caps[batch_gpu] - copy}
        cap_list = [room[g] for g in order]
        greedy = _greedy(info, context, kv, ngl, cap_list)
        if greedy is None:
            continue
        prop = Placement(n_gpu_layers=ngl, slots=_proportional(info, kv, ngl, cap_list), gpus=tuple(order))
        if len(order) > 1 and _fits(info, context, prop, room):
            return prop
        return Placement(n_gpu_layers=ngl, slots=greedy, gpus=tuple(order))
    return Placement(n_gpu_layers=0, slots=(), gpus=tuple(order))


# ---- the plan ------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ModelPlan:
    """One model's placement and what it costs."""

    role: Literal["target", "draft"]
    n_layer: int
    n_gpu_layers: int  # llama.cpp's count: blocks + the output layer (n_layer + 1 = all)
    tensor_split: tuple[float, ...] | None  # one entry per GPU, None with a single GPU
    main_gpu: int
    estimate: MemoryEstimate  # all devices together
    gpu: dict[int, MemoryEstimate] = field(default_factory=dict)  # GPU index -> bytes
    ram: MemoryEstimate = MemoryEstimate()

    @property
    def whole_on_gpu(self) -> bool:
        return self.n_gpu_layers >= self.n_layer + 1

    def to_load_kwargs(self) -> dict[str, object]:
        """Arguments for loading this model (settings.ModelSettings / llama_model_params)."""
        return {"n_gpu_layers": self.n_gpu_layers, "tensor_split": self.tensor_split, "main_gpu": self.main_gpu}


@dataclass(frozen=True, kw_only=True)
class DeviceUse:
    """One device of the plan: its budget and what each model puts there."""

    name: str  # "GPU 0 (NVIDIA ...)", "RPC 0 (RPC0 127.0.0.1:50052)" or "RAM"
    index: int | None  # GPU index, None for RAM
    free_bytes: int | None
    usable_bytes: int | None  # free minus margin (GPUs), available RAM
    target: MemoryEstimate
    draft: MemoryEstimate
    kind: Literal["cpu", "gpu", "rpc"] = "cpu"
    target_layers: int = 0  # blocks and the output layer
    draft_layers: int = 0

    @property
    def used_bytes(self) -> int:
        return self.target.total_bytes + self.draft.total_bytes

    @property
    def headroom_bytes(self) -> int | None:
        return None if self.usable_bytes is None else self.usable_bytes - self.used_bytes


@dataclass(frozen=True, kw_only=True)
class OffloadPlan:
    """Where the target and the draft go, what each device holds, and whether it all fits.

    `fits` means both models sit wholly on GPUs within budget and the rest fits in RAM. A plan
    that does not fit is still a valid partial offload; `advice` says what would make it fit.
    """

    target: ModelPlan
    draft: ModelPlan | None
    devices: tuple[DeviceUse, ...]  # GPUs, then RAM
    context: ContextSettings  # the target's, "auto" resolved
    draft_context: ContextSettings  # the draft's
    margin_bytes: int
    ram_bytes: int
    ram_available_bytes: int | None
    fits: bool
    advice: tuple[str, ...]

    @property
    def ram_ok(self) -> bool:
        return self.ram_available_bytes is None or self.ram_bytes <= self.ram_available_bytes

    def to_load_kwargs(self, role: Literal["target", "draft"] = "target") -> dict[str, object]:
        """`n_gpu_layers`, `tensor_split` and `main_gpu` for loading the target or the draft."""
        plan = self.target if role == "target" else self.draft
        if plan is None:
            raise ValueError("this plan has no draft")
        return plan.to_load_kwargs()


def batch_gpu(gpus: Sequence[GpuBudget]) -> int | None:
    """The GPU llama.cpp runs the prompt batches of CPU-resident blocks on: the first local one (an
    RPC worker's backend offloads no op)."""
    return min((g.index for g in gpus if g.kind == "gpu"), default=None)


def _fastest(gpus: Sequence[GpuBudget]) -> list[int]:
    """Local GPU indices, fastest first. NVML reports no speed, so total memory stands in for it.
    RPC workers are left out: a draft step there pays a network round trip per token, so with
    only workers and the CPU the draft runs on the CPU."""
    return [g.index for g in sorted(gpus, key=lambda g: (-g.total_bytes, g.index)) if g.kind == "gpu"]


def place_pair(target: ModelInfo, draft: ModelInfo | None, context: ContextSettings, draft_context: ContextSettings,
                gpus: Sequence[GpuBudget], margin: int) -> tuple[Placement, Placement | None, dict[int, int]]:
    """Where the draft (first, whole on the fastest GPU that holds it) and the target go: (target's
    placement, draft's placement or None, the room left on each GPU). A target left split keeps room
    for its weight copy on `batch_gpu` (`usage`): where the draft took that room, the draft is placed
    again with it kept."""
    batch = batch_gpu(gpus)
    first = _place_pair(target, draft, context, draft_context, gpus, margin, keep=0, batch=batch)
    copy = offload_copy_bytes(target, target.n_layer) if batch is not None else 0
    if draft is None or not copy or first[0].n_gpu_layers > target.n_layer:
        return first
    kept = _place_pair(target, draft, context, draft_context, gpus, margin, keep=copy, batch=batch)
    return kept if kept[1] == first[1] and kept[0].n_gpu_layers > first[0].n_gpu_layers else first


def _place_pair(target: ModelInfo, draft: ModelInfo | None, context: ContextSettings, draft_context: ContextSettings,
                gpus: Sequence[GpuBudget], margin: int, *, keep: int,
                batch: int | None) -> tuple[Placement, Placement | None, dict[int, int]]:
    """place_pair's placements with `keep` bytes of the GPU `batch` kept from the draft."""
    caps = {g.index: max(0, g.free_bytes - margin) for g in gpus}
    keep = min(keep, caps[batch]) if batch is not None else 0
    if keep:
        caps[batch] -= keep  # type: ignore[index]
    dplace: Placement | None = None
    if draft is not None:
        dplace = Placement(n_gpu_layers=0, slots=(), gpus=())
        whole = draft.n_layer + 1
        for g in _fastest(gpus):  # whole on the fastest GPU that can hold it
            p = Placement(n_gpu_layers=whole, slots=(0,) * whole, gpus=(g,))
            if _fits(draft, draft_context, p, caps):
                dplace = p
                break
        else:
            local = {g.index for g in gpus if g.kind == "gpu"}
            if local:  # as much of it as fits on the local GPU with the most room
                g = max(local, key=lambda i: (caps[i], -i))
                dplace = place_model(draft, draft_context, {g: caps[g]})
        d_gpu, _ = usage(draft, draft_context, dplace)
        for g, est in d_gpu.items():
            caps[g] -= est.total_bytes
    if keep:
        caps[batch] += keep  # type: ignore[index]  # back, for the target's copy
    tplace = place_model(target, context, dict(caps), gpu_order=sorted(caps), batch_gpu=batch)
    return tplace, dplace, caps
