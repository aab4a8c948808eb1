"""The default controller against fixed K and the target alone, in the bench's prompt order.

`ggufspec bench` keeps one controller per configuration across its prompts and repeats, so its
repeats share one path of the controller's estimates: their spread says how far the same path
moves, not how far another path would land. This script runs the default (model + lookup, one
controller kept across prompts), fixed K with the model draft and the target alone side by side
on each prompt, the order of the three rotated per prompt and pass, and reports per category
the median speedup of each and the paired default / fixed-K ratio (per prompt and pass, median
with a 90% bootstrap interval).

    .venv/bin/python scripts/controller_path.py --category code --category summarise --passes 3

Greedy, 128 new tokens, the bench's built-in prompts (both sets, in the bench's order).
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import statistics as st

from ggufspec import (
    ContextSettings,
    DraftLengthSettings,
    PairSettings,
    SamplingSettings,
    SpeculativeSettings,
    load_pair,
)
from ggufspec.bench.prompts import load_prompts
from ggufspec.loop.control import DraftController


def _interval(xs: list[float]) -> str:
    boot = sorted(st.median(random.Random(s).choices(xs, k=len(xs))) for s in range(2000))
    return f"{st.median(xs):.3f} [{boot[100]:.3f}-{boot[1900]:.3f}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--category", action="append", required=True)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--k", type=int, default=8, help="the fixed K compared (default 8)")
    ap.add_argument("--json", default=None, help="write every run's tokens/s here")
    args = ap.parse_args()
    sets = {s: [p for p in load_prompts(prompt_set=s) if p.category in args.category] for s in ("tuned", "heldout")}
    prompts = sets["tuned"] + sets["heldout"]
    ctl = DraftController()
    arms = ["alone", "default", f"K={args.k}"]
    tps: dict[str, list[float]] = collections.defaultdict(list)
    with load_pair(settings=PairSettings(context=ContextSettings(n_ctx=2048))) as pair:
        model = [d for d in pair.drafters if d.name != "lookup"]
        for r in range(args.passes):
            for i, p in enumerate(prompts):
                shift = (i + r) % len(arms)
                for arm in arms[shift:] + arms[:shift]:
                    if arm == "alone":
                        kw: dict = dict(drafters=())
                    elif arm == "default":
                        kw = dict(drafters=pair.drafters, controller=ctl)
                    else:
                        kw = dict(drafters=model, speculative=SpeculativeSettings(
                            length=DraftLengthSettings(draft_max=args.k, fixed=True)))
                    gen = pair.generate(messages=list(p.messages), max_tokens=128, cache_prompt=False,
                                        sampling=SamplingSettings(temperature=0.0), **kw)
                    for _ in gen:
                        pass
                    tps[f"{arm}|{p.id}"].append(gen.stats.gen_tps)
            print(f"pass {r + 1}/{args.passes} done", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(tps, f, indent=1)
    for s, members in sets.items():
        for cat in args.category:
            ids = [p.id for p in members if p.category == cat]
            speed = {a: st.median(st.median(tps[f"{a}|{i}"]) / st.median(tps[f"alone|{i}"]) for i in ids)
                     for a in arms[1:]}
            paired = [d / f for i in ids for d, f in zip(tps[f"default|{i}"], tps[f"{arms[2]}|{i}"])]
            print(f"{s} {cat}: " + ", ".join(f"{a} {v:.2f}x" for a, v in speed.items())
                  + f"; default / {arms[2]} paired {_interval(paired)}")


if __name__ == "__main__":
    main()
