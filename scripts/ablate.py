"""Ablation of the controller's rules on the trace replay: the default with one rule off against it on.

For each cost regime and each rule, `scripts/trace_sim.py`'s replay runs the default policy and
the default with the rule off (`Policy.control`, `ControlSettings` overrides; the extension by
the policy's draft_extend 0), seed by seed with the same noise seed, so each prompt's runs are
paired. A cell is off / on per prompt: the geometric mean over prompts and seeds of the ratio of
the two speedups (each the geometric mean of the bench's two repeats), with its 90% interval by a
bootstrap over prompts and seeds. Verdict per rule: "loses" where off is worse beyond the
interval somewhere and better beyond it nowhere (the rule stays), "goes" where every interval
holds 1 or lies above it, "mixed" otherwise.

    PYTHONPATH=. .venv/bin/python scripts/ablate.py --json out.json
    PYTHONPATH=. .venv/bin/python scripts/ablate.py --table out.json   # the table again, no replay
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trace_sim import PROFILES, Costs, Policy, load_profile, replay  # noqa: E402

BENCH = Path("docs/bench/epyc-first/bench.json")
REGIMES = ("h200-135m", "rtx3090-8b", "epyc-micro", "epyc-loop", "epyc-q8_0", "epyc-q4_1")
OTHER_REGIMES = ("epyc-as-1b",)  # asked for by name: the 1B stand-in's stepped verify (rule `verify_probe`)
# on a CUDA graph (rule switch_cost on in the replay): asked for by name, not in the default table
GRAPH_REGIMES = ("h200-135m-graphs", "h200-135m-run4", "h200-135m-run5", "h200-as7b-graphs", "h200-as7b-slowstart")
RULES = {  # rule -> the default with it off
    "two-level rate": "default@two_level=0", "verify prior 1/4 (off: 1)": "default@verify_prior_weight=1",
    "first-call cost": "default@first_call=0", "winsor": "default@winsor=inf", "hysteresis": "default@hysteresis=0",
    "few-run retry 4n": "default@few_runs=0", "spacing": "default@spacing=1", "confirm": "default@confirm=0",
    "opening": "default@opening=0", "optimistic retry K": "default@optimistic_retry=0", "K probe": "default@k_probe=0",
    "free: prompt counts": "default@free_prompt=0", "grades": "default@grades=0", "check": "default@check_rounds=0",
    "extension": "default:8:0:0", "recheck a": "default@recheck=0", "hopeless": "default@hopeless=0",
    "hold": "default@hold=0", "hopeless budget (off: every 128 rounds)": "default@hopeless_share=1",
    "check pricing": "default@check_pricing=0", "continuation-priced K": "default@extend_k=0",
    "switch cost (graphs only)": "default@switch_cost=0",
    "probe b": "default@probe_b=0",
    "verify probe": "default@verify_probe=0",
    "calibrate on two rounds (off: one)": "default@calibrate=1",
    "prefill slope (inert here: the replay's prefill costs nothing)": "default@prefill_slope=0",
}


def costs_of(regime: str) -> Costs:
    if regime in PROFILES:
        return Costs.from_profile(load_profile(regime))
    costs = Costs(json.loads(BENCH.read_text())["micro"])
    if regime == "epyc-loop":
        with (BENCH.parent / "runs.csv").open(newline="") as f:
            costs = Costs.from_runs(list(csv.DictReader(f)), costs.draft)
    return costs


def run(traces: dict, rules: dict[str, str], regimes: tuple[str, ...], noise: float, seeds: int,
        cache: Path | None) -> dict:
    """regime -> policy text -> prompt id -> speedups (2 per seed); each replay kept in `cache` as it ends."""
    out: dict = json.loads(cache.read_text())["data"] if cache is not None and cache.is_file() else {}
    for text in ("default", *rules.values()):
        for regime in regimes:
            if text in out.get(regime, {}):
                continue
            sp = replay(traces, costs_of(regime), noise, seeds, (Policy.parse(text),))
            out.setdefault(regime, {})[text] = {pid: v for (_, pid), v in sp.items()}
            if cache is not None:
                cache.write_text(json.dumps({"noise": noise, "seeds": seeds, "data": out}))
            print(f"{regime} {text} done", file=sys.stderr, flush=True)
    return out


def cell(on: dict, off: dict, ids: list[str], seeds: int, rng: np.random.Generator) -> tuple[float, float, float]:
    """Geometric mean of off / on over prompts and seeds, and its bootstrap 90% interval."""
    def g(v: list[float], s: int) -> float:
        return math.log(v[2 * s]) + math.log(v[2 * s + 1])
    logs = np.array([[(g(off[i], s) - g(on[i], s)) / 2 for s in range(seeds)] for i in ids])
    boot = [logs[rng.integers(0, len(ids), len(ids))][:, rng.integers(0, seeds, seeds)].mean() for _ in range(2000)]
    lo, hi = np.percentile(boot, [5, 95])
    return math.exp(logs.mean()), math.exp(lo), math.exp(hi)


def table(data: dict, traces: dict, rules: dict[str, str], seeds: int) -> None:
    rng = np.random.default_rng(0)
    sets = {s: [i for i, t in traces.items() if t["set"] == s] for s in ("tuned", "heldout")}
    cols = [(r, s) for r in data for s in sets]
    print("| rule (off) | " + " | ".join(f"{r} {s}" for r, s in cols) + " | verdict |")
    print("|---|" + "---:|" * len(cols) + "---|")
    for rule, text in rules.items():
        cells = [cell(data[r]["default"], data[r][text], sets[s], seeds, rng) for r, s in cols]
        worse = any(hi < 1.0 for _, _, hi in cells)
        better = any(lo > 1.0 for _, lo, _ in cells)
        verdict = "mixed" if worse and better else "stays" if worse else "goes"
        print(f"| {rule} | " + " | ".join(f"{m:.3f} [{lo:.3f}-{hi:.3f}]" for m, lo, hi in cells) + f" | {verdict} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--traces", type=Path, default=Path("docs/bench/traces-default-pair.json"))
    ap.add_argument("--regimes", nargs="+", default=list(REGIMES), choices=REGIMES + GRAPH_REGIMES + OTHER_REGIMES)
    ap.add_argument("--rules", nargs="+", default=list(RULES), help="rule names (keys of RULES)")
    ap.add_argument("--noise", type=float, default=0.1)
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--json", type=Path, help="the raw speedups, written as each replay ends (a rerun resumes)")
    ap.add_argument("--table", type=Path, help="print the table of a --json file, no replay")
    args = ap.parse_args()
    traces = json.loads(args.traces.read_text())
    rules = {k: RULES[k] for k in args.rules}
    if args.table:
        saved = json.loads(args.table.read_text())
        done = {r: d for r, d in saved["data"].items() if "default" in d}
        table(done, traces, {k: v for k, v in rules.items() if all(v in d for d in done.values())}, saved["seeds"])
        return
    data = run(traces, rules, tuple(args.regimes), args.noise, args.seeds, args.json)
    table(data, traces, rules, args.seeds)


if __name__ == "__main__":
    main()
