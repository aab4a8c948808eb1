"""Replay with a position's conditional accept rate shrunk to the previous one's with W
pseudo-observations (today 1), for the draft model only (MODEL_ONLY=1) or every drafter.

The controller's own `prefix_accept` runs, on the drafter's discounted counts divided by W:
(a / W + c) / (d / W + 1) = (a + W c) / (d + W). The counts are put back as they were after each call.

    GGUFSPEC_PURE=1 W=4 .venv/bin/python docs/bench/regimes-cpu-2026-12-07d/simulated/controller-python/shrink_patch.py \
        simulate docs/bench/traces-default-pair.json --profile rtx3090-8b --policies default always K4 K8 --noise 0.1 --seeds 16
"""
import os
import sys

sys.path.insert(0, 'scripts')
from ggufspec.loop import throughput

W = float(os.environ.get('W', '1'))
MODEL_ONLY = os.environ.get('MODEL_ONLY', '1') == '1'
prefix_accept = throughput.Rates.prefix_accept


def shrunk_prefix_accept(self, name, n, *, optimistic=False):
    m = self._drafters[name]
    if W == 1.0 or (MODEL_ONLY and m.free):
        return prefix_accept(self, name, n, optimistic=optimistic)
    self.replay()  # (what prefix_accept does first: its counts up to date, so that it leaves them be)
    self._decay_accepts(m)
    drafted, accepted = m.drafted_at, m.accepted_at
    m.drafted_at, m.accepted_at = [x / W for x in drafted], [x / W for x in accepted]
    try:
        return prefix_accept(self, name, n, optimistic=optimistic)
    finally:
        m.drafted_at, m.accepted_at = drafted, accepted


throughput.Rates.prefix_accept = shrunk_prefix_accept
import trace_sim  # noqa: E402

sys.argv = ['trace_sim.py'] + sys.argv[1:]
trace_sim.main()
