"""A regime cell of the trace replay with a 90% bootstrap interval over its prompts (48 seeds, 10% noise).

    .venv/bin/python docs/bench/regimes-cpu-2026-12-07d/simulated/controller-python/bootstrap_cell.py PROFILE
"""
import sys, json, random, statistics as st
sys.path.insert(0, 'scripts')
import trace_sim as ts
profile = sys.argv[1] if len(sys.argv) > 1 else 'rtx3090-8b'
traces = json.load(open('docs/bench/traces-default-pair.json')); traces = traces.get('traces', traces)
costs = ts.costs_for(None, profile=profile)
pols = tuple(ts.Policy.parse(x) for x in ('default', 'always', 'K2', 'K4', 'K8'))
sp = ts.replay(traces, costs, 0.1, 48, pols)
for s in ('tuned', 'heldout'):
    ids = [p for p, t in traces.items() if (t['set'] == s)]
    med = {p: {pol: st.median(sp[(pol, p)]) for pol in pols} for p in ids}
    def cell(sample):
        d = st.median(med[p][pols[0]] for p in sample)
        best = max(max(1.0, st.median(med[p][pol] for p in sample)) for pol in pols[1:])
        return d / best
    rng = random.Random(0)
    boots = sorted(cell([rng.choice(ids) for _ in ids]) for _ in range(2000))
    print(profile, s, len(ids), round(cell(ids), 3), '90%', round(boots[100], 3), round(boots[1899], 3))
