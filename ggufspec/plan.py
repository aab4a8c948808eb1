"""Memory model and offload planner for a target and a draft. Pure: numbers in, a plan out.

Memory of one model on one device = the weights of its layers there + the KV cache of those layers
+ a compute buffer, and each GPU keeps a margin free (1 GiB by default, like llama.cpp's `--fit`;
it also covers the CUDA context itself, which no llama.cpp buffer counts).

How llama.cpp places a model with `n_gpu_layers = n`: of the n_layer blocks plus the output layer
(n_layer + 1 "layers"), the last n go to the GPUs, counted from the output layer back, so n = 1
offloads the output layer only. The token embeddings always stay in RAM; a model with tied
embeddings gets a copy of them with its output layer. Offloaded layers are split over GPUs in
order by the cumulative proportions of `tensor_split`, so GPU 0 holds the lowest offloaded blocks
and the last GPU holds the output layer.

KV cache per layer = cells x (row(K type, head_dim_k x n_head_kv) + row(V type, head_dim_v x
n_head_kv)); cells = n_ctx padded to 256; sliding-window layers keep min(cells, pad256(window +
n_ubatch)) cells unless `swa_full` (llama.cpp's default keeps them full size).

Compute buffer (llama.cpp reserves the graph of one n_ubatch batch, T tokens, with every row
output): the larger of two phases, because the allocator reuses memory between them —
* attention/FFN: the attention mask (f16 with flash attention, f32 plus the f32 KQ matrix
  without), one per KV cache kind, alive through all layers, plus the activations
  4T(2 n_embd + 3 n_ff);
* output: the logits 4T n_vocab plus 4T 2 n_embd.
Checked against llama.cpp's own dry run (tests/test_plan_measure.py).

Planner order: the draft first and whole onto the fastest GPU (its latency is paid K times per
round), then target layers from the last one back, spread over the GPUs in proportion to their
free memory (or packed in order when they do not all fit).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal, Sequence

from ggufspec.errors import UserError
from ggufspec.ggufinfo import ModelInfo

GiB = 1 << 30
DEFAULT_MARGIN = 1 * GiB
KV_PAD = 256

CacheType = Literal["f32", "f16", "q8_0", "q4_0"]
# bytes per block and elements per block (ggml type traits)
_CACHE_BLOCKS: dict[str, tuple[int, int]] = {"f32": (1, 4), "f16": (1, 2), "q8_0": (32, 34), "q4_0": (32, 18)}
CACHE_TYPES: tuple[str, ...] = tuple(_CACHE_BLOCKS)


# ---- inputs --------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ContextSpec:
    """The context a model will run with (the knobs that change its memory)."""

    n_ctx: int = 4096  # 0 = the model's trained context
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    n_batch: int = 512
    n_ubatch: int = 512
    flash_attn: Literal["auto", "on", "off"] = "auto"
    swa_full: bool = True  # llama.cpp's default
    output_rows: int = 16  # logits rows kept in RAM (the draft length + 1 of a verify step)

    def __post_init__(self) -> None:
        if self.n_ctx < 0:
            raise UserError(f"context size must be 0 (trained context) or positive, got {self.n_ctx}")
        for t in (self.cache_type_k, self.cache_type_v):
            if t not in _CACHE_BLOCKS:
                raise UserError(f"unknown KV cache type {t!r}; choose one of: {', '.join(CACHE_TYPES)}")
        if self.n_batch < 1 or self.n_ubatch < 1:
            raise UserError("batch sizes must be positive")


@dataclass(frozen=True, kw_only=True)
class GpuBudget:
    """A GPU as the planner sees it: its index in llama.cpp's device order and its memory."""

    index: int
    name: str
    free_bytes: int
    total_bytes: int

    @classmethod
    def from_gpus(cls, gpus: Sequence[object]) -> tuple["GpuBudget", ...]:
        """From `devices.Gpu` objects (anything with index, name, free_bytes, total_bytes)."""
        return tuple(cls(index=g.index, name=g.name, free_bytes=g.free_bytes, total_bytes=g.total_bytes)  # type: ignore[attr-defined]
                     for g in gpus)


