"""A regime's target: seconds of one decode of n = 1..13 rows (every row's logits), after a prompt.

What the controller's verify cost V(K) is made of (K drafts: K + 1 rows). On a CPU, llama.cpp's
repacked kernels take rows in blocks of 4, so V is no line (rule `per_k`, ggufspec.loop.costmodel).
6 repeats, min and median per n.

    .venv/bin/python scripts/verify_rows.py as-1b    # a regime of `bench --regimes`
"""
import time, statistics as st, sys
from ggufspec.runtime import load_pair
from ggufspec.bench.regimes import parse_regimes
from ggufspec.settings import ContextSettings, PairSettings
regime = parse_regimes(sys.argv[1] if len(sys.argv) > 1 else "as-1b")[0]
pair = load_pair(target=regime.target, draft="none",
                 settings=PairSettings(context=ContextSettings(n_ctx=1024), n_gpu_layers=0))
ctx = pair.target_ctx
prompt = pair.encode(prompt="The quick brown fox jumps over the lazy dog. " * 8)
ctx.decode(prompt, logits="last")
base = ctx.n_past
res = {}
for rep in range(6):
    for n in range(1, 14):
        ctx.truncate(base)
        t = time.perf_counter(); ctx.decode(prompt[5:5 + n], logits="all"); dt = time.perf_counter() - t
        res.setdefault(n, []).append(dt * 1e3)
for n, v in res.items():
    print(n, "rows: min %.1f median %.1f ms" % (min(v), st.median(v)))
