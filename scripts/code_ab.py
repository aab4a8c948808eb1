"""Two checkouts of ggufspec, A/B on the real default pair: the same prompts, alternated A B B A.

A refactor must not change what the loop does nor its speed. Each pass runs one process per
checkout (its own `ggufspec`, the same interpreter), in the order A B, then B A, and so on; each
process loads the default pair (`load_pair()`), warms it with one untimed generation, then
generates every prompt greedily (128 tokens, the library's defaults otherwise: the controller, the
embedded drafters) and reports each generation's tokens/s and tokens. Printed: per prompt set, B / A
as the geometric mean over prompts of the per-prompt ratio of medians over passes, with a 90%
bootstrap interval over prompts, and whether every greedy output was token-identical.

    .venv/bin/python scripts/code_ab.py A_DIR B_DIR [--passes 4] [--per-set 6] [--max-tokens 128] [--out ab.json]

A_DIR / B_DIR: checkouts (e.g. `git worktree add /tmp/before <commit>`); the prompts are the
bench's tuned and held-out sets, the first `--per-set` of each (one per category first).
"""

from __future__ import annotations

import argparse
import json
import statistics as st
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, sys, time
import ggufspec
from ggufspec import SamplingSettings, load_pair
jobs = json.load(sys.stdin)
out = []
with load_pair() as pair:
    greedy = SamplingSettings(temperature=0.0)
    pair.generate(messages=jobs[0]["messages"], max_tokens=16, sampling=greedy).run()  # warm, untimed
    for job in jobs:
        gen = pair.generate(messages=job["messages"], max_tokens=job["max_tokens"], sampling=greedy).run()
        out.append({"id": job["id"], "tps": gen.stats.gen_tps, "tokens": list(gen.tokens), "rounds": gen.stats.rounds})
print(json.dumps({"where": ggufspec.__file__, "runs": out}))
"""


def run_side(checkout: Path, jobs: list[dict]) -> dict:
    proc = subprocess.run([sys.executable, "-c", CHILD], cwd=checkout, input=json.dumps(jobs), capture_output=True,
                          text=True, env=None)
    if proc.returncode != 0:
        sys.exit(f"error: the run in {checkout} failed:\n{proc.stderr[-2000:]}")
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    if not Path(res["where"]).resolve().is_relative_to(checkout.resolve()):
        sys.exit(f"error: {checkout} imported ggufspec from {res['where']}; run from a checkout of its own")
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a", type=Path)
    ap.add_argument("b", type=Path)
    ap.add_argument("--passes", type=int, default=4)
    ap.add_argument("--per-set", type=int, default=6)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    sys.path.insert(0, str(args.b))
    from ggufspec.bench.prompts import load_prompts
    from ggufspec.bench.spread import geomean_interval

    jobs, sets = [], {}
    for name in ("tuned", "heldout"):
        prompts = load_prompts(prompt_set=name)
        firsts = {p.category: p for p in reversed(prompts)}  # one per category first
        order = [p for p in prompts if firsts.get(p.category) is p] + [p for p in prompts if firsts.get(p.category) is not p]
        for p in order[: args.per_set]:
            jobs.append({"id": p.id, "messages": [dict(m) for m in p.messages], "max_tokens": args.max_tokens})
            sets[p.id] = name
    tps: dict[str, dict[str, list[float]]] = {"a": {}, "b": {}}
    tokens: dict[str, dict[str, list]] = {"a": {}, "b": {}}
    for i in range(args.passes):
        for side in ("ab" if i % 2 == 0 else "ba"):
            res = run_side(args.a if side == "a" else args.b, jobs)
            for r in res["runs"]:
                tps[side].setdefault(r["id"], []).append(r["tps"])
                tokens[side].setdefault(r["id"], []).append(r["tokens"])
            print(f"pass {i + 1} {side.upper()}: median {st.median(r['tps'] for r in res['runs']):.1f} tok/s", flush=True)
    identical = all(t == tokens["a"][pid][0] for pid in tokens["a"] for side in "ab" for t in tokens[side][pid])
    rows = {}
    for name in ("tuned", "heldout", "all"):
        pids = [p for p in sets if name == "all" or sets[p] == name]
        ratios = [st.median(tps["b"][p]) / st.median(tps["a"][p]) for p in pids]
        rows[name] = (*geomean_interval(ratios), len(pids))
        print(f"{name:8s} B/A {rows[name][0]:.3f} [{rows[name][1]:.3f}-{rows[name][2]:.3f}] over {len(pids)} prompts")
    print(f"greedy outputs identical across checkouts and passes: {identical}")
    if args.out:
        args.out.write_text(json.dumps({"tps": tps, "sets": sets, "rows": rows, "identical": identical}, indent=1))


if __name__ == "__main__":
    main()
