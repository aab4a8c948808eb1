"""The bench's files: bench.json (everything), runs.csv (one row per run), bench.md (the report),
and the PNG plots (ggufspec.bench.plots) into one output directory. Each file lands whole
(written to a temporary file beside it, then os.replace): an interrupted bench never leaves a
half-written report over the previous one."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any, Mapping

from ggufspec.atomic import write_atomic
from ggufspec.bench.plots import write_plots
from ggufspec.bench.prompts import FILE_SET, PROMPT_SETS
from ggufspec.bench.results import BenchResult

SET_BLURBS = {
    "tuned": f"the built-in set the defaults were tuned on (`ggufspec/prompts/{PROMPT_SETS['tuned']}`)",
    "heldout": f"written fresh and never used for tuning (`ggufspec/prompts/{PROMPT_SETS['heldout']}`)",
    FILE_SET: "from `--prompts FILE`",
}


CSV_FIELDS = [
    "config", "engine", "draft", "k", "adaptive", "accept", "temperature", "prompt_id", "category", "repeat",
    "order", "prompt_tokens", "generated_tokens", "gen_tps", "prompt_tps", "gen_s", "drafted", "accepted",
    "rejections", "rounds", "paused_rounds", "k_hist", "drafter_rounds", "draft_s", "verify_s", "overhead_s",
    "stop_reason", "identical", "error", "checks", "checks_failed", "extended", "extended_accepted", "lane",
]


def write_json(result: BenchResult, path: Path) -> Path:
    """Everything (`BenchResult.to_dict`)."""
    return write_atomic(path, json.dumps(result.to_dict(), indent=1, default=_json_default) + "\n")


def _json_default(o: Any) -> Any:
    if isinstance(o, Path):
        return str(o)
    raise TypeError(type(o).__name__)


def write_csv(result: BenchResult, path: Path) -> Path:
    """One row per run."""
    f = io.StringIO(newline="")
    w = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
    w.writeheader()
    for r in result.runs:
        w.writerow({k: (round(v, 6) if isinstance(v, float) else json.dumps(v, separators=(",", ":"))
                        if isinstance(v, dict) else v) for k, v in asdict(r).items()})
    return write_atomic(path, f.getvalue())


def fmt_figure(x: Any, fmt: str = "{:.2f}", none: str = "–") -> str:
    """A figure for a table: `fmt` applied, or a dash for a missing one (None)."""
    return none if x is None else fmt.format(x)


def _controller_text(runs: str) -> str:
    """ggufspec.loop.RUNS as a phrase (results written before it was recorded ran the source)."""
    return "the controller compiled (mypyc)" if runs == "compiled" else f"the controller run from its {runs}"


def markdown(result: BenchResult) -> str:
    """The results as Markdown: headline, one row per configuration, peers, machine."""
    s, plan, m = result.summary, result.plan, result.machine
    lines = [
        f"# ggufspec bench: {plan.target_label} target",
        "",
        f"Target `{plan.target}`; drafts: {', '.join(f'`{d.label}`' for d in plan.drafts)}. "
        f"{len(plan.prompts)} prompts ({', '.join(sorted({p.category for p in plan.prompts}))}; prompt sets {_set_counts(s)}), "
        f"{plan.max_tokens} new tokens, {plan.repeats} repeat(s), "
        f"{'our configurations of each prompt in lockstep (peers after them)' if plan.lockstep else 'target alone and speculative alternated'}; "
        "medians per prompt over repeats, then over prompts.",
        "",
        f"**Machine**: {m['cpu']}, {m['physical_cores']} cores ({m['logical_cores']} logical), "
        f"{m['ram_bytes'] / 2**30:.0f} GiB RAM, {'GPUs: ' + ', '.join(g['name'] for g in m['gpus']) if m['gpus'] else 'no GPU'}; "
        f"{m['threads']} threads; llama-cpp-python {m['versions'].get('llama_cpp')}"
        f"{' (batch-invariant CPU kernels: one for every batch size)' if m.get('batch_invariant_kernels') else ''}, "
        f"Python {m['versions']['python']}; {_controller_text(m.get('controller', 'source'))}; "
        f"load average at start / end {_loadtext(m.get('load_start'))} / {_loadtext(m.get('load_end'))}.",
        "",
        f"**Offload**: {_offload_text(m.get('offload'))}.",
        "",
        "## Headline",
        "",
        f"- speedup of the default configuration (`{s['default_config']}`): **{fmt_figure(s['speedup'])}x** "
        f"(worst prompt {fmt_figure(s['speedup_min'])}x; chat prompts {fmt_figure(s['speedup_chat'])}x), "
        f"accept rate {fmt_figure(s['accept_rate'], '{:.1%}')}, expected by Theorem 3.8 {fmt_figure(s['expected_speedup'])}x"
        + _expected_detail(s),
        f"- end to end (prompt and generation seconds, where a draft model's prefill is paid): default "
        f"{fmt_figure(s.get('speedup_e2e'))}x",
        f"- target alone: {fmt_figure(s['target_alone_tps'], '{:.1f}')} tok/s; llama-bench: {fmt_figure(s['llama_bench_tps'], '{:.1f}')} tok/s "
        f"(ours / llama-bench = {fmt_figure(s['vs_llama_bench'], '{:.3f}')})",
        "- vs llama.cpp native `llama-speculative-simple` at each one's best K: "
        + (f"**{fmt_figure(s['vs_native'], '{:.2f}')}x** (ours {s['best_ours']['name']} {fmt_figure(s['best_ours']['tps'], '{:.1f}')} tok/s, "
           f"native {s['best_native']['name']} {fmt_figure(s['best_native']['tps'], '{:.1f}')} tok/s)" if s.get("vs_native") else "not measured (peer absent)"),
    ]
    share = s.get("default_draft_rounds_share")
    if share is not None and share < 0.5:
        lines.insert(-2, f"- the default configuration drafted in {share:.0%} of rounds: its controller measured that drafting "
                         "loses to the target alone here and ran the target alone (see `always-draft` for the forced loop)")
    if s.get("vs_native_drafting") and s["best_ours_drafting"]["name"] != s["best_ours"]["name"]:
        lines.append(f"- among configurations that draft in most rounds: **{fmt_figure(s['vs_native_drafting'], '{:.2f}')}x** native "
                     f"(ours {s['best_ours_drafting']['name']} {fmt_figure(s['best_ours_drafting']['tps'], '{:.1f}')} tok/s)")
    if s.get("best_speedup"):
        b = s["best_speedup"]
        lines.append(f"- best speedup of any greedy configuration: {b['name']} {fmt_figure(b['speedup'])}x")
    if s.get("sampling"):
        parts = [f"{rule}: speedup {fmt_figure(v['speedup'])}x, accept rate {fmt_figure(v['accept_rate'], '{:.1%}')}"
                 for rule, v in s["sampling"].items()]
        lines.append(f"- at temperature {plan.temperature:g}: " + "; ".join(parts))
    if s.get("transformers_assisted_speedup") is not None:
        lines.append(f"- transformers assisted generation (same GGUF files dequantized to float32 torch, CPU): "
                     f"{fmt_figure(s['transformers_assisted_speedup'])}x its own target alone, on {plan.slow_peer_prompts} prompts")
    if s.get("identical_greedy") is not None:
        lines.append(f"- greedy runs token-identical to the target alone: {s['identical_greedy']:.0%} (median over configurations)")
    lines += _set_sections(result)
    lines += ["", "## Configurations", "",
              "| configuration | engine | tok/s | speedup | worst | accept | alpha | K eff | c | expected (Thm 3.8) | expected, verify measured | rounds drafting | draft / verify / python ms/tok | identical |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|"]
    for c in s["configs"]:
        mpt = c.get("ms_per_token") or {}
        split = " / ".join(fmt_figure(mpt.get(k), "{:.1f}") for k in ("draft", "verify", "python")) if mpt else "–"
        lines.append(
            f"| {c['name']} | {c['engine']} | {fmt_figure(c.get('tps'), '{:.1f}')} | {fmt_figure(c.get('speedup'))} | "
            f"{fmt_figure(c.get('speedup_min'))} | {fmt_figure(c.get('accept_rate'), '{:.1%}')} | {fmt_figure(c.get('alpha'), '{:.3f}')} | "
            f"{fmt_figure(c.get('k_eff'), '{:.1f}')} | {fmt_figure(c.get('c'), '{:.2f}')} | {fmt_figure(c.get('expected_speedup'))} | "
            f"{fmt_figure(c.get('expected_speedup_measured_verify'))} | {fmt_figure(c.get('draft_rounds_share'), '{:.0%}')} | {split} | "
            f"{fmt_figure(c.get('identical'), '{:.0%}')} |"
        )
    micro = result.micro
    if micro:
        lines += ["", "## Cost model (timed back to back)", "",
                  f"- one target step: {micro['target_step_s'] * 1e3:.2f} ms; one draft step: "
                  + ", ".join(f"{k} {v * 1e3:.2f} ms (c = {micro['c'][k]:.2f})" for k, v in micro["draft_step_s"].items()),
                  "- verifying K drafts (one decode of K+1 rows), in plain target steps: "
                  + ", ".join(f"K={k}: {v:.2f}" for k, v in micro["verify_cost"].items()),
                  ]
    cats = result.summary.get("by_category") or {}
    if cats:
        several = len(result.summary.get("sets") or {}) > 1
        lines += ["", "## Speedup by prompt category" + (" (all prompts, both sets)" if several else ""), ""]
        lines += _category_table(result.summary)
    notes = list(result.peers.get("notes") or [])
    differ = sorted({r.prompt_id for r in result.runs if r.identical is False})
    if differ:
        longest = max(r.prompt_tokens + r.generated_tokens for r in result.runs if r.prompt_id in differ)
        notes.append(
            f"greedy speculative output differed from the target alone on {len(differ)} prompt(s) "
            f"({', '.join(differ)}; up to {longest} tokens of context). Known causes on the CPU: an f16 KV "
            "cache (llama.cpp's flash attention sums a one-row decode in per-thread KV chunks once it holds "
            "256+ tokens, a multi-row verify in one pass; the default q8_0 cache avoids it), and F32/F16/"
            "K-quant weights, whose matrix products differ by batch shape at any length."
        )
    if notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    lines += ["", f"Bench wall time {result.wall_s / 60:.1f} min; started {result.started}.", ""]
    return "\n".join(lines)


def _set_counts(summary: Mapping) -> str:
    """ "tuned 34, heldout 24": prompts per set."""
    return ", ".join(f"{name} {len(sub.get('prompts') or [])}" for name, sub in (summary.get("sets") or {}).items()) or "-"


def _category_table(summary: Mapping, *, end_to_end: bool = False) -> list[str]:
    """Speedup per greedy configuration: over all prompts of `summary`, then per category
    (`end_to_end`: over prompt and generation seconds)."""
    cats = summary.get("by_category_e2e" if end_to_end else "by_category") or {}
    names = sorted({c for row in cats.values() for c in row})
    overall = {c["name"]: c.get("speedup_e2e" if end_to_end else "speedup") for c in summary.get("configs") or []}
    lines = ["| configuration | all | " + " | ".join(names) + " |", "|---|---:|" + "---:|" * len(names)]
    for cfg, row in cats.items():
        lines.append(f"| {cfg} | {fmt_figure(overall.get(cfg))} | " + " | ".join(fmt_figure(row.get(n)) for n in names) + " |")
    return lines


def _set_sections(result: BenchResult) -> list[str]:
    """One section per prompt set: its headline and its speedup table per category."""
    lines: list[str] = []
    sets = result.summary.get("sets") or {}
    if len(sets) > 1:
        lines += ["", "The headline above is over all prompts of both sets; each set alone follows."]
    for name, s in sets.items():
        n = len(s.get("prompts") or [])
        lines += ["", f"## Prompt set `{name}`: {n} prompts, {SET_BLURBS.get(name, name)}", "",
                  f"- default configuration: **{fmt_figure(s.get('speedup'))}x** (worst prompt {fmt_figure(s.get('speedup_min'))}x; "
                  f"chat prompts {fmt_figure(s.get('speedup_chat'))}x), accept rate {fmt_figure(s.get('accept_rate'), '{:.1%}')}"]
        if s.get("best_speedup"):
            lines.append(f"- best greedy configuration: {s['best_speedup']['name']} {fmt_figure(s['best_speedup']['speedup'])}x")
        if s.get("identical_greedy") is not None:
            lines.append(f"- greedy runs token-identical to the target alone: {s['identical_greedy']:.0%}")
        vs = s.get("default_vs_best") or {}
        if any(v.get("ratio") is not None for v in vs.values()):
            lines.append("- default / best fixed or always-draft configuration (the target alone where none beats it; "
                         "in brackets the 90% bootstrap interval over repeats): "
                         + "; ".join(vs_cell(cat, v) for cat, v in vs.items() if v.get("ratio") is not None)
                         + f"; lowest **{fmt_figure(s.get('default_vs_best_min'))}**")
        for name, cells in (s.get("default_vs_drafters") or {}).items():
            if cells:
                lines.append(f"- default / {name} (its drafter alone, the same controller; in brackets the 90% interval, "
                             "then the geometric mean of the per-prompt ratios): "
                             + "; ".join(f"{cat} {fmt_figure(v['ratio'], '{:.3f}')}{_spread(v, '{:.3f}')}"
                                         + (f" ({fmt_figure(v['per_prompt'], '{:.3f}')})" if v.get("per_prompt") is not None else "")
                                         for cat, v in cells.items()))
        vs = s.get("default_vs_best_e2e") or {}
        if any(v.get("ratio") is not None for v in vs.values()):
            lines.append(f"- end to end (prompt and generation seconds; a draft model's prefill counts): default "
                         f"{fmt_figure(s.get('speedup_e2e'))}x; default / best: "
                         + "; ".join(vs_cell(cat, v) for cat, v in vs.items() if v.get("ratio") is not None)
                         + f"; lowest **{fmt_figure(s.get('default_vs_best_e2e_min'))}**")
        if s.get("by_category"):
            lines += ["", *_category_table(s)]
        if s.get("by_category_e2e"):
            lines += ["", "End to end (prompt and generation seconds):", "", *_category_table(s, end_to_end=True)]
    return lines


def vs_cell(cat: str, v: Mapping) -> str:
    """One category of default / best: "code 0.97 [0.93-1.01] (Q4_1 K=8)"."""
    return f"{cat} {fmt_figure(v['ratio'])}{_spread(v)} ({v['reference']})"


def _spread(v: Mapping, fmt: str = "{:.2f}") -> str:
    """A cell's bootstrap interval, " [low-high]", or nothing where it has none."""
    if v.get("ratio_low") is None or v.get("ratio_high") is None:
        return ""
    return f" [{fmt_figure(v['ratio_low'], fmt)}-{fmt_figure(v['ratio_high'], fmt)}]"


