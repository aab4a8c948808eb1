"""Rule `unsettled_retry` on the cold-start replay: on / off per seed, paired (each seed the same
prompt order; the noise is each policy's own), and each arm's cell against the best rival.

With unsettled_retry.patch applied (pure source), from the repository root, per profile:
    GGUFSPEC_PURE=1 PYTHONPATH=. .venv/bin/python scripts/coldstart_sim.py \
        docs/bench/coldstart-replay-2026-11-29/traces-as1b-own-first12.json --profile PROFILE --prompts 4 \
        --seeds 60 --noise 0.1 --policies default default@unsettled_retry=0 K2 K4 K8 always --json OUT.json
    .venv/bin/python docs/bench/regimes-cpu-2026-12-08/unsettled-retry/replay/paired_cells.py OUT.json
PROFILE: epyc-as-1b, or one of the as1b-draft*.json here (its draft step at 15-35 ms).
"""
import json, math, sys, statistics as st
import numpy as np
d = json.load(open(sys.argv[1]))
on, off = "default<=8", "default<=8@unsettled_retry=False"
rivals = [k for k in d if not k.startswith("default")]
rng = np.random.default_rng(0)
def cell(g, s): return st.median(x for k, x, _ in g if k == s)
out = []
for s in ("tuned", "heldout"):
    logs = np.array([math.log(cell(ga, s) / cell(gb, s)) for ga, gb in zip(d[on], d[off])])
    boot = [logs[rng.integers(0, len(logs), len(logs))].mean() for _ in range(2000)]
    lo, hi = np.percentile(boot, [5, 95])
    hold = {p: sum(cell(g, s) / max(1.0, *(cell(d[r][i], s) for r in rivals)) >= 0.97 for i, g in enumerate(d[p])) for p in (on, off)}
    med = {p: st.median(cell(g, s) / max(1.0, *(cell(d[r][i], s) for r in rivals)) for i, g in enumerate(d[p])) for p in (on, off)}
    out.append(f"{s}: on/off {math.exp(logs.mean()):.3f} [{math.exp(lo):.3f}-{math.exp(hi):.3f}]; vs best on {med[on]:.3f} ({hold[on]}/{len(d[on])}) off {med[off]:.3f} ({hold[off]}/{len(d[off])})")
bad = {p: sum(g[0][2] > 0.5 for g in d[p]) for p in (on, off)}
print(" | ".join(out) + f" | bad starts on {bad[on]} off {bad[off]}")
