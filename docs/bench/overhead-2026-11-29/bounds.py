"""How far can our Python a round fall without changing what the controller computes? Upper bounds
on scripts/overhead.py's fakes: each arm makes one part of the controller cost (almost) nothing by
answering from a stale copy, which changes its decisions, so only the seconds mean anything here.

    .venv/bin/python docs/bench/overhead-2026-11-29/bounds.py [PASSES]

Arms (alternated, PASSES times; each a fresh `measure` of default:pays and K4, 7 repeats of >= 1000
rounds):
    as is        the loop as it is
    costs        `round_costs` (T_d(K) for every K: a, the verify line, b, f) computed once per
                 (source, cap) and reused for good
    best K       `best_len` (the curve, the costs and the best K) reused for good, likewise
    controller   `choose` and `observe` run every 50th time (the last choice reused, the other
                 rounds unobserved): what the loop costs with (almost) no controller
Prints each arm's ms a round, median over passes [min-max], and its tokens a round.
"""

from __future__ import annotations

import os
import statistics as st
import sys
from pathlib import Path

root = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(root / "scripts"), str(root)]

os.environ["GGUFSPEC_PURE"] = "1"  # it replaces the controller's methods: the source, not the compiled one
import overhead  # noqa: E402
from ggufspec.loop import control, costmodel, throughput  # noqa: E402

ORIG = (costmodel.CostModel.round_costs, throughput.Rates.best_len, control.DraftController.choose,
        control.DraftController.observe)


def arm(name: str) -> None:
    """Patch the classes for arm `name` (from the originals: arms do not stack)."""
    rc, bl, choose, observe = ORIG
    costmodel.CostModel.round_costs, throughput.Rates.best_len = rc, bl
    control.DraftController.choose, control.DraftController.observe = choose, observe
    if name == "costs":
        store: dict = {}

        def stale_rc(self, name, cap):  # type: ignore[no-untyped-def]
            if (name, cap) not in store:
                store[(name, cap)] = rc(self, name, cap)
            return store[(name, cap)]

        costmodel.CostModel.round_costs = stale_rc  # type: ignore[method-assign]
    elif name == "best K":
        store2: dict = {}

        def stale_bl(self, name, *, lo, cap, optimistic=False):  # type: ignore[no-untyped-def]
            key = (name, lo, cap, optimistic)
            if key not in store2:
                store2[key] = bl(self, name, lo=lo, cap=cap, optimistic=optimistic)
            return store2[key]

        throughput.Rates.best_len = stale_bl  # type: ignore[method-assign]
    elif name == "controller":
        n = [0, 0]
        last: list = [None]

        def rare_choose(self, **kw):  # type: ignore[no-untyped-def]
            n[0] += 1
            if n[0] % 50 == 1 or last[0] is None:
                last[0] = choose(self, **kw)
            return last[0]

        def rare_observe(self, r):  # type: ignore[no-untyped-def]
            n[1] += 1
            if n[1] % 50 == 1:
                observe(self, r)

        control.DraftController.choose = rare_choose  # type: ignore[method-assign]
        control.DraftController.observe = rare_observe  # type: ignore[method-assign]


def main() -> None:
    passes = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    arms = ["as is", "costs", "best K", "controller"]
    ms: dict[str, list[float]] = {a: [] for a in arms}
    k4: dict[str, list[float]] = {a: [] for a in arms}
    tpr: dict[str, list[float]] = {a: [] for a in arms}
    real_now = overhead.clock.now
    try:
        for _ in range(passes):
            for a in arms:
                arm(a)
                res = overhead.measure(["default:pays", "K4"], repeats=7, rounds=1000, max_tokens=128, prompt_len=200)
                ms[a].append(st.median(res["default:pays"]["ms"]))
                k4[a].append(st.median(res["K4"]["ms"]))
                tpr[a].append(res["default:pays"]["tokens_per_round"])
    finally:
        arm("as is")
        overhead.clock.now = real_now
    print(f"Host: {overhead.host()}; {passes} passes, arms alternated.\n")
    print("| arm | default:pays ms a round | its tokens a round | K4 ms a round (the same passes) |")
    print("|---|---:|---:|---:|")
    for a in arms:
        print(f"| {a} | {st.median(ms[a]):.3f} [{min(ms[a]):.3f}-{max(ms[a]):.3f}] | {st.median(tpr[a]):.2f} "
              f"| {st.median(k4[a]):.3f} [{min(k4[a]):.3f}-{max(k4[a]):.3f}] |")


if __name__ == "__main__":
    main()
