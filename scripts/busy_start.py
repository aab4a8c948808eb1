"""A busy start: several processes load and warm the default pair at once on this host, then take
turns generating on a quiet host. Does each controller find drafting again?

The controller measures what drafting costs only when it drafts. A process that warmed while the
others were loading measured the draft's first rounds at 2-50 times their quiet seconds (2 cores,
4 processes), judged the draft hopeless and ran the target alone: rule `expire`
(ggufspec.loop.costmodel) forgets those samples after `ControlSettings.expire` rounds. The
processes are scripts/code_ab.py's workers, started all at once instead of one at a time. Printed:
for each process, each generation's tok/s and rounds (a round per token: the target alone).

    .venv/bin/python scripts/busy_start.py [--procs 4] [--gens 12] [--max-tokens 128] [--checkout DIR]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from code_ab import Worker  # (scripts/ is this script's directory)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--gens", type=int, default=12, help="generations each process runs after the warm-up")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--checkout", type=Path, default=Path(__file__).resolve().parents[1])
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from ggufspec.bench.prompts import load_prompts

    prompts = load_prompts(prompt_set="tuned")[:2]
    jobs = [{"id": p.id, "messages": [dict(m) for m in p.messages], "max_tokens": args.max_tokens} for p in prompts]
    workers: list[Worker] = []
    rows: list[list[str]] = [[] for _ in range(args.procs)]
    try:
        # all start at once: each warms (a 16-token generation) while the others load
        workers = [Worker("p", i, args.checkout, jobs[0]) for i in range(args.procs)]
        for w in workers:
            w.ready()
        for g in range(args.gens):
            for i, w in enumerate(workers):  # then one at a time
                r = w.run(jobs[g % len(jobs)])
                rows[i].append(f"{r['tps']:.1f}/{r['rounds']}")
    finally:
        for w in workers:
            w.close()
    print(f"tok/s / rounds of each generation ({args.max_tokens} tokens), in order:")
    for i, row in enumerate(rows):
        print(f"process {i}: " + " ".join(row))


if __name__ == "__main__":
    main()
