"""Which part of a remembered state slows the default pair on the prime prompt: one generation of
128 tokens (no warm-up, its own copy of the controller: a one-shot run's) from a fresh controller,
from the state the f32 runs left (runs/f32/state: learnt on both prompts), and from that state with
lookup's curves, the model's curve, both, or the realized rates cleared; the variants rotated,
PASSES passes; then the target alone three times.

    .venv/bin/python docs/bench/remember-2026-11-29/parts.py docs/bench/remember-2026-11-29/runs/f32/state 8
"""
import copy, glob, pickle, statistics, sys, time
from ggufspec.runtime import load_pair
from ggufspec.settings import PairSettings
from ggufspec.loop.control import DraftController
from ggufspec.loop.estimates import DrafterModel

state = pickle.load(open(glob.glob(sys.argv[1] + "/controller/*.pickle")[0], "rb"))["controller"]
passes = int(sys.argv[2])
prompt = sys.argv[3] if len(sys.argv) > 3 else "Write a Python function that checks whether a number is prime."

def variant(name):
    if name == "fresh":
        return DraftController(settings=state.settings)
    c = copy.deepcopy(state)
    if name in ("no-lookup-curves", "no-curves"):
        for k in list(c._drafters):
            if k.startswith("lookup"):
                m = c._drafters[k]
                c._drafters[k] = DrafterModel(free=True, per_token=m.per_token, first=m.first, catchup=m.catchup, prefill=m.prefill, at=m.at)
    if name in ("no-model-curve", "no-curves"):
        for k, m in c._drafters.items():
            if not m.free:
                m.drafted_at, m.accepted_at, m.continued = [], [], [0.0] * 4
    if name == "no-rates":
        c._sources = {}
    return c

names = ["fresh", "full", "no-lookup-curves", "no-model-curve", "no-curves", "no-rates"]
pair = load_pair(settings=PairSettings())
toks = pair.encode(messages=[{"role": "user", "content": prompt}])
pair.generate(prompt_tokens=toks, max_tokens=16, controller=DraftController()).run()  # warm the weights
got = {n: [] for n in names}
for p in range(passes):
    for n in names[p % len(names):] + names[:p % len(names)]:
        g = pair.generate(prompt_tokens=toks, max_tokens=128, controller=variant(n), cache_prompt=False).run()
        s = g.stats
        got[n].append(s.gen_tps)
        if p == 0:
            print(n, round(s.gen_tps, 1), dict(s.drafter_rounds), dict(s.k_hist), flush=True)
alone = []
for p in range(3):
    alone.append(pair.generate(prompt_tokens=toks, max_tokens=128, drafters=(), cache_prompt=False).run().stats.gen_tps)
a = statistics.median(alone)
for n in names:
    print(f"{n:18s} median {statistics.median(got[n]):6.1f} tok/s = {statistics.median(got[n]) / a:.3f} x alone ({a:.1f})  [{min(got[n]):.1f}-{max(got[n]):.1f}]")
