"""Our Python a round on the real models, two checkouts in one process (scripts/overhead_ab.py's
way, with a regime's real target and drafters instead of zero-cost fakes).

Both checkouts load the regime's models (`scripts/coldstart.py`'s `regime_run`: the first 4 tuned
prompts, 128 greedy tokens, CPU) and generate in turn, prompt by prompt, the order flipped every
prompt. `llama_decode` is timed (both packages call the one llama_cpp module), so for each side

    ours = (prompt_s + gen_s - seconds inside llama_decode) / rounds

our Python a round, logits reads and argmax included. A decode evicts the caches, so what runs
after it runs cache-cold: the fake-model microbenchmark (scripts/overhead.py) reads 2-3x less. The
speed ratio is printed too, but each side has its own copy of the weights and contexts, so it
carries a few percent of placement (one code against itself: 0.96-1.05); `ours` does not.

    git worktree add /tmp/base <commit>
    .venv/bin/python scripts/real_overhead_ab.py /tmp/base --regime q8_0 --arm default --reps 6
"""

from __future__ import annotations

import argparse
import importlib
import statistics as st
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(HERE), str(HERE / "scripts")]

from overhead_ab import load_script, renamed_copy  # noqa: E402

ARMS = {"default": lambda d: True, "alone": lambda d: False, "lookup": lambda d: d.free, "model": lambda d: not d.free}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("base", type=Path, help="the other checkout (a git worktree)")
    ap.add_argument("--regime", default="q8_0")
    ap.add_argument("--arm", default="default", choices=sorted(ARMS))
    ap.add_argument("--reps", type=int, default=6)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    renamed_copy(args.base, tmp)
    sys.path.insert(0, str(tmp))
    # this tree's package first: the base's coldstart.py puts the base's root first on the path
    import ggufspec.loop.engine  # noqa: F401
    import ggufspec.runtime  # noqa: F401
    import llama_cpp

    inside = [0.0]
    raw = llama_cpp.llama_decode

    def timed(ctx, batch):  # type: ignore[no-untyped-def]
        t = time.perf_counter()
        try:
            return raw(ctx, batch)
        finally:
            inside[0] += time.perf_counter() - t

    llama_cpp.llama_decode = timed
    sides = {}
    for name, package, root in (("base", "ggufspec_base", args.base), ("this", "ggufspec", HERE)):
        _, prompts, run = load_script(root / "scripts" / "coldstart.py", package).regime_run(args.regime, "tuned", 4)
        controller = importlib.import_module(f"{package}.loop.control").DraftController
        length = importlib.import_module(f"{package}.loop.speculation").DraftLengthSettings()
        sides[name] = (prompts, run, controller() if args.arm != "alone" else None, length)
    this = Path(sys.modules["ggufspec"].__file__).resolve()
    assert this.is_relative_to(HERE) and not this.is_relative_to(args.base.resolve()), this  # (this tree's code)
    use = ARMS[args.arm]
    for prompts, run, ctl, length in sides.values():  # (warm: each side's first generations)
        for p in prompts:
            run(ctl, p, length, use=use)
    ours: dict[str, list[float]] = {k: [] for k in sides}
    per_token: dict[str, list[float]] = {k: [] for k in sides}
    for rep in range(args.reps):
        acc = {k: [0.0, 0, 0.0, 0] for k in sides}
        for i in range(len(sides["this"][0])):
            for k in ("base", "this") if (rep + i) % 2 else ("this", "base"):
                prompts, run, ctl, length = sides[k]
                before = inside[0]
                s = run(ctl, prompts[i], length, use=use).stats
                acc[k][0] += s.prompt_s + s.gen_s - (inside[0] - before)
                acc[k][1] += s.rounds
                acc[k][2] += s.gen_s
                acc[k][3] += s.generated_tokens - 1
        for k in sides:
            ours[k].append(acc[k][0] / acc[k][1] * 1e6)
            per_token[k].append(acc[k][2] / acc[k][3] * 1e3)
    r = sorted(x / y for x, y in zip(ours["this"], ours["base"]))
    g = sorted(y / x for x, y in zip(per_token["this"], per_token["base"]))
    print(f"{args.regime} {args.arm}, {args.reps} repeats x 4 prompts: our Python a round, base "
          f"{st.median(ours['base']):.1f} us, this {st.median(ours['this']):.1f}; this / base {st.median(r):.3f} "
          f"[{r[0]:.3f}-{r[-1]:.3f}]; speed this / base {st.median(g):.3f} [{g[0]:.3f}-{g[-1]:.3f}]")


if __name__ == "__main__":
    main()
