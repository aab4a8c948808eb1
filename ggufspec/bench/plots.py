"""The bench's PNG plots (matplotlib, Agg backend; imported only when plotting): tok/s against K,
accept rate by draft position, where the time goes, measured against expected speedup."""

from __future__ import annotations

from pathlib import Path

from ggufspec.atomic import write_atomic
from ggufspec.bench.configs import BASELINE
from ggufspec.bench.results import BenchResult


def write_plots(result: BenchResult, out: Path) -> list[Path]:
    """PNG plots (matplotlib, Agg): tok/s vs K per draft, accept rate by position, the time
    split per configuration, measured vs expected speedup. Returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s, plan = result.summary, result.plan
    cfgs = [c for c in s["configs"] if c.get("tps")]
    written: list[Path] = []
    title = f"{plan.target_label} target, {plan.max_tokens} tokens, {len(plan.prompts)} prompts"

    # 1. tokens/s against K per draft, with the target-alone line
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=100)
    labels = [x.label for x in plan.drafts]  # in the plan's order
    drafts = sorted({c["draft"] for c in cfgs if c["group"] == "k-sweep"}, key=lambda d: labels.index(d) if d in labels else 99)
    for d in drafts:
        pts = sorted((c["draft_max"], c["tps"]) for c in cfgs if c["group"] == "k-sweep" and c["draft"] == d and c["engine"] == "ggufspec")
        if pts:
            ax.plot(*zip(*pts), marker="o", label=f"ggufspec, draft {d}")
    nat = sorted((c["draft_max"], c["tps"]) for c in cfgs if c["engine"] == "native")
    if nat:
        ax.plot(*zip(*nat), marker="s", linestyle="--", color="black", label="llama.cpp speculative-simple")
    base = next((c for c in cfgs if c["name"] == "target alone"), None)
    if base:
        ax.axhline(base["tps"], color="grey", linestyle=":", label=f"target alone {base['tps']:.1f}")
    if s.get("llama_bench_tps"):
        ax.axhline(s["llama_bench_tps"], color="brown", linestyle="-.", linewidth=1, label=f"llama-bench {s['llama_bench_tps']:.1f}")
    ax.set_xlabel("draft length K (fixed)")
    ax.set_ylabel("generation tokens/s (median)")
    ax.set_xscale("log", base=2)
    ks = sorted({c["draft_max"] for c in cfgs if c["group"] == "k-sweep"})
    if ks:
        ax.set_xticks(ks, [str(k) for k in ks])
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    written.append(_save(fig, out / "tps_vs_k.png"))

    # 2. accept rate by draft position
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=100)
    for c in cfgs:
        if c["engine"] != "ggufspec" or c["draft"] == BASELINE:
            continue
        if c["group"] == "k-sweep" and c["draft_max"] != max(ks):
            continue
        pos = [(i + 1, v) for i, v in enumerate(c.get("accept_rate_by_position") or []) if v is not None]
        if pos:
            ax.plot(*zip(*pos), marker=".", label=c["name"])
    ax.set_xlabel("draft position")
    ax.set_ylabel("share of rounds whose draft was accepted up to here")
    ax.set_ylim(0, 1.02)
    ax.set_title("accept rate by draft position", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    written.append(_save(fig, out / "accept_by_position.png"))

    # 3. the time split per configuration (ms per generated token)
    ours = [c for c in cfgs if c["engine"] == "ggufspec" and c.get("ms_per_token")]
    fig, ax = plt.subplots(figsize=(7.5, 0.32 * len(ours) + 1.4), dpi=100)
    y = range(len(ours))
    left = [0.0] * len(ours)
    for part, colour in (("draft", "#4c9f70"), ("verify", "#3b6ea8"), ("python", "#d08c3a")):
        vals = [c["ms_per_token"][part] or 0.0 for c in ours]
        ax.barh(list(y), vals, left=left, color=colour, label=part)
        left = [a + b for a, b in zip(left, vals)]
    ax.set_yticks(list(y), [c["name"] for c in ours], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("ms per generated token")
    ax.set_title("where the time goes: draft decode, target verify, our Python", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(axis="x", alpha=0.3)
    written.append(_save(fig, out / "time_split.png"))

    # 4. measured vs expected speedup
    spec = [c for c in cfgs if c.get("expected_speedup") is not None and c.get("speedup") is not None]
    fig, ax = plt.subplots(figsize=(7.5, 0.42 * len(spec) + 1.6), dpi=100)
    y = list(range(len(spec)))
    h = 0.27
    ax.barh([i - h for i in y], [c["speedup"] for c in spec], height=h, label="measured", color="#3b6ea8")
    ax.barh(y, [c["expected_speedup"] for c in spec], height=h, label="Theorem 3.8 (verify = 1 step)", color="#bbbbbb")
    ax.barh([i + h for i in y], [c.get("expected_speedup_measured_verify") or 0.0 for c in spec], height=h,
            label="Theorem 3.8 with the verify cost measured", color="#d08c3a")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_yticks(y, [c["name"] for c in spec], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("speedup over the target alone")
    ax.set_title("measured vs expected speedup, (1 - a^(K+1)) / ((1 - a)(cK + 1))", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(axis="x", alpha=0.3)
    written.append(_save(fig, out / "speedup_expected.png"))
    return written


def _save(fig, path: Path) -> Path:
    """The figure as a PNG at `path`, landing whole (ggufspec.atomic.write_atomic)."""
    import io

    import matplotlib.pyplot as plt

    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return write_atomic(path, buf.getvalue())