def _expected_detail(s: Mapping) -> str:
    """What the headline's Theorem 3.8 figure was priced with: the verify as measured, and where its
    costs came from (the microbenchmark, or the runs where it priced no such drafter)."""
    parts = []
    if s.get("expected_speedup_measured_verify") is not None:
        parts.append(f"{fmt_figure(s['expected_speedup_measured_verify'])}x with the verify as measured")
    if s.get("expected_costs_from") == "runs" and s.get("expected_speedup") is not None:
        parts.append("costs as they happened in the runs")
    return f" ({'; '.join(parts)})" if parts else ""


def lowest_vs_best(summary: Mapping) -> str | None:
    """The category where the default is furthest behind the best rival, as `vs_cell` writes it."""
    cells = [(v["ratio"], cat, v) for cat, v in (summary.get("default_vs_best") or {}).items() if v.get("ratio") is not None]
    if not cells:
        return None
    _, cat, v = min(cells, key=lambda c: c[0])
    return vs_cell(cat, v)


def _offload_text(offload: Mapping[str, Any] | None) -> str:
    """Where the target and the drafts ran, from `Ours.offload` (llama.cpp's -ngl: -1 = all)."""
    if not offload:
        return "not recorded"

    def where(n: int, of: int | None = None) -> str:
        if n < 0:
            return "every layer off the CPU"
        return "on the CPU" if n == 0 else f"{n}{f' of {of}' if of else ''} layers off the CPU"

    drafts = "; ".join(f"draft {label} {where(n)}" for label, n in (offload.get("draft_gpu_layers") or {}).items())
    return f"target {where(offload['target_gpu_layers'], offload.get('target_layers'))}" + (f"; {drafts}" if drafts else "")


def _loadtext(load: Mapping | None) -> str:
    if not load or "loadavg" not in load:
        return "?"
    text = f"{load['loadavg'][0]:.1f}"
    if "cpu_pressure_avg60" in load:
        text += f" (CPU pressure {load['cpu_pressure_avg60']:.0f}%)"
    return text


def write_markdown(result: BenchResult, path: Path) -> Path:
    """The report (`markdown`)."""
    return write_atomic(path, markdown(result))


def write_outputs(result: BenchResult, out: Path, *, plots: bool = True) -> dict[str, Path | list[Path]]:
    """The PNGs, then bench.json, runs.csv and bench.md into `out` (created). The plots come
    first so that a note about them ("plots skipped") reaches bench.md and bench.json."""
    out.mkdir(parents=True, exist_ok=True)
    files: dict[str, Any] = {}
    if plots:
        try:
            files["plots"] = write_plots(result, out)
        except ImportError:
            result.peers.setdefault("notes", []).append("plots skipped: pip install matplotlib")
            files["plots"] = []
    files["json"] = write_json(result, out / "bench.json")
    files["csv"] = write_csv(result, out / "runs.csv")
    files["markdown"] = write_markdown(result, out / "bench.md")
    return files
