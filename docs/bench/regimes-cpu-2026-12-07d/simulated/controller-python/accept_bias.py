"""The controller's estimated accept curve at each model round of the replay (rtx3090-8b) against the
trace's truth at the same round starts.

    NOISE=0 SEEDS=1 .venv/bin/python docs/bench/regimes-cpu-2026-12-07d/simulated/controller-python/accept_bias.py
"""
import sys, json, random, statistics as st, collections
sys.path.insert(0, 'scripts'); sys.argv = ['x']
import trace_sim as ts
noise = float(__import__('os').environ.get('NOISE', '0'))
seeds = int(__import__('os').environ.get('SEEDS', '1'))
traces = json.load(open('docs/bench/traces-default-pair.json')); traces = traces.get('traces', traces)
costs = ts.costs_for(None, profile='rtx3090-8b')
pol = ts.Policy.parse('default')
log = []
orig = ts.TraceDrafter.propose
CTL = {}
def propose(self, history, *, draft_len, draft_p_min=0.0, **kw):
    n = len(history)
    at = n - self.r.prompt_len
    if at < len(self.r.accepted_at) and CTL.get('c') is not None and draft_len > 0:
        c = CTL['c']
        m = c._drafters['model']
        # the controller's conditional estimates without touching state: recompute from counts
        cond, out = m.alpha0, []
        for i in range(8):
            if i < len(m.drafted_at):
                cond = (m.accepted_at[i] + cond) / (m.drafted_at[i] + 1.0)
            out.append(cond)
        log.append((at, draft_len, self.r.accepted_at[at], out, [x for x in m.drafted_at[:8]]))
    return orig(self, history, draft_len=draft_len, draft_p_min=draft_p_min, **kw)
ts.TraceDrafter.propose = propose
origC = ts.DraftController.__init__
def init(self, *a, **k):
    origC(self, *a, **k); CTL['c'] = self
ts.DraftController.__init__ = init
sp = ts.replay(traces, costs, noise, seeds, (pol,))
# only the model drafter's proposals (lookup is another class)
K = collections.Counter(l[1] for l in log)
print('rounds', len(log), 'K', sorted(K.items()))
reach=[0]*9; acc=[0]*9; est=[0.0]*9; n=[0]*9; eff=[0.0]*9
for at, k, L, out, dr in log:
    for j in range(1, 9):
        if L >= j-1: reach[j]+=1; acc[j]+= L>=j
        est[j]+=out[j-1]; n[j]+=1; eff[j]+= dr[j-1] if j-1 < len(dr) else 0
print('truth at its round starts', ' '.join(f"{acc[j]/reach[j]:.3f}" for j in range(1,9)))
print('controller estimate mean ', ' '.join(f"{est[j]/n[j]:.3f}" for j in range(1,9)))
print('effective counts mean    ', ' '.join(f"{eff[j]/n[j]:.1f}" for j in range(1,9)))
