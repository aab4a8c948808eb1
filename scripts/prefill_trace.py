"""Which draft-model decodes a regime's generations run, prompt by prompt: the prefill (a whole
prompt, no logits: prompt time) or a whole-prompt catch-up in the first drafting round
(generation time), under one controller kept across the prompts and passes as `bench` keeps one.

    .venv/bin/python scripts/prefill_trace.py --regime as-1b --set tuned --prompts 4 --passes 3 [prefill_rivals=0 ...]

Prints per generation: its seconds (draft, verify, all), the draft's decode calls by rows (1-3
rows: drafting; more: a prefill or a catch-up, with its seconds) and the rounds per source.
Measured on smollm2-as-1b, 4 tuned prompts x 3 passes (docs/bench/regimes-cpu-2026-11-28): with
`prefill_rivals=0` 5 of 12 generations caught up on the whole prompt (50 rows, 0.16-0.21 s) in
their first round, chat-03 and chat-04 after prompts that ended in lookup's matches; 0 of 12 with it.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from coldstart import add_regime_args, regime_from  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_regime_args(ap, regime="as-1b", prompt_set="tuned", prompts=4)
    ap.add_argument("--passes", type=int, default=3)
    args = ap.parse_args()
    from ggufspec.loop.control import DraftController

    settings, length, regime, prompts, generate_one = regime_from(args)
    ctl = DraftController(settings=settings)
    calls: list[tuple[int, str, float]] = []
    patched: set[int] = set()
    for n in range(args.passes):
        for p in prompts:
            calls.clear()
            g = generate_one(ctl, p, length, on_drafters=lambda ds: _watch(ds, calls, patched))
            s = g.stats
            shapes = Counter(rows if rows <= 3 else "more" for rows, _, _ in calls)
            big = [f"{rows} rows {logits} {dt:.3f} s" for rows, logits, dt in calls if rows > 3]
            print(f"{n} {p.id} draft {s.draft_s:.3f} verify {s.verify_s:.3f} gen {s.gen_s:.3f} s; calls {dict(shapes)}; "
                  f"{'; '.join(big) or '-'}; {dict(s.drafter_rounds)}", flush=True)


def _watch(drafters, calls: list, patched: set) -> None:  # type: ignore[no-untyped-def]
    """Time every decode of the draft models' contexts into `calls` (once per context)."""
    for d in drafters:
        if d.free or id(d.ctx) in patched:
            continue
        patched.add(id(d.ctx))
        decode = d.ctx.decode

        def timed(tokens, *, _decode=decode, **kw):  # type: ignore[no-untyped-def]
            t = time.perf_counter()
            _decode(tokens, **kw)
            calls.append((len(tokens), kw.get("logits", "last"), time.perf_counter() - t))

        d.ctx.decode = timed


if __name__ == "__main__":
    main()
