"""`ggufspec bench --sweep-ngl 0,8,16,24,all`: the target alone and speculative at each count of
target layers offloaded (to GPUs, or to RPC workers with --rpc): tokens/s, speedup and accept
rate per point, and a plot of tokens/s against layers offloaded.

Each point loads the pair once with `--ngl N` (the draft's layers as `--ngld` says; auto: where
the planner puts them, a local GPU, else the CPU), then runs every prompt `repeats` times, greedy,
the target alone and speculative turn about. Files in --out: sweep_ngl.json, sweep_ngl.csv, sweep_ngl.md, sweep_ngl.png.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

from ggufspec.atomic import write_atomic
from ggufspec.errors import UserError
from ggufspec.loop.speculation import SpeculativeSettings
from ggufspec.settings import ContextSettings, Layers, PairSettings


@dataclass(frozen=True, kw_only=True)
class SweepPoint:
    """One target layer count: mean tokens/s alone and speculative over all prompts and repeats."""

    ngl: str  # as given: a count or "all"
    target_layers_offloaded: int  # blocks and the output layer off the CPU
    draft_layers_offloaded: int  # ... of the draft model
    devices: tuple[dict, ...]  # run --json's "devices" for this point
    alone_tps: float
    spec_tps: float
    speedup: float
    accept_rate: float
    identical: bool  # greedy speculative text equal to the target alone on every run
    runs: int


def parse_ngl_list(text: str) -> tuple[Layers, ...]:
    """`0,8,16,24,all` -> (0, 8, 16, 24, "all"). UserError for anything else."""
    out: list[Layers] = []
    for item in text.split(","):
        item = item.strip().lower()
        if item == "all":
            out.append("all")
        elif item.isdigit():
            out.append(int(item))
        else:
            raise UserError(f"--sweep-ngl: {item!r} is not a layer count; write counts and 'all', like 0,8,16,all")
    if not out:
        raise UserError("--sweep-ngl needs at least one layer count, like 0,8,16,all")
    return tuple(out)


def run_sweep(*, target: str | None, draft: str | None, prompts: Sequence[object], ngl_values: Sequence[Layers],
              max_tokens: int, repeats: int, n_ctx: int, n_threads: int | None, rpc: str | None,
              draft_layers: Layers = "auto", speculative: SpeculativeSettings | None = None,
              progress: Callable[[str], None] | None = None) -> list[SweepPoint]:
    """Run the sweep (see the module docstring); one SweepPoint per layer count, in order.
    `draft_layers`: the draft's layers off the CPU at every point (--ngld); `speculative`: the
    speculative runs' settings (bench's speculation flags; None: the defaults)."""
    from ggufspec.runtime import load_pair

    spec = speculative or SpeculativeSettings()
    points: list[SweepPoint] = []
    for ngl in ngl_values:
        settings = PairSettings(context=ContextSettings(n_ctx=n_ctx, n_threads=n_threads), n_gpu_layers=ngl,
                                n_gpu_layers_draft=draft_layers, rpc=(rpc,) if rpc else ())
        with load_pair(target=target, draft=draft, settings=settings) as pair:
            if not pair.drafters:
                raise UserError("--sweep-ngl compares speculative decoding with the target alone; give a --draft model")
            alone_t = alone_s = spec_t = spec_s = 0.0
            drafted = accepted = runs = 0
            identical = True
            if prompts:  # warm-up, discarded: first-call costs (graph allocation, page faults, caches)
                warm = pair.encode(messages=prompts[0].messages)  # type: ignore[attr-defined]
                pair.generate(prompt_tokens=warm, drafters=(), max_tokens=4).run()
                pair.generate(prompt_tokens=warm, max_tokens=4, speculative=spec).run()
            for p in prompts:
                tokens = pair.encode(messages=p.messages)  # type: ignore[attr-defined]
                for _ in range(repeats):
                    if progress:
                        progress(f"ngl {ngl}: {p.id}")  # type: ignore[attr-defined]
                    a = pair.generate(prompt_tokens=tokens, drafters=(), max_tokens=max_tokens).run()
                    s = pair.generate(prompt_tokens=tokens, max_tokens=max_tokens, speculative=spec).run()
                    alone_t += a.stats.generated_tokens
                    alone_s += a.stats.generated_tokens / a.stats.gen_tps if a.stats.gen_tps else 0.0
                    spec_t += s.stats.generated_tokens
                    spec_s += s.stats.generated_tokens / s.stats.gen_tps if s.stats.gen_tps else 0.0
                    drafted += s.stats.drafted
                    accepted += s.stats.accepted
                    identical = identical and a.tokens == s.tokens
                    runs += 1
            offloaded = sum(d.target_layers for d in pair.devices if d.kind != "cpu")
            draft_offloaded = sum(d.draft_layers for d in pair.devices if d.kind != "cpu")
            alone_tps = alone_t / alone_s if alone_s else 0.0
            spec_tps = spec_t / spec_s if spec_s else 0.0
            points.append(SweepPoint(
                ngl=str(ngl), target_layers_offloaded=offloaded, draft_layers_offloaded=draft_offloaded,
                devices=tuple(d.as_dict() for d in pair.devices),
                alone_tps=round(alone_tps, 2), spec_tps=round(spec_tps, 2),
                speedup=round(spec_tps / alone_tps, 3) if alone_tps else 0.0,
                accept_rate=round(accepted / drafted, 4) if drafted else 0.0, identical=identical, runs=runs))
    return points


def write_sweep(points: Sequence[SweepPoint], out: Path, *, meta: dict, plot: bool = True) -> list[Path]:
    """sweep_ngl.json / .csv / .md (and .png) in `out`, each written atomically."""
    out.mkdir(parents=True, exist_ok=True)
    rows = [asdict(p) for p in points]
    files = [write_atomic(out / "sweep_ngl.json", json.dumps({"meta": meta, "points": rows}, indent=1) + "\n")]
    cols = ["ngl", "target_layers_offloaded", "draft_layers_offloaded", "alone_tps", "spec_tps", "speedup",
            "accept_rate", "identical", "runs"]
    buf = io.StringIO(newline="")
    w = csv.writer(buf)
    w.writerow(cols)
    for r in rows:
        w.writerow([r[c] for c in cols])
    files.append(write_atomic(out / "sweep_ngl.csv", buf.getvalue()))
    md = ["| --ngl | target layers offloaded | draft layers offloaded | target alone tok/s | speculative tok/s "
          "| speedup | accept rate | greedy identical |",
          "|---|---|---|---|---|---|---|---|"]
    md += [f"| {p.ngl} | {p.target_layers_offloaded} | {p.draft_layers_offloaded} | {p.alone_tps:.1f} | "
           f"{p.spec_tps:.1f} | {p.speedup:.2f}x | "
           f"{p.accept_rate:.0%} | {'yes' if p.identical else 'NO'} |" for p in points]
    files.append(write_atomic(out / "sweep_ngl.md", "\n".join(md) + "\n"))
    if plot:
        files.append(_plot(points, out / "sweep_ngl.png", title=str(meta.get("title", ""))))
    return files


def _plot(points: Sequence[SweepPoint], path: Path, *, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = [p.target_layers_offloaded for p in points]
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    ax.plot(x, [p.alone_tps for p in points], "o-", label="target alone")
    ax.plot(x, [p.spec_tps for p in points], "s-", label="speculative")
    for p in points:
        ax.annotate(f"{p.speedup:.2f}x", (p.target_layers_offloaded, p.spec_tps), textcoords="offset points",
                    xytext=(0, 6), ha="center", fontsize=8)
    ax.set_xlabel("target layers offloaded (blocks + output layer)")
    ax.set_ylabel("tokens/s")
    ax.set_title(title or "tokens/s against layers offloaded")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()

    buf = io.BytesIO()
    try:
        fig.savefig(buf, dpi=120, format="png")
    finally:
        plt.close(fig)
    return write_atomic(path, buf.getvalue())
