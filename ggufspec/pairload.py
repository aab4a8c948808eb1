"""What is decided before a pair's models load: each model's layers per device (explicit counts or
the offload planner's), the --rpc workers, whether the KV caches fit, and a draft model's context.
ggufspec.runtime loads with these; llama.cpp is reached only inside the functions that need it."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Sequence

from ggufspec.ggufinfo import ModelInfo, read_model_info
from ggufspec.hardware import offload_devices
from ggufspec.llama import stall
from ggufspec.loop.controlsettings import ControlSettings
from ggufspec.loop.kvshare import shared_kv_refusal
from ggufspec.models.vocab import check_vocab
from ggufspec.plan import plan_for_load
from ggufspec.plan.fit import ContextNeed, check_context_fits
from ggufspec.plan.split import DeviceLayers, device_layers, effective_split, layer_devices
from ggufspec.rpc import parse_endpoints
from ggufspec.settings import ContextSettings, ModelSettings, PairSettings


def _layer_count(value: int | str) -> int:
    """--ngl/--ngld as llama.cpp's n_gpu_layers ("all": -1)."""
    return -1 if value == "all" else int(value)


def read_infos(target: Path, drafts: Sequence[Path | None]) -> tuple[ModelInfo, dict[Path, ModelInfo]]:
    """Every file read and checked before any loads (a clear error for a non-GGUF or truncated file,
    or a draft whose vocabulary differs): the target's `ModelInfo` and each draft model's by path."""
    target_info = read_model_info(target)
    draft_infos: dict[Path, ModelInfo] = {}
    for path in drafts:
        if path is not None:
            draft_infos[path] = read_model_info(path)
            check_vocab(target, path)
    return target_info, draft_infos


def model_settings(target: Path, draft: Path | None, settings: PairSettings, *,
                   quiet: bool = False) -> tuple[ModelSettings, ModelSettings]:
    """Offload of target and draft: explicit layer counts, or the planner's for "auto" (the draft
    whole on one GPU first, then target layers); all on the CPU where llama.cpp has no GPU (with a
    note on stderr when layers were asked for, unless `quiet`)."""
    from ggufspec.llama.lib import gpu_offload_supported

    add_workers(settings)
    tl, dl = settings.n_gpu_layers, settings.n_gpu_layers_draft
    if not gpu_offload_supported():
        asked = [f"{flag} {v}" for flag, v in (("--ngl", tl), ("--ngld", dl)) if v not in ("auto", 0)]
        if asked and not quiet:
            sys.stderr.write(f"note: {' and '.join(asked)} ignored: this llama.cpp build has no GPU backend; "
                             "everything runs on the CPU\n")
        return ModelSettings(), ModelSettings()
    t_kw: dict = {"n_gpu_layers": 0 if tl == "auto" else _layer_count(tl)}
    d_kw: dict = {"n_gpu_layers": 0 if dl == "auto" else _layer_count(dl)}
    if "auto" in (tl, dl):
        gpus = offload_devices()  # llama.cpp's own: RPC workers, then GPUs
        if gpus:
            cache = settings.context.cache_type_k
            t_plan, d_plan = plan_for_load(
                target=target, draft=draft, gpus=gpus,
                context=settings.context.with_cache_type("f16" if cache == "auto" else cache),  # type: ignore[arg-type]
            )
            if tl == "auto":
                t_kw = dict(t_plan)
            if dl == "auto":
                d_kw = dict(d_plan)

    def build(kw: dict) -> ModelSettings:
        split = kw.get("tensor_split")
        return ModelSettings(n_gpu_layers=int(kw["n_gpu_layers"]), tensor_split=tuple(split) if split else None,
                             main_gpu=int(kw.get("main_gpu") or 0))
    return build(t_kw), build(d_kw)


def load_devices() -> tuple[Any, ...]:
    """llama.cpp's devices with their free memory before loading (none where the build has no GPU
    backend: everything on the CPU)."""
    from ggufspec.llama.lib import gpu_offload_supported

    return tuple(offload_devices()) if gpu_offload_supported() else ()


def runs_on_gpu(target_load: ModelSettings, devices: Sequence[Any]) -> bool:
    """Target layers go to a GPU (RPC workers served by ggufspec compute with its CPU kernels:
    batch-invariant, like the CPU)."""
    return target_load.n_gpu_layers != 0 and any(d.kind == "gpu" for d in devices)


def runs_on_graphs(load: ModelSettings, devices: Sequence[Any]) -> bool:
    """Layers go to a GPU whose backend replays a captured graph of each decode (CUDA), and runs a
    decode whose shape differs from the last one's, and the next, without it (the other GPU
    backends capture none)."""
    return load.n_gpu_layers != 0 and any(d.kind == "gpu" and str(d.name).upper().startswith("CUDA")
                                          for d in devices)


