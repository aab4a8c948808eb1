"""Each round of the default controller on a regime's first prompts: who drafted, how much, what it cost.

One controller kept across the prompts and passes (as `bench` keeps one per configuration), 128
tokens, greedy, the regime's target and drafters (`bench --regimes`). A round prints as
    source[#grade]:K<chosen K>:<drafted>[R]e<extended>/<accepted>=<emitted> <ms>
(source `-`: the target alone; R: a retry or an opening; drafted counts the model's drafts and a
free drafter's continuation, `extended` of them). Settings: ControlSettings or
DraftLengthSettings fields as KEY=VAL (scripts/control_ab.py's parsing).

    .venv/bin/python scripts/round_trace.py --regime gemma --set tuned --prompts 4 --passes 2 [--rounds 12] [handover=0 ...]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from coldstart import add_regime_args, regime_from  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_regime_args(ap, regime="default", prompt_set="tuned", prompts=4)
    ap.add_argument("--passes", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=12, help="rounds of each generation to print")
    args = ap.parse_args()
    from ggufspec.loop.control import DraftController

    settings, length, _, prompts, generate_one = regime_from(args)
    ctl = DraftController(settings=settings)
    log: list[str] = []
    observe = ctl.observe

    def traced(r):  # type: ignore[no-untyped-def]
        c = r.choice
        if c is not None:
            src = (c.drafter or "-")[:6] + (f"#{c.grade}" if c.grade else "")
            log.append(f"{src}:K{c.draft_len}:{r.drafted}{'R' if c.retry else ''}e{r.extended}"
                       f"/{r.accepted}={r.emitted} {r.round_s * 1e3:.0f}")
        observe(r)

    ctl.observe = traced  # type: ignore[method-assign]
    for n in range(args.passes):
        for p in prompts:
            log.clear()
            t = time.perf_counter()
            g = generate_one(ctl, p, length)
            print(f"{p.id} pass{n} {(time.perf_counter() - t) * 1e3:.0f} ms rounds={len(log)} {dict(g.stats.drafter_rounds)}")
            print("   " + " | ".join(log[:args.rounds]), flush=True)


if __name__ == "__main__":
    main()
