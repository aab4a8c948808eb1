"""Two checkouts of ggufspec, A/B in lockstep on the real default pair: the same prompts, each
generation of A run next to the same generation of B.

A refactor must not change what the loop does nor its speed, and on a shared host two processes
run minutes apart differ by 20-60% (the sequential form of this script, one process per pass, saw
the pass medians of one checkout move by 33% within an hour). So the checkouts run side by side: `--procs`
long-lived processes per checkout (its own `ggufspec`, the same interpreter), each loading the
default pair once (`load_pair()`) and warming it with one untimed generation; then, for each pass
and each prompt, every process generates that prompt once (greedy, 128 tokens, the library's
defaults otherwise: the controller, the embedded drafters), one at a time, in an order that
rotates each block (A first in one block, B first in the next; each process in every position).
A block's A and B runs share the host's slow or fast minute. A process keeps a few percent of its
own speed for its whole life (where its memory landed), so several processes a side average it
out; each process's own offset is printed. Processes load and warm one at a time (four warming at
once measured a host 3-17 times slower than the quiet one, and each controller started from that).

Printed: per prompt set, B / A as the geometric mean over blocks (pass x prompt x process pair) of
B's tok/s over A's in the block, with a 90% bootstrap interval over blocks, and whether every
greedy output was token-identical.

    .venv/bin/python scripts/code_ab.py A_DIR B_DIR [--passes 3] [--procs 2] [--per-set 6] [--max-tokens 128] [--out ab.json]

A_DIR / B_DIR: checkouts (e.g. `git worktree add /tmp/before <commit>`, any commit that has
`load_pair`); the prompts are this checkout's bench sets, tuned and held-out, the first
`--per-set` of each (one per category first).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics as st
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, sys
import ggufspec
from ggufspec import SamplingSettings, load_pair
greedy = SamplingSettings(temperature=0.0)
with load_pair() as pair:
    warm = json.loads(sys.stdin.readline())
    pair.generate(messages=warm["messages"], max_tokens=16, sampling=greedy).run()  # untimed
    print(json.dumps({"where": ggufspec.__file__}), flush=True)
    for line in sys.stdin:
        job = json.loads(line)
        gen = pair.generate(messages=job["messages"], max_tokens=job["max_tokens"], sampling=greedy).run()
        print(json.dumps({"tps": gen.stats.gen_tps, "tokens": list(gen.tokens), "rounds": gen.stats.rounds}),
              flush=True)
"""


class Worker:
    """One process of one checkout: a job in on stdin, its result out on stdout, one line each."""

    def __init__(self, side: str, index: int, checkout: Path, warm: dict) -> None:
        self.side, self.label, self.checkout = side, f"{side.upper()}{index}", checkout
        self.proc = subprocess.Popen([sys.executable, "-c", CHILD], cwd=checkout, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        self._send(warm)

    def _send(self, job: dict) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()

    def _read(self) -> dict:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            sys.exit(f"error: the process {self.label} in {self.checkout} stopped (its stderr is above)")
        return json.loads(line)

    def ready(self) -> None:
        where = Path(self._read()["where"]).resolve()
        if not where.is_relative_to(self.checkout.resolve()):
            sys.exit(f"error: {self.checkout} imported ggufspec from {where}; run from a checkout of its own")

    def run(self, job: dict) -> dict:
        self._send(job)
        return self._read()

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a", type=Path)
    ap.add_argument("b", type=Path)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--procs", type=int, default=2, help="processes a checkout")
    ap.add_argument("--per-set", type=int, default=6)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the prompts and the maths: this checkout's
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
    # interleaved A0 B0 A1 B1 ...: a rotation by one puts B first, by two the next pair first
    workers: list[Worker] = []
    runs: list[dict] = []  # one per generation: pass, prompt, worker, tok/s, tokens
    try:
        for i in range(args.procs):
            for side in "ab":  # one at a time: a process warming beside others measures a busy host
                workers.append(Worker(side, i, args.a if side == "a" else args.b, jobs[0]))
                workers[-1].ready()
        block = 0
        for p in range(args.passes):
            for job in jobs:
                n = len(workers)
                for w in (workers[(block + j) % n] for j in range(n)):
                    r = w.run(job)
                    runs.append({"pass": p, "id": job["id"], "worker": w.label, "side": w.side,
                                 "tps": r["tps"], "tokens": r["tokens"], "rounds": r["rounds"]})
                block += 1
            print(f"pass {p + 1}: A {st.median(r['tps'] for r in runs if r['pass'] == p and r['side'] == 'a'):.1f}"
                  f" B {st.median(r['tps'] for r in runs if r['pass'] == p and r['side'] == 'b'):.1f} tok/s (medians)",
                  flush=True)
    finally:
        for w in workers:
            w.close()
    first = {}
    for r in runs:
        first.setdefault(r["id"], r["tokens"])
    identical = all(r["tokens"] == first[r["id"]] for r in runs)
    by = {(r["pass"], r["id"], r["worker"]): r["tps"] for r in runs}
    ratios = {pid: [by[(p, pid, f"B{i}")] / by[(p, pid, f"A{i}")] for p in range(args.passes) for i in range(args.procs)]
              for pid in sets}
    rows = {}
    for name in ("tuned", "heldout", "all"):
        blocks = [x for pid in sets if name == "all" or sets[pid] == name for x in ratios[pid]]
        rows[name] = (*geomean_interval(blocks), len(blocks))
        print(f"{name:8s} B/A {rows[name][0]:.3f} [{rows[name][1]:.3f}-{rows[name][2]:.3f}] over {len(blocks)} blocks")
    # a process's own offset: its log tok/s less its (pass, prompt) block's mean, averaged
    mean = {(p, pid): st.fmean(math.log(by[(p, pid, w.label)]) for w in workers) for p in range(args.passes) for pid in sets}
    offsets = {w.label: math.expm1(st.fmean(math.log(by[(p, pid, w.label)]) - mean[(p, pid)]
                                            for p in range(args.passes) for pid in sets)) for w in workers}
    print("process offsets: " + ", ".join(f"{k} {v:+.1%}" for k, v in offsets.items()))
    print(f"greedy outputs identical across checkouts and passes: {identical}")
    if args.out:
        args.out.write_text(json.dumps({"runs": [{k: v for k, v in r.items() if k != "tokens"} for r in runs],
                                        "sets": sets, "rows": rows, "offsets": offsets, "identical": identical},
                                       indent=1))


if __name__ == "__main__":
    main()