# ---- the memory model ----------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class MemoryEstimate:
    """Bytes of one model (on one device, or in total)."""

    weights_bytes: int = 0
    kv_bytes: int = 0
    compute_bytes: int = 0

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.kv_bytes + self.compute_bytes

    def __add__(self, other: "MemoryEstimate") -> "MemoryEstimate":
        return MemoryEstimate(
            weights_bytes=self.weights_bytes + other.weights_bytes,
            kv_bytes=self.kv_bytes + other.kv_bytes,
            compute_bytes=self.compute_bytes + other.compute_bytes,
        )

    def as_dict(self) -> dict[str, int]:
        return {"weights_bytes": self.weights_bytes, "kv_bytes": self.kv_bytes, "compute_bytes": self.compute_bytes}


def _pad(n: int, to: int) -> int:
    return (n + to - 1) // to * to


def _row_bytes(cache_type: str, n: int) -> int:
    block, size = _CACHE_BLOCKS[cache_type]
    return n // block * size


def kv_cells(info: ModelInfo, spec: ContextSpec) -> tuple[int, int]:
    """KV cells of full-attention layers and of sliding-window layers."""
    n_ctx = spec.n_ctx or info.context_length or 4096
    cells = _pad(n_ctx, KV_PAD)
    if spec.swa_full or not info.n_swa:
        return cells, cells
    return cells, min(cells, _pad(info.n_swa + _ubatch(info, spec), KV_PAD))


def _ubatch(info: ModelInfo, spec: ContextSpec) -> int:
    n_ctx = _pad(spec.n_ctx or info.context_length or 4096, KV_PAD)
    return min(spec.n_ubatch, spec.n_batch, n_ctx)


def check_cache_types(info: ModelInfo, spec: ContextSpec) -> None:
    """Refuse quantized KV caches llama.cpp would refuse for this model.

    Raises:
        UserError: a quantized cache whose block does not divide the model's head dimension.
    """
    for label, t, dims in (("K", spec.cache_type_k, info.head_dim_k), ("V", spec.cache_type_v, info.head_dim_v)):
        block = _CACHE_BLOCKS[t][0]
        bad = sorted({d for d in dims if d % block})
        if bad:
            raise UserError(
                f"{label} cache type {t} needs a head dimension divisible by {block}, but "
                f"{info.path.name} has {bad[0]}; use --cache-type f16"
            )


def layer_kv_bytes(info: ModelInfo, spec: ContextSpec) -> tuple[int, ...]:
    """KV cache bytes of each layer."""
    full, swa = kv_cells(info, spec)
    out = []
    for il in range(info.n_layer):
        nkv = info.n_head_kv[il]
        cells = swa if info.swa_layers[il] else full
        k = _row_bytes(spec.cache_type_k, info.head_dim_k[il] * nkv)
        v = _row_bytes(spec.cache_type_v, info.head_dim_v[il] * nkv)
        out.append(cells * (k + v) if nkv else 0)
    return tuple(out)


def compute_bytes(info: ModelInfo, spec: ContextSpec, *, layers: bool = True, output: bool = True) -> int:
    """Compute buffer of one device that runs some of the model's layers and/or its output layer.

    Args:
        info: the model.
        spec: the context.
        layers: the device runs at least one block (attention and FFN).
        output: the device runs the output layer (logits for every row of a batch).

    Returns:
        Bytes of the compute buffer (the larger of the layer phase and the output phase).
    """
    t = _ubatch(info, spec)
    full, swa = kv_cells(info, spec)
    t_pad = _pad(t, 64)
    inputs = t * 32  # token ids, positions, KV indices
    base = 4 * t * 2 * info.n_embd  # embeddings in, normed hidden state
    if not layers and not output:
        return inputs + base
    phase_layers = 0
    if layers:
        kinds = {full} | ({swa} if any(info.swa_layers) else set())
        act = 4 * t * (2 * info.n_embd + 3 * info.n_ff)
        if spec.flash_attn == "off":
            masks = sum(4 * n_kv * t_pad for n_kv in kinds)
            kq = max(4 * n_kv * t * info.n_head for n_kv in kinds) + base
            phase_layers = masks + max(act, kq)
        else:
            masks = sum(2 * n_kv * t_pad for n_kv in kinds)
            phase_layers = masks + act
    phase_output = 4 * t * info.vocab_size + base if output else 0
    return inputs + max(phase_layers, phase_output)


