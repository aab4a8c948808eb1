#!/usr/bin/env python3
"""A user's one-shot run, as it starts: each run a fresh `ggufspec run` process (a fresh pair and
draft controller), its one generation's tokens a second, K histogram and sources.

The fourth H200 run's first generation of the draft model under a fresh controller ran K = 1 in 59
of 65 rounds (157 tok/s, against 294 with K = 8 in the next one): rule probe_b
(docs/bench/controller.md). This measures what a user's single run gets, with and without
--always-draft, each run fresh (--no-remember), and remembering (--remember in a state folder of
its own: the first run fresh, each later one starting from what the runs before it learnt:
ggufspec.remember).

    python scripts/device/firstgen.py --pair smollm2-as-7b --runs 3 -n 128 --out firstgen.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from ggufspec.atomic import write_atomic


def one(pair: str, prompt: str, n: int, extra: list[str], env: dict[str, str]) -> dict:
    cmd = [sys.executable, "-m", "ggufspec.cli", "run", "--pair", pair, "--chat", "-p", prompt, "-n", str(n), "--json", *extra]
    out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout)
    stats = out["stats"]
    return {**{k: stats[k] for k in ("gen_tps", "k_hist", "drafter_rounds", "rounds", "generated_tokens")},
            "remembered_rounds": out["remembered_rounds"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pair", default="smollm2-as-7b")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("-p", "--prompt", default="Why is the sky blue?")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    result: dict = {"pair": args.pair, "prompt": args.prompt, "n": args.n, "arms": {}}
    state = tempfile.TemporaryDirectory(prefix="firstgen-state-")
    env = dict(os.environ, GGUFSPEC_STATE=state.name)
    for label, extra in (("default", ["--no-remember"]), ("always-draft", ["--always-draft", "--no-remember"]),
                         ("remembering", ["--remember"])):
        runs = [one(args.pair, args.prompt, args.n, extra, env) for _ in range(args.runs)]
        result["arms"][label] = runs
        for r in runs:
            print(f"{args.pair} {label}: {r['gen_tps']:.1f} tok/s, K {r['k_hist']}, {r['drafter_rounds']}, "
                  f"knew {r['remembered_rounds']} rounds")
        print(f"{args.pair} {label}: median {statistics.median(r['gen_tps'] for r in runs):.1f} tok/s over {len(runs)} runs")
    if args.out is not None:
        write_atomic(args.out, json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
