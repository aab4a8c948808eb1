"""A regime's target: median seconds of one decode of n = 1..13 rows (every row's logits), after a prompt.

What the controller's verify cost V(K) is made of (K drafts: K + 1 rows). The cost model prices it
with a line; on a CPU llama.cpp's repacked kernels take rows in blocks of 4, so it is no line
(docs/bench/regimes-cpu-2026-11-27e). Timed by the bench's own `step_times` (the micro block).

    .venv/bin/python scripts/verify_rows.py as-1b [--reps 6]    # a regime of `bench --regimes`
"""

from __future__ import annotations

import argparse


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("regime", nargs="?", default="as-1b")
    ap.add_argument("--reps", type=int, default=6)
    args = ap.parse_args()

    from ggufspec.bench.ours import step_times
    from ggufspec.bench.regimes import parse_regimes
    from ggufspec.runtime import load_pair
    from ggufspec.settings import ContextSettings, PairSettings

    regime = parse_regimes(args.regime)[0]
    with load_pair(target=regime.target, draft="none",
                   settings=PairSettings(context=ContextSettings(n_ctx=1024), n_gpu_layers=0)) as pair:
        prompt = pair.encode(prompt="The quick brown fox jumps over the lazy dog. " * 8)
        sizes = list(range(1, 14))
        times = step_times({"target": pair.target_ctx}, prompt, batch_sizes={"target": sizes}, reps=args.reps)["target"]
    for n in sizes:
        print(f"{n} rows: median {times[n] * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