def estimate_memory(info: ModelInfo, spec: ContextSpec) -> MemoryEstimate:
    """The whole model on one device (what a CPU-only llama.cpp allocates).

    Args:
        info: the model (`ggufinfo.read_model_info`).
        spec: the context.

    Returns:
        Weights (all tensors), KV cache and compute buffer in bytes.
    """
    return MemoryEstimate(
        weights_bytes=info.weights_bytes,
        kv_bytes=sum(layer_kv_bytes(info, spec)),
        compute_bytes=compute_bytes(info, spec),
    )


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


def usage(info: ModelInfo, spec: ContextSpec, placement: Placement) -> tuple[dict[int, MemoryEstimate], MemoryEstimate]:
    """Bytes per GPU (by GPU index) and in RAM for one model placed as `placement` says.

    Returns:
        (GPU index -> estimate, RAM estimate).
    """
    kv = layer_kv_bytes(info, spec)
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
                          compute_bytes=compute_bytes(info, spec, layers=bool(a[2]), output=bool(a[3])))
        for g, a in per_gpu.items()
    }
    n_cpu_layers = info.n_layer - max(0, n_off - 1)
    out_on_cpu = n_off == 0
    cpu_weights = info.input_bytes + sum(info.layer_bytes[:n_cpu_layers])
    if out_on_cpu:
        cpu_weights += info.output_bytes + info.other_bytes
    ram = MemoryEstimate(
        weights_bytes=cpu_weights,
        kv_bytes=sum(kv[:n_cpu_layers]),
        compute_bytes=compute_bytes(info, spec, layers=n_cpu_layers > 0, output=out_on_cpu)
        + 4 * info.vocab_size * spec.output_rows,
    )
    return gpu_est, ram


