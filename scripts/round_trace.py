"""Each round of the default controller on a regime's first prompts: who drafted, how much, what it cost.

One controller kept across the prompts and passes (as `bench` keeps one per configuration), 128
tokens, greedy, the regime's target and drafters (`bench --regimes`). A round prints as
    source[#grade]:K<chosen K>:<drafted>[R]e<extended>/<accepted>=<emitted> <ms>
(source `-`: the target alone; R: a retry or an opening; drafted counts the model's drafts and a
free drafter's continuation, `extended` of them). Settings: ControlSettings or
DraftLengthSettings fields as KEY=VAL (scripts/control_ab.py's parsing).

    .venv/bin/python scripts/round_trace.py --regime gemma --set tuned --prompts 4 --passes 2 [--rounds 12] [handover=0 ...]

`--losses`: where the default gains and loses against the target alone, on this machine: each
round's seconds (its catch-up included) minus its emitted tokens at the mean round of the target
alone in the same generation (none there: the run's), summed by the kind of round (the model, its
retries, each lookup grade), as `scripts/trace_sim.py --losses` does on the replay. The target
alone's own rounds net zero by construction, so the controller's Python in them is not separated
here (scripts/real_overhead_ab.py measures it); drafting rounds carry theirs.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from coldstart import add_regime_args, regime_from  # noqa: E402
from round_losses import ALONE, add, kind_of  # noqa: E402
from trace_sim import Watched  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_regime_args(ap, regime="default", prompt_set="tuned", prompts=4)
    ap.add_argument("--passes", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=12, help="rounds of each generation to print")
    ap.add_argument("--losses", action="store_true",
                    help="also split the default's time against the target alone's by the kind of round")
    args = ap.parse_args()

    settings, length, _, prompts, generate_one = regime_from(args)
    log: list[str] = []

    def traced(r):  # type: ignore[no-untyped-def]
        c = r.choice
        if c is not None:
            src = (c.drafter or "-")[:6] + (f"#{c.grade}" if c.grade else "")
            log.append(f"{src}:K{c.draft_len}:{r.drafted}{'R' if c.retry else ''}e{r.extended}"
                       f"/{r.accepted}={r.emitted} {r.round_s * 1e3:.0f}")
            rounds.append(r)

    ctl = Watched(settings=settings, on_round=traced)
    rounds: list = []
    generations: list[list] = []
    for n in range(args.passes):
        for p in prompts:
            log.clear()
            rounds = []
            t = time.perf_counter()
            g = generate_one(ctl, p, length)
            generations.append(rounds)
            print(f"{p.id} pass{n} {(time.perf_counter() - t) * 1e3:.0f} ms rounds={len(log)} {dict(g.stats.drafter_rounds)}")
            print("   " + " | ".join(log[:args.rounds]), flush=True)
    if args.losses:
        print_losses(generations)


def losses(generations: list[list]) -> tuple[dict[str, list[float]], float]:
    """(kind -> [rounds, lost s, gained s (<= 0)], the rounds' tokens at the target alone's seconds):
    the `--losses` split (module docstring); None-kind rounds (no choice) count as the target alone."""
    every = [r.round_s for g in generations for r in g if kind_of(r) == ALONE and r.emitted == 1]
    net: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0, 0.0])
    total = 0.0
    if not every:
        return {}, total
    for g in generations:
        alone = [r.round_s for r in g if kind_of(r) == ALONE and r.emitted == 1]
        a = statistics.fmean(alone or every)
        total += sum(r.emitted for r in g) * a  # the generation's rounds at the target alone's
        for r in g:
            add(net, r, a)
    return dict(net), total


def print_losses(generations: list[list]) -> None:
    """The `--losses` table (module docstring)."""
    net, total = losses(generations)
    if not total:
        print("\nno round of the target alone to price the others by")
        return
    print(f"\nEach round's seconds minus its tokens at the target alone's mean round of its generation "
          f"(the rounds' tokens at that: {total:.2f} s):\n")
    print("| round | rounds | lost, ms | gained, ms | net, % of the rounds' time at the target alone's |\n|---|---:|---:|---:|---:|")
    for kind, (n, plus, minus) in sorted(net.items(), key=lambda kv: -(kv[1][1] + kv[1][2])):
        print(f"| {kind} | {n} | {plus * 1e3:.1f} | {abs(minus) * 1e3:.1f} | {(plus + minus) / total * 100:+.2f} |")


if __name__ == "__main__":
    main()
