"""Each grid cell's default against Theorem 3.8 at the costs its runs measured (what
`bench --regimes` prints in its 'bound' column since 4deb34e), from a stored grid's bench.json files.

    .venv/bin/python docs/bench/regimes-cpu-2026-11-29/bound.py docs/bench/regimes-cpu-2026-11-29/grid-head-d0e6cee
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from ggufspec.bench.expected import estimate_alpha, expected_speedup_partial  # noqa: E402
from ggufspec.bench.results import RunRecord  # noqa: E402
from ggufspec.bench.summary import _pooled_step, _verify_cost_runs  # noqa: E402

FIELDS = {f.name for f in dataclasses.fields(RunRecord)}


def records(path: Path) -> list[RunRecord]:
    out = []
    for r in json.loads(path.read_text())["runs"]:
        r = {k: v for k, v in r.items() if k in FIELDS}
        r["k_hist"] = {int(k): n for k, n in (r.get("k_hist") or {}).items()}
        out.append(RunRecord(**r))
    return [r for r in out if not r.error]


def main() -> None:
    grid = Path(sys.argv[1])
    print("| regime | set | config | measured | bound | measured / bound | alpha | K | c | verify (steps) | drafting share |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for bench in sorted(grid.glob("*/bench.json")):
        data = json.loads(bench.read_text())
        runs = records(bench)
        default = data["summary"]["default_config"]
        sets = data["summary"].get("sets") or {"all": data["summary"]}
        for name, sub in sets.items():
            ids = set(sub.get("prompts", []))
            ok = [r for r in runs if r.prompt_id in ids]
            step = _pooled_step(ok, temperature=0.0)
            by = {c["name"]: c for c in sub["configs"]}
            for cfg in (default, "Q4_1 K=8"):
                rs = [r for r in ok if r.config == cfg]
                if not rs or cfg not in by:
                    continue
                drafted, rounds = sum(r.drafted for r in rs), sum(r.rounds for r in rs)
                draft_rounds = sum(r.drafted_at[0] for r in rs if r.drafted_at)
                if not drafted or not draft_rounds:
                    continue
                alpha = estimate_alpha(accepted=sum(r.accepted for r in rs), rejections=sum(r.rejections for r in rs))
                k, c = drafted / draft_rounds, sum(r.draft_s for r in rs) / drafted / step
                v = _verify_cost_runs(rs, step)
                share = draft_rounds / rounds if not cfg.endswith("K=8") else 1.0
                b = expected_speedup_partial(a=alpha, k=k, c=c, share=share, v=v or 1.0)
                m = by[cfg]["speedup"]
                print(f"| {bench.parent.name} | {name} | {cfg} | {m:.2f} | {b:.2f} | {m / b:.2f} | {alpha:.2f} | {k:.1f} "
                      f"| {c:.2f} | {v if v is None else round(v, 2)} | {share:.2f} |")


if __name__ == "__main__":
    main()