def _greedy(info: ModelInfo, spec: ContextSpec, kv: tuple[int, ...], ngl: int,
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
        if used + w + k + compute_bytes(info, spec, layers=has_block, output=is_out) <= caps[g]:
            slots.append(g)
            used += w + k
            j += 1
        else:
            g, used = g + 1, 0
    return tuple(slots)


def _fits(info: ModelInfo, spec: ContextSpec, placement: Placement, caps: dict[int, int]) -> bool:
    gpu_est, _ = usage(info, spec, placement)
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


def place_model(info: ModelInfo, spec: ContextSpec, caps: dict[int, int], *,
                gpu_order: Sequence[int] | None = None) -> Placement:
    """The most layers of `info` that fit the GPU capacities `caps` (GPU index -> bytes).

    Layers go from the output layer back; over several GPUs in proportion to capacity when that
    fits, else packed in order.
    """
    order = list(gpu_order if gpu_order is not None else sorted(caps))
    if not order:
        return Placement(n_gpu_layers=0, slots=(), gpus=())
    cap_list = [caps[g] for g in order]
    kv = layer_kv_bytes(info, spec)
    for ngl in range(info.n_layer + 1, 0, -1):
        greedy = _greedy(info, spec, kv, ngl, cap_list)
        if greedy is None:
            continue
        prop = Placement(n_gpu_layers=ngl, slots=_proportional(info, kv, ngl, cap_list), gpus=tuple(order))
        if len(order) > 1 and _fits(info, spec, prop, caps):
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
        """Arguments for loading this model (backend.ModelSettings / llama_model_params)."""
        return {"n_gpu_layers": self.n_gpu_layers, "tensor_split": self.tensor_split, "main_gpu": self.main_gpu}


@dataclass(frozen=True, kw_only=True)
class DeviceUse:
    """One device of the plan: its budget and what each model puts there."""

    name: str  # "GPU 0 (NVIDIA ...)" or "RAM"
    index: int | None  # GPU index, None for RAM
    free_bytes: int | None
    usable_bytes: int | None  # free minus margin (GPUs), available RAM
    target: MemoryEstimate
    draft: MemoryEstimate

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
    spec: ContextSpec
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


def _fastest(gpus: Sequence[GpuBudget]) -> list[int]:
    """GPU indices, fastest first. NVML reports no speed, so total memory stands in for it."""
    return [g.index for g in sorted(gpus, key=lambda g: (-g.total_bytes, g.index))]


def _model_plan(role: Literal["target", "draft"], info: ModelInfo, spec: ContextSpec, placement: Placement,
                gpus: Sequence[GpuBudget]) -> ModelPlan:
    gpu_est, ram = usage(info, spec, placement)
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


def _place_pair(target: ModelInfo, draft: ModelInfo | None, spec: ContextSpec, draft_spec: ContextSpec,
                gpus: Sequence[GpuBudget], margin: int) -> tuple[Placement, Placement | None, dict[int, int]]:
    caps = {g.index: max(0, g.free_bytes - margin) for g in gpus}
    dplace: Placement | None = None
    if draft is not None:
        dplace = Placement(n_gpu_layers=0, slots=(), gpus=())
        whole = draft.n_layer + 1
        for g in _fastest(gpus):  # whole on the fastest GPU that can hold it
            p = Placement(n_gpu_layers=whole, slots=(0,) * whole, gpus=(g,))
            if _fits(draft, draft_spec, p, caps):
                dplace = p
                break
        else:
            if gpus:  # as much of it as fits on the GPU with the most room
                g = max(caps, key=lambda i: (caps[i], -i))
                dplace = place_model(draft, draft_spec, {g: caps[g]})
        d_gpu, _ = usage(draft, draft_spec, dplace)
        for g, est in d_gpu.items():
            caps[g] -= est.total_bytes
    tplace = place_model(target, spec, dict(caps), gpu_order=sorted(caps))
    return tplace, dplace, caps


def plan_offload(
    *,
    target: ModelInfo,
    draft: ModelInfo | None,
    gpus: Sequence[GpuBudget],
    spec: ContextSpec = ContextSpec(),
    draft_spec: ContextSpec | None = None,
    margin_bytes: int = DEFAULT_MARGIN,
    ram_available_bytes: int | None = None,
    advise: bool = True,
) -> OffloadPlan:
    """Plan where the target's and the draft's layers go.

    Args:
        target: the target model.
        draft: the draft model, or None for a target alone (or a prompt-lookup draft).
        gpus: the GPUs and their free memory (`GpuBudget.from_gpus(devices.system_info().gpus)`).
        spec: the target's context.
        draft_spec: the draft's context (default: the same as the target's).
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
    draft_spec = draft_spec or spec
    check_cache_types(target, spec)
    if draft is not None:
        check_cache_types(draft, draft_spec)
    tplace, dplace, _ = _place_pair(target, draft, spec, draft_spec, gpus, margin_bytes)
    tplan = _model_plan("target", target, spec, tplace, gpus)
    dplan = _model_plan("draft", draft, draft_spec, dplace, gpus) if draft is not None and dplace is not None else None

    devices = []
    for g in gpus:
        devices.append(DeviceUse(
            name=f"GPU {g.index} ({g.name})", index=g.index, free_bytes=g.free_bytes,
            usable_bytes=max(0, g.free_bytes - margin_bytes),
            target=tplan.gpu.get(g.index, MemoryEstimate()),
            draft=dplan.gpu.get(g.index, MemoryEstimate()) if dplan else MemoryEstimate(),
        ))
    ram_bytes = tplan.ram.total_bytes + (dplan.ram.total_bytes if dplan else 0)
    devices.append(DeviceUse(name="RAM", index=None, free_bytes=ram_available_bytes, usable_bytes=ram_available_bytes,
                             target=tplan.ram, draft=dplan.ram if dplan else MemoryEstimate()))
    whole = tplan.whole_on_gpu and (dplan is None or dplan.whole_on_gpu)
    ram_ok = ram_available_bytes is None or ram_bytes <= ram_available_bytes
    fits = whole and ram_ok
    plan = OffloadPlan(target=tplan, draft=dplan, devices=tuple(devices), spec=spec, margin_bytes=margin_bytes,
                       ram_bytes=ram_bytes, ram_available_bytes=ram_available_bytes, fits=fits, advice=())
    if advise and not fits:
        plan = replace(plan, advice=tuple(_advice(plan, target, draft, spec, draft_spec, gpus, margin_bytes)))
    return plan


# ---- advice --------------------------------------------------------------------------------


def _fmt(n: int) -> str:
    from ggufspec.devices import format_bytes

    return format_bytes(n)


def _whole_need(info: ModelInfo, spec: ContextSpec) -> MemoryEstimate:
    """What the whole model puts on one GPU (blocks + output layer, KV, compute)."""
    whole = info.n_layer + 1
    gpu_est, _ = usage(info, spec, Placement(n_gpu_layers=whole, slots=(0,) * whole, gpus=(0,)))
    return gpu_est[0]


def _quiet(target: ModelInfo, draft: ModelInfo | None, spec: ContextSpec, draft_spec: ContextSpec,
           gpus: Sequence[GpuBudget], margin: int) -> tuple[bool, int, bool]:
    """(pair wholly on GPUs?, target layers offloaded, draft wholly on a GPU?) for other settings."""
    tplace, dplace, _ = _place_pair(target, draft, spec, draft_spec, gpus, margin)
    d_ok = draft is None or (dplace is not None and dplace.n_gpu_layers >= draft.n_layer + 1)
    return d_ok and tplace.n_gpu_layers >= target.n_layer + 1, tplace.n_gpu_layers, d_ok


def _advice(plan: OffloadPlan, target: ModelInfo, draft: ModelInfo | None, spec: ContextSpec,
            draft_spec: ContextSpec, gpus: Sequence[GpuBudget], margin: int) -> list[str]:
    lines: list[str] = []
    t_all, d_all = target.n_layer + 1, (draft.n_layer + 1 if draft else 0)
    if not plan.ram_ok:
        lines.append(
            f"RAM: the CPU side needs {_fmt(plan.ram_bytes)} but {_fmt(plan.ram_available_bytes or 0)} is available"
        )
    if not gpus:
        lines.append(
            f"no GPU: everything runs on the CPU ({_fmt(plan.ram_bytes)} of RAM); "
            "plan for a GPU with --vram SIZE"
        )
        return lines
    t_est = _whole_need(target, spec)
    d_est = _whole_need(draft, draft_spec) if draft else MemoryEstimate()
    t_need, d_need = t_est.total_bytes, d_est.total_bytes
    usable = sum(max(0, g.free_bytes - margin) for g in gpus)
    best = max(max(0, g.free_bytes - margin) for g in gpus)
    if draft is not None and plan.draft is not None and not plan.draft.whole_on_gpu:
        lines.append(
            f"the draft does not fit whole on a GPU: it needs {_fmt(d_need)} "
            f"(weights {_fmt(d_est.weights_bytes)}, KV {_fmt(d_est.kv_bytes)}, compute {_fmt(d_est.compute_bytes)}) "
            f"but the largest GPU has {_fmt(best)} usable; a smaller draft (at most {_fmt(best)} on GPU) would fit, "
            f"{plan.draft.n_gpu_layers}/{d_all} of its layers are on GPU now"
        )
    if not plan.target.whole_on_gpu:
        lines.append(
            f"{plan.target.n_gpu_layers}/{t_all} target layers on GPU: the pair needs {_fmt(t_need + d_need)} of GPU "
            f"memory (target {_fmt(t_need)}" + (f", draft {_fmt(d_need)}" if draft else "") +
            f") but {_fmt(usable)} is usable ({_fmt(margin)} margin kept per GPU)"
        )
    # a smaller context: the largest that fits the pair wholly, else the draft wholly
    n_now = _pad(spec.n_ctx or target.context_length or 4096, KV_PAD)

    def largest_ctx(pred_index: int) -> int:
        lo, hi, found = 1, n_now // KV_PAD - 1, 0
        while lo <= hi:
            mid = (lo + hi) // 2
            s = replace(spec, n_ctx=mid * KV_PAD)
            ds = replace(draft_spec, n_ctx=mid * KV_PAD)
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
        if _CACHE_BLOCKS[qt][1] / _CACHE_BLOCKS[qt][0] >= _CACHE_BLOCKS[spec.cache_type_k][1] / _CACHE_BLOCKS[spec.cache_type_k][0]:
            continue
        s = replace(spec, cache_type_k=qt, cache_type_v=qt)
        ds = replace(draft_spec, cache_type_k=qt, cache_type_v=qt)
        try:
            check_cache_types(target, s)
            if draft is not None:
                check_cache_types(draft, ds)
        except UserError:
            continue
        ok, ngl, _ = _quiet(target, draft, s, ds, gpus, margin)
        kv_now = sum(layer_kv_bytes(target, spec)) + (sum(layer_kv_bytes(draft, draft_spec)) if draft else 0)
        kv_q = sum(layer_kv_bytes(target, s)) + (sum(layer_kv_bytes(draft, ds)) if draft else 0)
        if not ok and ngl <= plan.target.n_gpu_layers:
            continue  # no better than now
        what = "would fit the pair wholly on GPU" if ok else f"would put {ngl}/{t_all} target layers on GPU"
        lines.append(f"--cache-type {qt} (KV {_fmt(kv_now)} -> {_fmt(kv_q)}) {what}")
        if ok:
            break
    # more memory
    per_gpu_extra = max(0, t_need + d_need + margin * len(gpus) - sum(g.free_bytes for g in gpus))
    if per_gpu_extra:
        lines.append(f"about {_fmt(per_gpu_extra)} more free GPU memory would fit the pair at these settings")
    return lines


# ---- for loading ---------------------------------------------------------------------------


def plan_for_load(
    *,
    target: Path | str,
    draft: Path | str | None,
    gpus: Sequence[object],
    n_ctx: int,
    cache_type: str = "f16",
    n_batch: int = 512,
    flash_attn: Literal["auto", "on", "off"] = "auto",
    margin_bytes: int = DEFAULT_MARGIN,
) -> tuple[dict[str, object], dict[str, object]]:
    """Load arguments for a target and a draft file on these GPUs (what `--ngl auto` uses).

    Args:
        target: the target GGUF (first shard).
        draft: the draft GGUF, or None.
        gpus: `devices.Gpu` objects (index, name, free_bytes, total_bytes).
        n_ctx: context size of both contexts.
        cache_type: KV cache type of both.
        n_batch: batch size of both contexts.
        flash_attn: flash attention mode.
        margin_bytes: memory to keep free on each GPU.

    Returns:
        (target kwargs, draft kwargs), each with n_gpu_layers, tensor_split and main_gpu
        (`backend.ModelSettings` fields); the draft's are all-CPU when there is no draft.

    Raises:
        UserError: unreadable GGUF, or a KV cache type the model cannot use.
    """
    from ggufspec.ggufinfo import read_model_info

    spec = ContextSpec(n_ctx=n_ctx, cache_type_k=cache_type, cache_type_v=cache_type, n_batch=n_batch,
                       n_ubatch=min(n_batch, 512), flash_attn=flash_attn)
    t_info = read_model_info(target)
    d_info = read_model_info(draft) if draft is not None else None
    plan = plan_offload(target=t_info, draft=d_info, gpus=GpuBudget.from_gpus(gpus), spec=spec,
                        margin_bytes=margin_bytes, advise=False)
    cpu: dict[str, object] = {"n_gpu_layers": 0, "tensor_split": None, "main_gpu": 0}
    return plan.to_load_kwargs("target"), (plan.to_load_kwargs("draft") if plan.draft is not None else cpu)
