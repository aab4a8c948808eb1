"""How much of a run-to-run difference is the machine's: an A/A test, one after the other and in lockstep.

The target alone generates the same prompt twice, on two contexts of one loaded model (the pair's
and a `SpeculativePair.fork`), so both runs do the same work and their time ratio would be 1.0 on a
quiet machine. Each prompt is run in two modes, their order alternated per prompt:

- sequential: one generation, then the other (as `ggufspec bench --sequential` runs configurations);
- lockstep: both at once, a token at a time (ggufspec.bench.lockstep, as `ggufspec bench` runs them),
  each charged only the time inside its own steps.

It prints, per mode, the sd of log(T_A / T_B) over the prompts and the median seconds per
generation (the modes must run at the same speed for lockstep to be a fair way to measure).

    .venv/bin/python scripts/lockstep_aa.py --prompts 24 --out aa.json [--target embedded:smollm2:Q4_1]

Greedy, 128 new tokens, the built-in prompts (tuned set, then held-out) in order.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics as st
import time

from ggufspec import ContextSettings, PairSettings, SamplingSettings, load_pair
from ggufspec.bench.lockstep import interleave
from ggufspec.bench.prompts import load_prompts
from ggufspec.loop.engine import generate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=24, help="prompts to run (each in both modes; default 24)")
    ap.add_argument("-n", "--max-tokens", type=int, default=128)
    ap.add_argument("--out", default=None, help="write every pair's seconds here (JSON)")
    ap.add_argument("--target", default=None, help="the target model (default: the embedded default pair's)")
    args = ap.parse_args()
    prompts = load_prompts(prompt_set="tuned") + load_prompts(prompt_set="heldout")
    rows: list[dict] = []
    with load_pair(target=args.target, settings=PairSettings(context=ContextSettings(n_ctx=2048)), draft="none") as pair:
        a = pair.target_ctx
        b, _ = pair.fork(())  # a second target context on the same weights
        for i in range(args.prompts):
            p = prompts[i % len(prompts)]
            tokens = pair.encode(messages=list(p.messages))
            for mode in ("sequential", "lockstep") if i % 2 == 0 else ("lockstep", "sequential"):
                gens = [generate(target=ctx, prompt=tokens, max_tokens=args.max_tokens,
                                 sampling=SamplingSettings(temperature=0.0), cache_prompt=False) for ctx in (a, b)]
                if mode == "lockstep":
                    busy = interleave(gens)
                else:  # one after the other, A first on even prompts
                    busy = [0.0, 0.0]
                    for j in ((0, 1) if i % 2 == 0 else (1, 0)):
                        t = time.perf_counter()
                        gens[j].run()
                        busy[j] = time.perf_counter() - t
                gen_s = [x - g.stats.prompt_s for x, g in zip(busy, gens)]
                rows.append({"prompt": p.id, "mode": mode, "gen_s": gen_s, "same": gens[0].tokens == gens[1].tokens})
            if args.out:
                with open(args.out, "w") as f:
                    json.dump(rows, f, indent=1)
    for mode in ("sequential", "lockstep"):
        mine = [r for r in rows if r["mode"] == mode]
        logs = [math.log(r["gen_s"][0] / r["gen_s"][1]) for r in mine]
        sd = st.stdev(logs) if len(logs) > 1 else float("nan")
        print(f"{mode:10s}: {len(mine)} pairs, sd of log(T_A/T_B) {sd:.4f}, mean {st.mean(logs):+.4f}, "
              f"median {st.median(s for r in mine for s in r['gen_s']):.3f} s a generation, "
              f"same tokens {all(r['same'] for r in mine)}")


if __name__ == "__main__":
    main()
