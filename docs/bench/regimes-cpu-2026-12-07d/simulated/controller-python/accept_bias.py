"""The controller's estimated accept curve at each model round of the replay (rtx3090-8b) against the
trace's truth at the same round starts. The estimate is the controller's own `prefix_accept` (its
conditional rates: pi_j / pi_(j-1)), read as the draft model is asked to propose; reading it leaves
the replay's decisions as they are (checked: the same speedups as a replay that does not read it).

    NOISE=0 SEEDS=1 .venv/bin/python docs/bench/regimes-cpu-2026-12-07d/simulated/controller-python/accept_bias.py
"""
import collections
import json
import os
import sys

sys.path.insert(0, 'scripts')
import trace_sim as ts

noise = float(os.environ.get('NOISE', '0'))
seeds = int(os.environ.get('SEEDS', '1'))
traces = json.load(open('docs/bench/traces-default-pair.json'))
traces = traces.get('traces', traces)
costs = ts.costs_for(None, profile='rtx3090-8b')
pol = ts.Policy.parse('default')
plain = ts.replay(traces, costs, noise, seeds, (pol,))  # the replay unread, for the check below

log = []  # (position in the reply, K, drafts the target keeps there, conditional estimates, discounted counts)
controller = {}
propose, init = ts.TraceDrafter.propose, ts.DraftController.__init__


def reading_propose(self, history, *, draft_len, draft_p_min=0.0, **kw):
    at = len(history) - self.r.prompt_len
    c = controller.get('c')
    if at < len(self.r.accepted_at) and c is not None and draft_len > 0:
        pis = (1.0, *c.prefix_accept('model', 8))
        m = c._drafters['model']
        log.append((at, draft_len, self.r.accepted_at[at], [pis[j] / pis[j - 1] for j in range(1, 9)],
                    list(m.drafted_at[:8])))
    return propose(self, history, draft_len=draft_len, draft_p_min=draft_p_min, **kw)


def keeping_init(self, *a, **k):
    init(self, *a, **k)
    controller['c'] = self


ts.TraceDrafter.propose, ts.DraftController.__init__ = reading_propose, keeping_init
assert ts.replay(traces, costs, noise, seeds, (pol,)) == plain, "reading the estimates changed the replay"
print('rounds', len(log), 'K', sorted(collections.Counter(k for _, k, _, _, _ in log).items()))
reach, acc, est, eff = [0] * 9, [0] * 9, [0.0] * 9, [0.0] * 9
for at, k, kept, conds, counts in log:
    for j in range(1, 9):
        if kept >= j - 1:
            reach[j] += 1
            acc[j] += kept >= j
        est[j] += conds[j - 1]
        eff[j] += counts[j - 1] if j - 1 < len(counts) else 0.0
n = len(log)
print('truth at its round starts', ' '.join(f"{acc[j] / reach[j]:.3f}" for j in range(1, 9)))
print('controller estimate mean ', ' '.join(f"{est[j] / n:.3f}" for j in range(1, 9)))
print('effective counts mean    ', ' '.join(f"{eff[j] / n:.1f}" for j in range(1, 9)))
