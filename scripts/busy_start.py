"""A busy start: several processes load and warm the default pair at once on this host, then take
turns generating on a quiet host. Does each controller find drafting again?

The controller measures what drafting costs only when it drafts. A process that warmed while the
others were loading measured the draft's first rounds at 2-50 times their quiet seconds (2 cores,
4 processes), judged the draft hopeless and ran the target alone: rule `expire`
(ggufspec.loop.costmodel) forgets those samples after `ControlSettings.expire` rounds. Printed: for
each process, each generation's tok/s and rounds (a round per token: the target alone).

    .venv/bin/python scripts/busy_start.py [--procs 4] [--gens 12] [--max-tokens 128] [--checkout DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, sys
from ggufspec import SamplingSettings, load_pair
from ggufspec.bench.prompts import load_prompts
greedy = SamplingSettings(temperature=0.0)
prompts = load_prompts(prompt_set="tuned")
max_tokens = int(sys.argv[1])
with load_pair() as pair:
    pair.generate(messages=prompts[0].messages, max_tokens=16, sampling=greedy).run()  # warm, beside the others
    print("ready", flush=True)
    for i, line in enumerate(sys.stdin):
        p = prompts[i % 2]
        gen = pair.generate(messages=p.messages, max_tokens=max_tokens, sampling=greedy).run()
        print(json.dumps({"tps": gen.stats.gen_tps, "rounds": gen.stats.rounds}), flush=True)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--gens", type=int, default=12, help="generations each process runs after the warm-up")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--checkout", type=Path, default=Path(__file__).resolve().parents[1])
    args = ap.parse_args()
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(args.max_tokens)], cwd=args.checkout,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for _ in range(args.procs)]
    rows: list[list[str]] = [[] for _ in procs]
    try:
        for p in procs:  # all load and warm at once
            if p.stdout is None or p.stdout.readline().strip() != "ready":
                sys.exit("error: a process failed to load the default pair (its stderr is above)")
        for _ in range(args.gens):
            for i, p in enumerate(procs):  # then one at a time
                assert p.stdin is not None and p.stdout is not None
                p.stdin.write("go\n")
                p.stdin.flush()
                r = json.loads(p.stdout.readline())
                rows[i].append(f"{r['tps']:.1f}/{r['rounds']}")
    finally:
        for p in procs:
            if p.stdin is not None:
                p.stdin.close()
            p.wait(timeout=60)
    print(f"tok/s / rounds of each generation ({args.max_tokens} tokens), in order:")
    for i, row in enumerate(rows):
        print(f"process {i}: " + " ".join(row))


if __name__ == "__main__":
    main()
