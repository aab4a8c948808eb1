#!/usr/bin/env python3
"""Greedy exactness on the device at hand: how many generations differ from the target alone.

For each of N prompts (alternately from the tuned and the held-out set), the target alone's greedy
tokens are the reference; then each configuration (the default controller, and the draft model at a
fixed K) generates the same prompt, and the first token where it leaves the reference is recorded.
Times are the generation's tokens a second (prefill apart), so the cost of a kernel change shows
beside its effect. One process per kernel setting: the CUDA patch of scripts/device/row_invariant.py
reads GGUFSPEC_CUDA_ROW_INVARIANT once, so run this once without it and once with it.

    python scripts/device/exactness.py --target embedded:smollm2:Q8_0 --prompts 6 -n 192 --out stock.json
    GGUFSPEC_CUDA_ROW_INVARIANT=1 GGML_CUDA_DISABLE_FUSION=1 python scripts/device/exactness.py ... --out exact.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from ggufspec import ModelDrafter, SamplingSettings, SpeculativeSettings, load_pair
from ggufspec.atomic import write_atomic
from ggufspec.bench.prompts import load_prompts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="embedded:smollm2:Q8_0")
    ap.add_argument("--draft", nargs="+", default=["embedded:smollm2:Q4_1", "lookup"])
    ap.add_argument("--prompts", type=int, default=6, help="prompts, alternately from the tuned and held-out sets")
    ap.add_argument("-n", "--tokens", type=int, default=192)
    ap.add_argument("--fixed", type=int, nargs="*", default=[2, 4, 8], help="fixed K of the draft model")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()

    tuned, heldout = load_prompts(prompt_set="tuned"), load_prompts(prompt_set="heldout")
    prompts = [(tuned if i % 2 == 0 else heldout)[i // 2] for i in range(args.prompts)]
    greedy = SamplingSettings(temperature=0.0)
    spec = SpeculativeSettings()
    kernels = {k: os.environ.get(k, "") for k in ("GGUFSPEC_CUDA_ROW_INVARIANT", "GGML_CUDA_DISABLE_FUSION",
                                                    "GGML_CUDA_DISABLE_GRAPHS")}
    rows: dict[str, list[dict]] = {}
    t_start = time.time()
    with load_pair(target=args.target, draft=args.draft) as pair:
        model = tuple(d for d in pair.drafters if isinstance(d, ModelDrafter))[:1]
        configs = {"default": (pair.drafters, spec)}
        configs.update({f"K={k}": (model, spec.with_length(draft_max=k, fixed=True)) for k in args.fixed})

        def gen(tokens: list[int], drafters, sp, n: int):
            g = pair.generate(prompt_tokens=tokens, max_tokens=n, sampling=greedy, speculative=sp,
                              cache_prompt=False, drafters=drafters)
            return g.run()

        warm = pair.encode(messages=list(prompts[0].messages))
        gen(warm, (), spec, 16)
        gen(warm, model, spec.with_length(draft_max=4, fixed=True), 16)
        for p in prompts:
            tokens = pair.encode(messages=list(p.messages))
            ref = gen(tokens, (), spec, args.tokens)
            rows.setdefault("target alone", []).append({"prompt": p.id, "prompt_tokens": len(tokens),
                                                        "tps": ref.stats.gen_tps, "first_diff": None})
            for name, (drafters, sp) in configs.items():
                g = gen(tokens, drafters, sp, args.tokens)
                a, b = list(ref.tokens), list(g.tokens)
                first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
                if first is None and len(a) != len(b):
                    first = min(len(a), len(b))
                s = g.stats  # where the time went: draft, verify, our Python (seconds), and the rounds
                rows.setdefault(name, []).append({"prompt": p.id, "tps": s.gen_tps, "first_diff": first,
                                                  "accept_rate": s.accept_rate, "rounds": s.rounds,
                                                  "drafter_rounds": dict(s.drafter_rounds),
                                                  "draft_s": s.draft_s, "verify_s": s.verify_s, "python_s": s.overhead_s})
            print(f"{p.id}: " + ", ".join(f"{k} {v[-1]['first_diff']}" for k, v in rows.items() if k != "target alone"),
                  flush=True)
    summary = {}
    alone = statistics.median(r["tps"] for r in rows["target alone"])
    for name, rs in rows.items():
        diffs = [r["first_diff"] for r in rs if r["first_diff"] is not None]
        tps = statistics.median(r["tps"] for r in rs)
        summary[name] = {"generations": len(rs), "differ": len(diffs), "first_diff": diffs,
                         "tps": round(tps, 1), "vs_alone": round(tps / alone, 3)}
        print(f"{name:14s} differ {len(diffs)} of {len(rs)} (first at {diffs})  {tps:7.1f} tok/s  {tps / alone:.3f}x")
    out = {"target": args.target, "draft": args.draft, "tokens": args.tokens, "kernels": kernels,
           "seconds": round(time.time() - t_start, 1), "summary": summary, "rows": rows}
    write_atomic(args.out, json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
