"""Several `ggufspec bench` runs pooled: is the default's shortfall in a category real, or the run's noise?

Issue 12 asks, in each run, for the default at 0.97x or more of the best fixed-length or
always-draft configuration in every prompt set and category. One run's cell is a median over
4-12 prompts of 2 repeats each, and on a shared 2-core host a run's tokens/s moves by 10-12%
(two runs of the same prompt on the same path, seconds apart). This script reads the `runs.csv`
of several runs (same prompts) and reports:

1. per run, for the default and for the run's three fastest rivals in turn, the cell test the
   issue applies to the default (ratio to the best of the others, or to 1.0 where none beats the
   target alone): a test that a configuration as good as the best passes only by luck says so here;
2. pooled over runs, per prompt set and category: the median and the geometric mean over
   (run, prompt) of the per-prompt ratio default / rival (each prompt's median over repeats);
3. the prompts on which the default trails each run's fastest rival in most runs.

    .venv/bin/python scripts/bench_pool.py docs/bench/xeon-rounds docs/bench/epyc-first ... [--out FILE]

Speedups are the bench's: a configuration's median tokens/s on a prompt over the target alone's.
"""

from __future__ import annotations

import argparse
import collections
import csv
import math
import statistics as st
import sys
from pathlib import Path

DEFAULT = "Q4_1+lookup K<=8"
TARGET = "target alone"


def load(run: Path) -> dict[tuple[str, str], list[float]]:
    """(configuration, prompt id) -> gen tok/s of each repeat: our greedy runs without an error."""
    tps: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
    with open(run / "runs.csv", newline="") as f:
        for r in csv.DictReader(f):
            if r["engine"] == "ggufspec" and float(r["temperature"]) == 0 and not r["error"]:
                tps[(r["config"], r["prompt_id"])].append(float(r["gen_tps"]))
    return tps


def cell_of(prompt_id: str, category: dict[str, str]) -> str:
    return f"{'held-out' if prompt_id.startswith('h-') else 'tuned'} {category[prompt_id]}"


def categories(run: Path) -> dict[str, str]:
    with open(run / "runs.csv", newline="") as f:
        return {r["prompt_id"]: r["category"] for r in csv.DictReader(f)}


def prompt_speedups(tps: dict[tuple[str, str], list[float]], config: str) -> dict[str, float]:
    """Prompt id -> the configuration's median tok/s over the target alone's."""
    return {p: st.median(v) / st.median(tps[(TARGET, p)]) for (c, p), v in tps.items()
            if c == config and tps.get((TARGET, p))}


def rivals_of(configs: set[str]) -> list[str]:
    """The bench's rivals of the default: fixed K and always-draft configurations."""
    return sorted(c for c in configs if " K=" in c or c.endswith("always-draft"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="bench output folders (each with runs.csv)")
    ap.add_argument("--default", default=DEFAULT, help=f"the default configuration's name (default {DEFAULT!r})")
    ap.add_argument("--out", type=Path, help="write the report here too (markdown)")
    args = ap.parse_args()
    missing = [str(r) for r in args.runs if not (r / "runs.csv").is_file()]
    if missing:
        sys.exit(f"error: no runs.csv in {', '.join(missing)}; give folders written by `ggufspec bench --out`")

    out: list[str] = [f"# {len(args.runs)} bench runs pooled", ""]
    pooled: dict[tuple[str, str], list[float]] = collections.defaultdict(list)  # (rival, cell) -> ratios
    by_prompt: dict[str, list[float]] = collections.defaultdict(list)  # prompt -> default / fastest rival
    out += ["## The issue's cell test, applied to each configuration in turn", "",
            "| run | configuration | worst cell (ratio to the best other) | cells below 0.97 |", "|---|---|---|---|"]
    for run in args.runs:
        tps, cat = load(run), categories(run)
        configs = {c for c, _ in tps}
        if args.default not in configs:
            sys.exit(f"error: {run} has no configuration {args.default!r}; pass --default NAME")
        rivals = rivals_of(configs)
        if not rivals:
            sys.exit(f"error: {run} has no fixed-K or always-draft configuration; run the bench with --sweep-k")
        speed = {c: prompt_speedups(tps, c) for c in [args.default, *rivals]}
        cells = sorted({cell_of(p, cat) for p in speed[args.default]})
        per_cell = {c: {cell: st.median(v for p, v in speed[c].items() if cell_of(p, cat) == cell) for cell in cells}
                    for c in speed}
        # the contenders: the default and the run's three fastest rivals (median over prompts)
        top = sorted(rivals, key=lambda r: -st.median(speed[r].values()))[:3]
        for c in [args.default, *top]:
            others = [r for r in rivals if r != c]
            ratios = {cell: per_cell[c][cell] / max(1.0, *(per_cell[o][cell] for o in others)) for cell in cells}
            worst = min(ratios, key=lambda k: ratios[k])
            below = [f"{k} {v:.2f}" for k, v in ratios.items() if v < 0.97]
            out.append(f"| {run.name} | {c} | {worst} {ratios[worst]:.3f} | {len(below)} of {len(cells)}"
                       f"{': ' + ', '.join(below) if below else ''} |")
        for r in rivals:
            for p, v in speed[args.default].items():
                if p in speed[r]:
                    pooled[(r, cell_of(p, cat))].append(v / speed[r][p])
        # against the run's fastest rival (one configuration: a maximum over rivals per prompt would
        # pick each prompt's luckiest repeat)
        for p, v in speed[args.default].items():
            if p in speed[top[0]]:
                by_prompt[p].append(v / speed[top[0]][p])

    cells = sorted({cell for _, cell in pooled})
    out += ["", "## Pooled: the default over each rival, per prompt (median over repeats), over runs and prompts", "",
            "median [geometric mean] of default / rival", "",
            "| rival | " + " | ".join(cells) + " |", "|---|" + "---:|" * len(cells)]
    for r in sorted({r for r, _ in pooled}):
        row = []
        for cell in cells:
            v = pooled.get((r, cell))
            row.append(f"{st.median(v):.3f} [{math.exp(st.mean(math.log(x) for x in v)):.3f}]" if v else "–")
        out.append(f"| {r} | " + " | ".join(row) + " |")
    trail = sorted((st.median(v), p, v) for p, v in by_prompt.items() if len(v) > 1 and st.median(v) < 0.95)
    out += ["", "## Prompts where the default trails the fastest rival of its run (median over runs < 0.95)", "",
            "| prompt | median | per run |", "|---|---:|---|"]
    out += [f"| {p} | {m:.3f} | {' '.join(f'{x:.2f}' for x in v)} |" for m, p, v in trail]
    text = "\n".join(out) + "\n"
    print(text, end="")
    if args.out:
        tmp = args.out.with_suffix(args.out.suffix + ".tmp")
        tmp.write_text(text)
        tmp.replace(args.out)


if __name__ == "__main__":
    main()
