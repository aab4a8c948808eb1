"""Our Python a round on a real no-pay target, by arm: the target alone, the draft model alone under
the controller, lookup alone under it, and the default (both), alternated; one warmed controller
per arm; overhead_s / rounds (gen_s - draft_s - verify_s: our Python, the logits read and argmax).

    .venv/bin/python docs/bench/nopay-2026-11-28/python_by_arm.py [REGIME] [REPEATS]
"""
import statistics as st
import sys
from pathlib import Path

root = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(root / "scripts"), str(root)]
from coldstart import regime_run  # noqa: E402

from ggufspec.loop.control import DraftController  # noqa: E402
from ggufspec.loop.speculation import DraftLengthSettings  # noqa: E402

regime, prompts, run = regime_run(sys.argv[1] if len(sys.argv) > 1 else "q8_0", "tuned", 4)
length = DraftLengthSettings()
arms = {"alone": (lambda d: False, None), "default": (lambda d: True, DraftController()),  # drafters kept, controller
        "lookup": (lambda d: d.free, DraftController()), "model": (lambda d: not d.free, DraftController())}


def gen(arm, p):  # type: ignore[no-untyped-def]
    use, ctl = arms[arm]
    return run(ctl, p, length, use=use).stats


for arm in arms:  # warm: each controller calibrates
    for p in prompts:
        gen(arm, p)
res: dict[str, list[float]] = {a: [] for a in arms}
for rep in range(int(sys.argv[2]) if len(sys.argv) > 2 else 4):
    for arm in (list(arms) if rep % 2 == 0 else list(arms)[::-1]):
        ov = rounds = 0
        for p in prompts:
            s = gen(arm, p)
            ov += s.overhead_s
            rounds += s.rounds
        res[arm].append(ov / rounds * 1e3)
for a, xs in res.items():
    print(f"{a:8s} ms/round median {st.median(xs):.3f} [{min(xs):.3f}-{max(xs):.3f}]")
