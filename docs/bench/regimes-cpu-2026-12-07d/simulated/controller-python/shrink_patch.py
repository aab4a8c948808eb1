"""Replay with a patched prefix_accept: a position's conditional rate shrunk to the previous one's
with W pseudo-observations (today 1) for the draft model only (MODEL_ONLY=1) or every drafter.

    GGUFSPEC_PURE=1 W=4 .venv/bin/python docs/bench/regimes-cpu-2026-12-07d/simulated/controller-python/shrink_patch.py \
        simulate docs/bench/traces-default-pair.json --profile rtx3090-8b --policies default always K4 K8 --noise 0.1 --seeds 16
"""
import os, sys
W = float(os.environ.get('W', '1'))
MODEL_ONLY = os.environ.get('MODEL_ONLY', '1') == '1'
sys.path.insert(0, 'scripts')
from ggufspec.loop import throughput
def prefix_accept(self, name, n, *, optimistic=False):
    self.replay()
    m = self._drafters[name]
    self._decay_accepts(m)
    out, pi, cond, alpha0 = [], 1.0, m.alpha0, m.alpha0
    w = self.settings.free_prior_obs
    w0 = 1.0 if (MODEL_ONLY and m.free) else W
    drafted, accepted = m.drafted_at, m.accepted_at
    gen_drafted = m.gen_drafted_at if m.free and self.settings.free_prompt else []
    measured, gen_measured, gen_accepted = len(drafted), len(gen_drafted), m.gen_accepted_at
    for i in range(n):
        if i < measured:
            cond = (accepted[i] + w0 * cond) / (drafted[i] + w0)
        c = (gen_accepted[i] + w * cond) / (gen_drafted[i] + w) if i < gen_measured else cond
        if optimistic and c < alpha0:
            c = alpha0
        pi *= c
        out.append(pi)
    return tuple(out)
throughput.Rates.prefix_accept = prefix_accept
import trace_sim
sys.argv = ['trace_sim.py'] + sys.argv[1:]
trace_sim.main()
