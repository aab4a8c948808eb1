"""The issue-40 no-pay rows in one process: the pair's default against the target alone on the
same contexts, generations alternated ABBA, many pairs (run --compare's measure, without a new
process per command and with as many pairs as asked).

    .venv/bin/python scripts/nopay_ab.py --target Q8_0 -p "Why is the sky blue?" --pairs 16

Prints the median speed ratio (default / alone, each pair's generation seconds) with its 10-90%
range, and where the default's extra seconds a generation went (medians): its draft decodes, its
verify beyond the target alone's per round, and our Python beyond the target alone's per round.
"""

from __future__ import annotations

import argparse
import statistics as st
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ggufspec.loop.sampling import SamplingSettings  # noqa: E402
from ggufspec.runtime import load_pair  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default="Q8_0", help="the embedded SmolLM2 quantization (Q8_0, Q4_1)")
    ap.add_argument("-p", "--prompt", default="Why is the sky blue?")
    ap.add_argument("--pairs", type=int, default=16)
    args = ap.parse_args()
    pair = load_pair(target=f"embedded:smollm2:{args.target}", draft=["embedded:smollm2:Q4_1", "lookup"])
    tokens = pair.encode(messages=[{"role": "user", "content": args.prompt}])
    greedy = SamplingSettings(temperature=0.0)

    def one(default: bool):  # type: ignore[no-untyped-def]
        g = pair.generate(prompt_tokens=tokens, drafters=pair.drafters if default else None, sampling=greedy,
                          max_tokens=128, cache_prompt=False)
        g.run()
        return g.stats

    one(True), one(False)  # (uncounted: the warm-up)
    ratios, extra = [], []
    for i in range(args.pairs):
        got = {k: one(k) for k in ((True, False) if i % 2 == 0 else (False, True))}
        s, a = got[True], got[False]
        per = s.rounds / a.rounds
        ratios.append(a.gen_s / s.gen_s)
        extra.append((s.draft_s, s.verify_s - a.verify_s * per, s.overhead_s - a.overhead_s * per,
                      sum(n for k, n in s.drafter_rounds.items() if k != "none")))
    q = sorted(ratios)
    tenth = len(q) // 10
    print(f"{args.target} | {args.prompt}: default / alone {st.median(q):.3f} [{q[tenth]:.3f}-{q[-1 - tenth]:.3f}] "
          f"({args.pairs} pairs)")
    ms = [st.median(e[j] for e in extra) * 1e3 for j in range(3)]
    print(f"  the default's extra a generation (medians): draft {ms[0]:.1f} ms, verify {ms[1]:.1f} ms, "
          f"our Python {ms[2]:.1f} ms; drafting rounds {st.median(e[3] for e in extra):g}")


if __name__ == "__main__":
    main()