def draft_one_row(draft_load: ModelSettings, devices: Sequence[Any] | None = None, *, parallel: int = 1) -> bool:
    """Whether a draft model decodes one row at a time (ggufspec.loop.model_drafter.ModelDrafter's
    `one_row`): where its layers go to a GPU whose backend re-warms and re-captures its graph
    whenever a decode's shape changes (`runs_on_graphs`; `devices`: llama.cpp's, asked when None),
    and not for server slots (`parallel` > 1: their decodes batch every slot's rows).
    GGUFSPEC_DRAFT_ONE_ROW=1 or 0 overrides the first (to compare)."""
    if parallel > 1:
        return False
    forced = os.environ.get("GGUFSPEC_DRAFT_ONE_ROW", "").strip()
    if forced in ("0", "1"):
        return forced == "1"
    if devices is None:
        devices = load_devices() if draft_load.n_gpu_layers else ()
    return runs_on_graphs(draft_load, devices)


def control_settings(target_load: ModelSettings, devices: Sequence[Any], settings: PairSettings) -> ControlSettings:
    """The draft controller's settings for this hardware: rule switch_cost where the target's
    graph is captured (`runs_on_graphs`: a change of its rows costs), not with server slots, whose
    decodes merge every slot's rows (their shape is not one round's)."""
    return ControlSettings(switch_cost=settings.parallel <= 1 and runs_on_graphs(target_load, devices))


def add_workers(settings: PairSettings) -> None:
    """Register the `--rpc` workers with llama.cpp (checked first: down or another version is a
    UserError); a worker that dies later ends the process with one line and exit 2."""
    if not settings.rpc:
        return
    from ggufspec.llama import devices
    from ggufspec.llama.lib import gpu_offload_supported
    devices.add_workers(parse_endpoints(",".join(settings.rpc)))
    if not devices.failure_handled():  # a server installs its own (it survives a worker's death)
        devices.on_worker_failure()
    gpu_offload_supported.cache_clear()  # llama.cpp offloads once an RPC backend is registered


def warm_context(model: Any, *, settings: ContextSettings, parallel: int, lock: Any) -> Any:
    """A warmed context of `model` for the pair: one sequence, or with `parallel` > 1 one per server
    slot sharing `lock` (ggufspec.llama.multi), of which the pair's own is slot 0's view."""
    if parallel > 1:
        from ggufspec.llama.multi import MultiContext

        multi = MultiContext(model, settings=settings, n_seq=parallel, lock=lock)
        multi.warmup()
        return multi.views[0]
    from ggufspec.llama.context import Context

    ctx = Context(model, settings=settings)
    ctx.warmup()
    return ctx


def shares_kv(target_info: ModelInfo, info: ModelInfo, settings: PairSettings) -> bool:
    """Does this draft take the target's KV cache (--draft-kv auto, ggufspec.loop.kvshare)?"""
    return settings.draft_kv == "auto" and shared_kv_refusal(target_info, info) is None


def draft_context(target_info: ModelInfo, info: ModelInfo, settings: PairSettings, *,
                   target: ContextSettings) -> ContextSettings:
    """A draft model's context: the target's when it shares its KV cache, else an f16 cache."""
    return target if shares_kv(target_info, info, settings) else settings.context.with_cache_type("f16")


def check_memory(target_info: ModelInfo, draft_infos: Sequence[ModelInfo], settings: PairSettings, *,
                  context: ContextSettings, devices: Sequence[Any]) -> None:
    """Refuse a --ctx whose KV caches cannot fit this machine before llama.cpp tries (its own
    failure names a wrong cause), with the planner's arithmetic (ggufspec.plan.fit)."""
    import psutil

    n_seq = settings.parallel
    needs = [ContextNeed(info=target_info, context=context, n_seq=n_seq)]
    needs += [ContextNeed(info=i, context=draft_context(target_info, i, settings, target=context), n_seq=n_seq)
              for i in draft_infos]
    available = int(psutil.virtual_memory().available) + sum(int(d.free_bytes) for d in devices)
    check_context_fits(needs=needs, available_bytes=available)


def layers_per_device(target_info: ModelInfo, target_load: ModelSettings, draft_path: Path | None,
                   draft_load: ModelSettings, devices: Sequence[object]) -> tuple[DeviceLayers, ...]:
    """Layers of the target and the draft per device, as llama.cpp places them."""
    free = [d.free_bytes for d in devices]  # type: ignore[attr-defined]

    def slots(n_layer: int, load: ModelSettings) -> tuple[int, ...]:
        return layer_devices(n_layer=n_layer, n_gpu_layers=load.n_gpu_layers,
                             split=effective_split(load.tensor_split, free) if devices else ())
    t = slots(target_info.n_layer, target_load)
    d = slots(read_model_info(draft_path).n_layer, draft_load) if draft_path is not None else None
    return device_layers(devices=[(x.name, x.kind, x.free_bytes) for x in devices], target=t, draft=d)  # type: ignore[attr-defined]


def watch_workers(settings: PairSettings) -> None:
    """Once llama.cpp holds its connections to the --rpc workers: a dead one is found in 25 s
    (ggufspec.llama.devices), a frozen one in 20 (ggufspec.llama.stall)."""
    if not settings.rpc:
        return
    from ggufspec.llama.devices import harden_worker_sockets

    endpoints = parse_endpoints(",".join(settings.rpc))
    harden_worker_sockets(endpoints)
    stall.arm(endpoints)
