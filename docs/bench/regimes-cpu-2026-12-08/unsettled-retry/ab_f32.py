"""scripts/control_ab.py on a regime the grid does not have: the as-1b target with the F32 SmolLM2 as
its draft (a draft step ~3x the Q4_1's, its own cache): a cache-separate draft at break-even, where
an in-generation retry costs most (docs/bench/regimes-cpu-2026-12-07d/README.md, "That fix").

    .venv/bin/python docs/bench/regimes-cpu-2026-12-08/unsettled-retry/ab_f32.py 3 OUT.json \
        --old unsettled_retry=0 --regime as-1b-f32 --limit 4 --fresh
"""
import runpy
import sys
from pathlib import Path

from ggufspec.bench import regimes
from ggufspec.models.resolve import LOOKUP

regimes.REGIMES["as-1b-f32"] = regimes.Regime("as-1b-f32", "smollm2-as-1b (Q8_0), the F32 draft",
                                              "embedded:smollm2-as-1b:Q8_0", ("embedded:smollm2:F32", LOOKUP))
sys.argv = ["scripts/control_ab.py", *sys.argv[1:]]
sys.path.insert(0, str(Path("scripts").resolve()))
runpy.run_path("scripts/control_ab.py", run_name="__main__")
