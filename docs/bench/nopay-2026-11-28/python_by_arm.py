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
from ggufspec.loop.engine import generate  # noqa: E402
from ggufspec.loop.sampling import SamplingSettings  # noqa: E402
from ggufspec.loop.speculation import DraftLengthSettings, SpeculativeSettings  # noqa: E402

regime, prompts, run = regime_run(sys.argv[1] if len(sys.argv) > 1 else "q8_0", "tuned", 4)
cl = dict(zip(run.__code__.co_freevars, (c.cell_contents for c in run.__closure__)))  # run's target and drafters
target, copies, toks = cl["target"], cl["copies"], cl["toks"]
length = DraftLengthSettings()
arms = {"alone": ((), None), "default": (tuple(copies), DraftController()),
        "lookup": (tuple(d for d in copies if d.free), DraftController()),
        "model": (tuple(d for d in copies if not d.free), DraftController())}


def gen(arm, p):  # type: ignore[no-untyped-def]
    ds, ctl = arms[arm]
    g = generate(target=target, prompt=toks[p.id], drafters=ds, max_tokens=128, cache_prompt=False,
                 sampling=SamplingSettings(temperature=0.0), speculative=SpeculativeSettings(length=length),
                 controller=ctl)
    g.run()
    return g.stats


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
