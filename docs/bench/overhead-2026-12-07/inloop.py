"""The controller's calls timed inside the loop of scripts/overhead.py (a proxy in front of the
compiled DraftController; 3 generations warm, then 12 timed). NV=4096 gives the fake models short
rows, to see what reading 49,152-entry rows does to the controller's caches.

    NV=4096 .venv/bin/python docs/bench/overhead-2026-12-07/inloop.py
"""
import sys, time
sys.path.insert(0, 'scripts'); sys.argv = ['x']  # (overhead.py's argparse runs in main() only)
import overhead as oh
from ggufspec.loop.control import DraftController
perf = time.perf_counter
acc = {}
class Proxy:
    def __init__(self, c): self.__dict__['_c'] = c
    def __getattr__(self, name): return getattr(self._c, name)
    def __setattr__(self, name, v): setattr(self._c, name, v)
def timed(name):
    def f(self, *a, **kw):
        t = perf(); r = getattr(self._c, name)(*a, **kw); acc[name] = acc.get(name, 0.0) + perf() - t; return r
    return f
for n in ('choose', 'observe', 'held', 'begin', 'wants'):
    setattr(Proxy, n, timed(n))
import os
if os.environ.get("NV"): oh.ROWS.resize(int(os.environ["NV"]))
for mode in ('default:pays', 'default:h200'):
    r = oh.Runner(mode, 200); r.controller = Proxy(DraftController())
    for _ in range(3): r.generation(128)
    acc.clear()
    wall = rounds = 0
    for _ in range(12):
        w, n, _s = r.generation(128); wall += w; rounds += n
    print(mode, f"rounds {rounds} ours {wall/rounds*1e3:.3f} ms/round;", ', '.join(f"{k} {v/rounds*1e6:.1f}" for k, v in acc.items()), "us/round")
