"""Rule `k_optimism` (tried 2026-12-08, not added) against the default, paired on the trace replay.

With k_optimism.patch applied (a ControlSettings field; a draft model's K chosen on
c(j) + B sqrt(c (1 - c) / (n_j + 1)), n_j position j's discounted observations, the rate it
reports the plain curve's), each cell is scripts/ablate.py's: the geometric mean over prompts and
seeds of default@k_optimism=B / default, with its 90% bootstrap interval.

    git apply docs/bench/regimes-cpu-2026-12-08/k-optimism/k_optimism.patch
    GGUFSPEC_PURE=1 PYTHONPATH=. .venv/bin/python docs/bench/regimes-cpu-2026-12-08/k-optimism/k_optimism_ab.py \
        8 rtx3090-8b,h200-135m,epyc-q8_0,epyc-q4_1,epyc-as-1b,epyc-micro,epyc-loop 0.5,1,2 OUT.json
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, "scripts")
import ablate  # noqa: E402

seeds, regimes, bonuses = int(sys.argv[1]), sys.argv[2].split(","), sys.argv[3].split(",")
traces = json.loads(Path("docs/bench/traces-default-pair.json").read_text())
rules = {f"k_optimism={b}": f"default@k_optimism={b}" for b in bonuses}
data = ablate.run(traces, rules, tuple(regimes), 0.1, seeds, Path(sys.argv[4]) if len(sys.argv) > 4 else None)
ablate.table(data, traces, rules, seeds)
