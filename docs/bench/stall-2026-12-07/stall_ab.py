"""A stall of our Python in a fresh controller's first round, on the real pair: rule `recheck` on
against off, and the same without a stall.

The stall is injected where a GC pass lands: in the round's Python, outside llama.cpp's decode
(here in lookup's first proposal of a generation, which runs every round beside the target).
Arms, each generation with a fresh controller (every generation is a controller's first), rotated
per prompt and pass: the target alone; the default drafters with the rule on / off, each without
and with a STALL-second pause in round 0. Reports per arm the median speedup over the target alone
[least-most over prompts x passes] and the drafted rounds per generation.

    .venv/bin/python docs/bench/stall-2026-12-07/stall_ab.py OUT.json [--target embedded:smollm2:Q8_0]
        [--passes 3] [--stall 0.02] [--limit 4]
"""
from __future__ import annotations

import argparse
import json
import statistics as st
import time

from ggufspec import ControlSettings, DraftController, load_pair
from ggufspec.bench.ours import prompt_tokens
from ggufspec.bench.prompts import load_prompts
from ggufspec.loop.lookup import LookupDrafter


class StalledLookup(LookupDrafter):
    """Prompt lookup whose first proposal of a generation pauses `stall` seconds (a GC pass)."""

    def __init__(self, stall: float) -> None:
        super().__init__()
        self.stall, self._due = stall, False

    def prefill(self, prompt):  # a generation starts
        self._due = True
        return super().prefill(prompt)

    def propose(self, *args, **kwargs):
        if self._due:
            self._due = False
            time.sleep(self.stall)
        return super().propose(*args, **kwargs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--target", default="embedded:smollm2:Q8_0")
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--stall", type=float, default=0.02)
    ap.add_argument("--limit", type=int, default=4)
    args = ap.parse_args()
    pair = load_pair(target=args.target, draft=["embedded:smollm2:Q4_1", "lookup"])
    model = pair.drafters[0]
    arms = {"alone": None}
    for stall in (0.0, args.stall):
        for recheck in (True, False):
            arms[f"{'on' if recheck else 'off'}@{stall * 1e3:g}ms"] = (stall, recheck)
    prompts = [p for s in ("tuned", "heldout") for p in load_prompts(prompt_set=s)[: args.limit]]
    toks = {p.id: prompt_tokens(pair, p) for p in prompts}
    res: dict[str, list] = {a: [] for a in arms}
    names = list(arms)
    pair.generate(prompt_tokens=toks[prompts[0].id], drafters=(), max_tokens=16).run()  # warm
    for r in range(args.passes):
        for j, p in enumerate(prompts):
            rot = (r * len(prompts) + j) % len(names)
            for a in names[rot:] + names[:rot]:
                if arms[a] is None:
                    g = pair.generate(prompt_tokens=toks[p.id], drafters=(), max_tokens=128).run()
                else:
                    stall, recheck = arms[a]
                    ctl = DraftController(settings=ControlSettings(recheck=recheck))
                    g = pair.generate(prompt_tokens=toks[p.id], drafters=[model, StalledLookup(stall)],
                                      max_tokens=128, controller=ctl).run()
                s = g.stats
                res[a].append({"pid": p.id, "pass": r, "gen_tps": s.gen_tps, "tokens": s.generated_tokens,
                               "rounds": s.rounds, "drafter_rounds": dict(s.drafter_rounds)})
        print(f"pass {r + 1}/{args.passes} {time.strftime('%H:%M:%S')}", flush=True)
        json.dump({"target": args.target, "stall_s": args.stall, "res": res}, open(args.out, "w"), indent=1)
    report(res)


def report(res: dict) -> None:
    alone = {(x["pid"], x["pass"]): x["gen_tps"] for x in res["alone"]}
    for a, xs in res.items():
        if a == "alone":
            continue
        sp = [x["gen_tps"] / alone[(x["pid"], x["pass"])] for x in xs]
        drafted = [x["rounds"] - x["drafter_rounds"].get("none", 0) for x in xs]
        print(f"{a:12s} speedup {st.median(sp):.3f} [{min(sp):.3f}-{max(sp):.3f}]  drafted rounds a generation: "
              f"median {st.median(drafted):g}, most {max(drafted)} (n={len(xs)})")


if __name__ == "__main__":
    main()
