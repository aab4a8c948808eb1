"""A fresh controller's first prompts, replayed many times: how often a cold start goes bad.

`scripts/coldstart.py` runs fresh controllers on the real models, a few runs in a few minutes;
a start that goes bad 2 times in 10 (docs/bench/regimes-cpu-2026-11-29, smollm2-as-1b) needs
many more runs to tell a fix from luck. This replays the bench's order of `bench --regimes
--limit N --repeats 2` (each repeat: the first N prompts of the tuned set, then of the held-out
set) through the real loop on recorded traces (`scripts/trace_sim.py`: the fakes, the simulated
clock, a cost profile), one fresh `DraftController` a seed and policy, with per-round log-normal
noise drawn from the seed, and prints for each policy
- the cells as the bench computes them: the median speedup over a set's prompts and repeats,
  over the best of the fixed K and always-draft in the same seed (median and 10-90% over seeds);
- bad starts: seeds whose first generation ran the target alone in more than half its rounds,
  and the first generation's speedup (median, 10%);
- the share of seeds in which each cell holds (>= 0.97).

    .venv/bin/python scripts/coldstart_sim.py TRACES --profile epyc-as-1b --seeds 200 --noise 0.15 \\
        --policies default default@unsettled=0 K2 K4 K8 always

TRACES: `trace_sim.py record --first N` (for smollm2-as-1b: `--target embedded:smollm2:Q8_0
--own-cache`, the draft keeping its own cache as it does beside the stand-in). `--bench FILE`
instead of `--profile`: a bench.json's micro costs (the default pair's).

Measured (docs/bench/coldstart-replay-2026-11-29): on smollm2-as-1b, 4 prompts a set and 120 seeds
at noise 0.1, the default's tuned cell is 0.975 [0.883-1.040] of the best rival and holds in 63
of 120 simulated grids; half the seeds' first generations run the target alone in most rounds
(the real stand-in's first held-out prompt: 15 of 16 fresh controllers).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics as st
import sys
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trace_sim import Policy, alone_seconds, costs_for, simulate_prompt  # noqa: E402

from ggufspec.loop.control import DraftController  # noqa: E402

HOLDS = 0.97


def quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("traces", type=Path)
    ap.add_argument("--profile", help="a trace_sim cost profile (name or .json/.toml file)")
    ap.add_argument("--bench", type=Path, help="or a bench.json whose micro block prices the rounds (trace_sim's default)")
    ap.add_argument("--seeds", type=int, default=100)
    ap.add_argument("--noise", type=float, default=0.15, help="sd of a round's log-normal time noise")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--policies", nargs="+", default=["default", "K2", "K4", "K8", "always"])
    ap.add_argument("--prompts", type=int, default=0,
                    help="N prompts of each set a seed, starting at prompt (seed mod the set's size), wrapping: each "
                         "seed's cold start on another prompt (0: every recorded prompt, in order)")
    ap.add_argument("--json", type=Path, help="also write every generation's speedup here")
    args = ap.parse_args()
    if not args.traces.is_file():
        sys.exit(f"error: {args.traces} does not exist; record it with scripts/trace_sim.py record --first N")
    traces = json.loads(args.traces.read_text())
    if (args.profile is None) == (args.bench is None):
        sys.exit("error: give one of --profile NAME and --bench FILE")
    if args.bench is not None and not args.bench.is_file():
        sys.exit(f"error: {args.bench} does not exist")
    costs = costs_for(args.bench, profile=args.profile)
    policies = [Policy.parse(p) for p in args.policies]
    if policies[0].kind == "fixed":
        sys.exit("error: the first policy is the one judged; give a controlled one (default, model or always)")
    rivals = [p for p in policies if p.kind in ("fixed", "always")]
    sets = {s: [pid for pid, t in traces.items() if t["set"] == s] for s in ("tuned", "heldout")}

    def order_of(seed: int) -> list[str]:
        if not args.prompts:
            return sets["tuned"] + sets["heldout"]
        return [ids[(seed + i) % len(ids)] for ids in sets.values() if ids for i in range(args.prompts)]
    # speedups[policy][seed] = [(set, speedup, rounds of the target alone / rounds)] in the bench's order
    speedups: dict[Policy, list[list[tuple[str, float, float]]]] = {p: [] for p in policies}
    for seed in range(args.seeds):
        for policy in policies:
            rng = random.Random(seed * 7919 + zlib.crc32(policy.label.encode()) % 7919)
            ctl = (DraftController(settings=policy.settings(gpu=costs.uncaptured is not None))
                   if policy.kind != "fixed" else None)  # (as trace_sim's replay: switch_cost on a GPU's graph)
            slow = [costs.slow_rounds]
            gens = []
            for _ in range(args.repeats):
                for pid in order_of(seed):
                    t = traces[pid]
                    stats = simulate_prompt(t, policy, ctl, costs, rng, args.noise, slow=slow)
                    rounds = sum(stats.drafter_rounds.values()) or 1
                    gens.append((t["set"], alone_seconds(t, costs) / stats.gen_s, stats.drafter_rounds.get("none", 0) / rounds))
            speedups[policy].append(gens)

    def cell(gens: list[tuple[str, float, float]], s: str) -> float:
        return st.median(x for k, x, _ in gens if k == s)

    first = policies[0]
    order = order_of(0)
    print(f"profile {costs.source}, noise {args.noise}, {args.seeds} seeds, {args.repeats} repeats of "
          f"{len(order)} prompts ({', '.join(order)}" + (", each seed starting one prompt later" if args.prompts else "")
          + ")\n")
    print("| policy | tuned | held-out | first generation: median [10%] | bad starts |")
    print("|---|---:|---:|---:|---:|")
    for p in policies:
        runs = speedups[p]
        firsts = [g[0][1] for g in runs]
        bad = sum(g[0][2] > 0.5 for g in runs)
        print(f"| {p.label} | {st.median(cell(g, 'tuned') for g in runs):.3f} | "
              f"{st.median(cell(g, 'heldout') for g in runs):.3f} | {st.median(firsts):.3f} [{quantile(firsts, 0.1):.3f}] | "
              f"{bad}/{len(runs)} |")
    if rivals:
        print(f"\n{first.label} over the best rival in the same seed (median [10%-90%] over seeds; share holding >= {HOLDS}):\n")
        print("| set | ratio | holds |\n|---|---:|---:|")
        for s in ("tuned", "heldout"):
            ratios = [cell(speedups[first][i], s) / max(1.0, *(cell(speedups[r][i], s) for r in rivals))
                      for i in range(args.seeds)]
            print(f"| {s} | {st.median(ratios):.3f} [{quantile(ratios, 0.1):.3f}-{quantile(ratios, 0.9):.3f}] | "
                  f"{sum(r >= HOLDS for r in ratios)}/{len(ratios)} |")
    if args.json:
        args.json.write_text(json.dumps({p.label: speedups[p] for p in policies}))


if __name__ == "__main__":
    main()
