"""Plan GPU offload of a target and a draft inside a VRAM budget, and show the arithmetic.

The draft goes first and whole onto the fastest GPU (its latency is paid on every drafted
token), then target layers from the output layer back, spread over the GPUs in proportion to
free memory; each GPU keeps --margin free. With no --target/--draft, the embedded default pair.
--vram plans for a budget instead of the GPUs found (NVML / nvidia-smi / AMD sysfs), so it works
on a machine with no GPU. --rpc adds llama.cpp RPC workers (`ggufspec rpc-server`) as devices
before the GPUs (llama.cpp's order); the draft never goes to a worker (a network round trip per
drafted token); with --rpc, --vram sizes go to the workers first, then to the GPUs. --measure asks
llama.cpp itself (a dry run that only simulates allocations where everything stays on the CPU;
a real load where layers go to a GPU or an RPC worker, since there a dry run reports no weights or
KV cache per device) and shows its numbers next to the estimate, per device too.

examples:
  ggufspec plan --vram 8GiB
  ggufspec plan --target ./llama-8b-Q4_K_M.gguf --draft ./llama-1b-Q4_K_M.gguf --vram 12GiB,8GiB --ctx 16384
  ggufspec plan --vram 4GiB --cache-type q8_0 --measure --json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ggufspec.commands import add_model_arguments, add_rpc_argument


def add_arguments(parser: argparse.ArgumentParser) -> None:
    m = parser.add_argument_group("models")
    add_model_arguments(m, draft_help="draft model reference; 'none' plans the target alone")
    b = parser.add_argument_group("budget")
    b.add_argument("--vram", metavar="SIZE[,SIZE..]", help="free memory per GPU, e.g. 8GiB or 12GiB,8GiB (default: detect)")
    add_rpc_argument(b)
    b.add_argument("--margin", metavar="SIZE", default="1GiB", help="memory kept free on each GPU (default 1GiB)")
    c = parser.add_argument_group("context")
    c.add_argument("--ctx", type=int, default=4096, metavar="N", help="context size in tokens (default 4096; 0 = trained)")
    c.add_argument("--cache-type", choices=("auto", "f16", "q8_0", "q4_0", "f32"), default="auto",
                   help="KV cache type (default auto, as `run` picks it: the target's q8_0 on the CPU, f16 on a GPU; the draft's f16)")
    o = parser.add_argument_group("output")
    o.add_argument("--measure", action="store_true", help="also ask llama.cpp (a dry run on the CPU; a real load where layers go to a GPU or worker)")
    o.add_argument("--json", action="store_true", help="print the plan as JSON")


def _pair_paths(args: argparse.Namespace) -> tuple[Path, Path | None]:
    from ggufspec.models.refs import resolve_path
    from ggufspec.models.resolve import LOOKUP, resolve_pair_refs

    refs = resolve_pair_refs(target=args.target, draft=args.draft, pair=args.pair)
    target = resolve_path(refs.target, offline=args.offline)
    draft = next((d for d in refs.drafts if d != LOOKUP), None)  # prompt lookup takes no memory worth planning
    if draft is None:
        return target, None
    return target, resolve_path(draft, offline=args.offline)


def _with_workers(rpc: str, gpus: tuple[Any, ...], vram: tuple[int, ...] | None) -> tuple[Any, ...]:
    """RPC workers (asked through llama.cpp) before the GPUs, re-indexed in llama.cpp's model order;
    `--vram` sizes replace the reported free memory, workers first."""
    from ggufspec.hardware import llama_devices
    from ggufspec.plan import GpuBudget

    workers = [d for d in llama_devices(rpc=rpc) if d.kind == "rpc"]
    out = [GpuBudget(index=i, name=f"{d.name} {d.description}", free_bytes=d.free_bytes, total_bytes=d.total_bytes,
                     kind="rpc") for i, d in enumerate(workers)]
    out += [GpuBudget(index=len(out) + j, name=g.name, free_bytes=g.free_bytes, total_bytes=g.total_bytes)
            for j, g in enumerate(gpus)]
    if vram is not None:
        out = [GpuBudget(index=b.index, name=b.name, free_bytes=vram[i], total_bytes=vram[i], kind=b.kind)
               if i < len(vram) else b for i, b in enumerate(out)]
    return tuple(out)


def _pct(estimate: int, measured: int) -> float | None:
    return None if not measured else round(100.0 * (estimate - measured) / measured, 2)


def run(args: argparse.Namespace) -> int:
    from ggufspec import hardware
    from ggufspec.ggufinfo import read_model_info, read_vocab
    from ggufspec.models.vocab import compare_vocab
    from ggufspec.plan import GpuBudget, estimate_memory, plan_offload
    from ggufspec.settings import ContextSettings

    # validate every option before touching a model
    vram = hardware.parse_sizes(args.vram) if args.vram is not None else None
    margin = hardware.parse_size(args.margin)
    context = ContextSettings(n_ctx=args.ctx, cache_type_k=args.cache_type, cache_type_v=args.cache_type)

    target_path, draft_path = _pair_paths(args)
    target = read_model_info(target_path)
    draft = read_model_info(draft_path) if draft_path is not None else None
    verdict = compare_vocab(target=read_vocab(target_path), draft=read_vocab(draft_path)) if draft_path else None

    system = hardware.system_info(vram=vram if not args.rpc else None)
    budgets = GpuBudget.from_gpus(system.gpus)
    if args.rpc:
        budgets = _with_workers(args.rpc, budgets, vram)
    plan = plan_offload(target=target, draft=draft, gpus=budgets, context=context,
                        margin_bytes=margin, ram_available_bytes=system.ram_available_bytes)

    measured: dict[str, Any] = {}
    if args.measure:
        from ggufspec.llama.lib import gpu_offload_supported
        from ggufspec.llama.measure import measure_contexts

        for role, info, mp, c in (("target", target, plan.target, plan.context),
                                  ("draft", draft, plan.draft, plan.draft_context)):
            if info is None or mp is None:
                continue
            ctx = dict(n_ctx=c.n_ctx, cache_type_k=c.cache_type_k, cache_type_v=c.cache_type_v,
                       n_batch=c.n_batch, n_ubatch=c.n_ubatch, flash_attn=c.flash_attn, swa_full=c.swa_full)
            # a dry run on CUDA (and RPC) reports 0 B of weights and KV per device: load for real there
            real = bool(args.rpc) or (mp.n_gpu_layers != 0 and gpu_offload_supported())
            m = measure_contexts(path=info.path, contexts=[ctx], n_gpu_layers=mp.n_gpu_layers,
                                 tensor_split=mp.tensor_split, main_gpu=mp.main_gpu, dry_run=not real)[0]
            # compare like with like: if llama.cpp here cannot offload (a CPU-only build), its
            # numbers are for every layer on the CPU, and so is the estimate they are set against
            same_placement = m.n_offloaded == mp.n_gpu_layers
            versus = mp.estimate if same_placement else estimate_memory(info, c)
            measured[role] = {"measured": m, "versus": versus, "same_placement": same_placement}

    if args.json:
        json.dump(_to_json(plan, system, verdict, measured, target, draft), sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    _print(plan, target, draft, system, verdict, measured)
    return 0


def _to_json(plan: Any, system: Any, verdict: Any, measured: dict[str, Any], target: Any, draft: Any) -> dict[str, Any]:
    from ggufspec.plan.measured import per_device

    per = per_device(plan, measured) if measured else {}

    def device(d: Any) -> dict[str, Any]:
        est = d.target + d.draft
        return {
            "name": d.name, "kind": d.kind, "index": d.index, "target_layers": d.target_layers,
            "draft_layers": d.draft_layers, "free_bytes": d.free_bytes, "usable_bytes": d.usable_bytes,
            "target_bytes": d.target.total_bytes, "draft_bytes": d.draft.total_bytes, "used_bytes": d.used_bytes,
            "headroom_bytes": d.headroom_bytes,
            "estimate": {"weights_bytes": est.weights_bytes, "kv_bytes": est.kv_bytes, "compute_bytes": est.compute_bytes},
            "measured": per.get(d.name),
        }

    def model(role: str, mp: Any, info: Any) -> dict[str, Any] | None:
        if mp is None:
            return None
        out: dict[str, Any] = {
            "path": str(info.path),
            "n_gpu_layers": mp.n_gpu_layers,
            "n_layers_total": mp.n_layer + 1,
            "tensor_split": list(mp.tensor_split) if mp.tensor_split is not None else None,
            "main_gpu": mp.main_gpu,
            "estimate": mp.estimate.as_dict(),
        }
        if role in measured:
            m = measured[role]["measured"]
            versus = measured[role]["versus"]
            out["measured"] = {"weights_bytes": m.weights_bytes, "kv_bytes": m.kv_bytes, "compute_bytes": m.compute_bytes}
            if not measured[role]["same_placement"]:
                out["estimate_as_measured"] = versus.as_dict()
                out["measured_note"] = "llama.cpp here cannot offload: measured (and compared) with every layer on the CPU"
            out["difference_pct"] = {k: _pct(getattr(versus, k), getattr(m, k))
                                     for k in ("weights_bytes", "kv_bytes", "compute_bytes")}
        return out

    return {
        "devices": [device(d) for d in plan.devices],
        "fits": plan.fits,
        "target": model("target", plan.target, target),
        "draft": model("draft", plan.draft, draft),
        "context": {"n_ctx": plan.context.n_ctx, "cache_type": plan.context.cache_type_k,
                    "draft_cache_type": plan.draft_context.cache_type_k, "n_ubatch": plan.context.n_ubatch},
        "margin_bytes": plan.margin_bytes,
        "ram_bytes": plan.ram_bytes,
        "ram_available_bytes": plan.ram_available_bytes,
        "gpu_source": system.gpus[0].source if system.gpus else None,
        "vocab": None if verdict is None else {"status": verdict.status, "first_diff_id": verdict.first_diff_id,
                                               "message": verdict.message},
        "advice": list(plan.advice),
    }


def _print(plan: Any, target: Any, draft: Any, system: Any, verdict: Any, measured: dict[str, Any]) -> None:
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    from ggufspec.commands.tables import table_console
    from ggufspec.hardware import format_bytes as fb

    console = table_console(highlight=False, least=120)  # (its tables come later: 120 columns piped)

    def describe(info: Any) -> str:
        return f"{info.path.name} ({info.architecture}, {info.file_type}, {info.n_layer} layers)"

    console.print(f"[bold]target[/] {escape(describe(target))}", markup=True)
    if draft is not None:
        console.print(f"[bold]draft[/]  {escape(describe(draft))}", markup=True)
    s = plan.context
    source = {"budget": "--vram budget"}.get(system.gpus[0].source, f"detected ({system.gpus[0].source})") if system.gpus else "no GPU"
    console.print(f"context {s.n_ctx or target.context_length:,} tokens, KV cache {s.cache_type_k}, "
                  f"batch {s.n_ubatch}; GPUs: {source}; margin {fb(plan.margin_bytes)} per GPU", markup=False)
    if verdict is not None and verdict.status != "identical":
        style = "red" if verdict.status == "incompatible" else "yellow"
        console.print(f"[{style}]vocabulary {verdict.status}:[/] {escape(verdict.message)}", markup=True)

    models = Table(box=box.SIMPLE_HEAD, pad_edge=False, title="placement", title_justify="left")
    for col in ("model", "layers on GPU", "tensor_split", "weights", "KV cache", "compute", "total"):
        models.add_column(col, justify="left" if col in ("model", "tensor_split") else "right")
    for mp in (plan.target, plan.draft):
        if mp is None:
            continue
        split = ", ".join(f"{x:g}" for x in mp.tensor_split) if mp.tensor_split else "-"
        e = mp.estimate
        models.add_row(mp.role, f"{mp.n_gpu_layers}/{mp.n_layer + 1}", split, fb(e.weights_bytes), fb(e.kv_bytes),
                       fb(e.compute_bytes), fb(e.total_bytes))
    console.print(models)

    devs = Table(box=box.SIMPLE_HEAD, pad_edge=False, title="devices", title_justify="left")
    for col in ("device", "layers (target/draft)", "usable", "target", "draft", "used", "headroom"):
        devs.add_column(col, justify="left" if col == "device" else "right")
    for d in plan.devices:
        devs.add_row(escape(d.name), f"{d.target_layers}/{d.draft_layers}",
                     fb(d.usable_bytes) if d.usable_bytes is not None else "-", fb(d.target.total_bytes),
                     fb(d.draft.total_bytes), fb(d.used_bytes),
                     fb(d.headroom_bytes) if d.headroom_bytes is not None else "-")
    console.print(devs)

    if plan.fits:
        if any(d.kind == "gpu" for d in plan.devices):
            console.print("[green]fits:[/] both models wholly on GPU", markup=True)
        else:  # only RPC workers: the draft stays local, on the CPU, by design
            console.print("[green]fits:[/] the target wholly on the RPC workers, the draft on the CPU", markup=True)
    else:
        console.print("[yellow]does not fit wholly on GPU[/]" if plan.ram_ok else "[red]does not fit[/]", markup=True)
        for line in plan.advice:
            console.print(f"  - {line}", markup=False)

    if measured:
        t = Table(box=box.SIMPLE_HEAD, pad_edge=False, title="estimate vs llama.cpp (" + ("dry run" if all(v["measured"].dry_run for v in measured.values()) else "a real load") + ")", title_justify="left")
        for col in ("model", "part", "estimate", "llama.cpp", "difference"):
            t.add_column(col, justify="left" if col in ("model", "part") else "right")
        notes = set()
        for role, entry in measured.items():
            m, versus = entry["measured"], entry["versus"]
            if not entry["same_placement"]:
                notes.add("llama.cpp here cannot offload to a GPU: both columns are for every layer on the CPU")
            for part, key in (("weights", "weights_bytes"), ("KV cache", "kv_bytes"), ("compute", "compute_bytes")):
                e, mv = getattr(versus, key), getattr(m, key)
                pct = _pct(e, mv)
                t.add_row(role, part, fb(e), fb(mv), "-" if pct is None else f"{pct:+.2f}%")
        console.print(t)
        from ggufspec.plan.measured import per_device

        per = per_device(plan, measured)
        if len(per) > 1:  # several devices: each one's estimate against what llama.cpp put there
            t = Table(box=box.SIMPLE_HEAD, pad_edge=False, title="per device, both models", title_justify="left")
            for col in ("device", "part", "estimate", "llama.cpp", "difference"):
                t.add_column(col, justify="left" if col in ("device", "part") else "right")
            for d in plan.devices:
                got = per.get(d.name)
                if got is None:
                    continue
                est = d.target + d.draft
                for part, key in (("weights", "weights_bytes"), ("KV cache", "kv_bytes"), ("compute", "compute_bytes")):
                    pct = _pct(getattr(est, key), got[key])
                    t.add_row(escape(d.name), part, fb(getattr(est, key)), fb(got[key]),
                              "-" if pct is None else f"{pct:+.2f}%")
            console.print(t)
        for n in sorted(notes):
            console.print(n, style="dim", markup=False)
