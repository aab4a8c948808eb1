"""Seconds of a verify of n rows (logits for all) on the as-1b stand-in, 2 threads, after a 200-token prompt."""
import sys, glob, os, time, statistics as st
import numpy as np
from ggufspec.llama.context import Context
from ggufspec.llama.model import Model
from ggufspec.settings import ContextSettings
path = glob.glob(os.path.expanduser("~/.cache/ggufspec/embedded/smollm2-as-1b.Q8_0.*.gguf"))[0]
model = Model(path)
ctx = Context(model, settings=ContextSettings(n_ctx=1024, n_threads=2).with_cache_type("f16"))
prompt = [int(x) for x in np.random.default_rng(0).integers(100, 20000, 200)]
ctx.decode(prompt, logits="last")
res = {n: [] for n in range(1, 17)}
for rep in range(5):
    for n in range(1, 17):
        t = time.perf_counter(); ctx.decode(prompt[:n], logits="all"); ctx.logits(0); res[n].append(time.perf_counter() - t); ctx.truncate(200)
for n, xs in res.items():
    print(n, f"{st.median(xs)*1e3:.1f} ms [{min(xs)*1e3:.1f}-{max(xs)*1e3:.1f}]")
