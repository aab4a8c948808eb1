"""Where nothing pays, our Python a round on the real path: the Q8_0 target with the Q4_1 draft and
lookup (the default controller) or the target alone (`alone`), N generations of 128 tokens after two
warm ones, the issue's two prompts in turn; prints overhead_s over rounds.

    .venv/bin/python docs/bench/overhead-2026-11-29/nopay_loop.py default|alone N
    py-spy record -r 2000 -f raw -o default.raw -- .venv/bin/python docs/bench/overhead-2026-11-29/nopay_loop.py default 30
    python3 docs/bench/overhead-2026-11-29/pyspy_parts.py default.raw alone.raw
"""
import sys, time
from ggufspec.runtime import load_pair
from ggufspec.settings import PairSettings, ContextSettings
arm = sys.argv[1]
pair = load_pair(target="embedded:smollm2:Q8_0", draft=["embedded:smollm2:Q4_1", "lookup"], settings=PairSettings(context=ContextSettings(n_ctx=1024)))
msgs = [[{"role": "user", "content": p}] for p in ("Why is the sky blue?", "Write a Python function that checks whether a number is prime.")]
toks = [pair.encode(messages=m) for m in msgs]
for i in range(2):
    pair.generate(prompt_tokens=toks[i], max_tokens=128, cache_prompt=False, **({"drafters": ()} if arm == "alone" else {})).run()
t = time.perf_counter(); py = 0.0; rounds = 0
for j in range(int(sys.argv[2])):
    g = pair.generate(prompt_tokens=toks[j % 2], max_tokens=128, cache_prompt=False, **({"drafters": ()} if arm == "alone" else {})).run()
    py += g.stats.overhead_s; rounds += g.stats.rounds
print(arm, f"python {py / rounds * 1e6:.0f} us a round over {rounds} rounds", file=sys.stderr)
