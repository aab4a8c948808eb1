"""A regime cell of the trace replay with a 90% bootstrap interval over its prompts (48 seeds, 10% noise):
`trace_sim.regime_rows`' cell (default / best rival) on 2,000 resamples of the set's prompts.

    .venv/bin/python docs/bench/regimes-cpu-2026-12-07d/simulated/controller-python/bootstrap_cell.py PROFILE
"""
import json
import random
import sys

sys.path.insert(0, 'scripts')
import trace_sim as ts

profile = sys.argv[1] if len(sys.argv) > 1 else 'rtx3090-8b'
traces = json.load(open('docs/bench/traces-default-pair.json'))
traces = traces.get('traces', traces)
pols = tuple(ts.Policy.parse(x) for x in ('default', 'always', 'K2', 'K4', 'K8'))
sp = ts.replay(traces, ts.costs_for(None, profile=profile), 0.1, 48, pols)


def cell(sample: list[str]) -> float:
    """The cell's ratio over `sample` (prompt ids, repeats allowed: each drawn copy a prompt of its own)."""
    drawn = {f'{p}#{n}': traces[p] for n, p in enumerate(sample)}
    speedups = {(pol, f'{p}#{n}'): sp[(pol, p)] for n, p in enumerate(sample) for pol in pols}
    return ts.regime_rows(drawn, speedups, pols, seeds=1)[0]['ratio']


for s in ('tuned', 'heldout'):
    ids = [p for p, t in traces.items() if t['set'] == s]
    rng = random.Random(0)
    boots = sorted(cell([rng.choice(ids) for _ in ids]) for _ in range(2000))
    print(profile, s, len(ids), round(cell(ids), 3), '90%', round(boots[100], 3), round(boots[1899], 3))
