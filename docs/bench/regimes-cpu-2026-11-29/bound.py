"""Each grid cell's default (and fixed K = 8) against Theorem 3.8 at the costs its runs measured
(`ggufspec.bench.expected.measured_bound`: what `bench --regimes` prints in its 'bound' column since
23909b1; the target step is llama.cpp's decode of the target alone), from a stored grid's bench.json
files. The measured figure is the bench's (median over prompts); the bound is from the pooled counts,
and "per prompt" the median over prompts of each prompt's own bound (a prompt that never drafted:
1.0), tried as a like-for-like column and not kept (bound-d0e6cee.md).

    .venv/bin/python docs/bench/regimes-cpu-2026-11-29/bound.py docs/bench/regimes-cpu-2026-11-29/grid-head-d0e6cee
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from ggufspec.bench.expected import measured_bound  # noqa: E402
from ggufspec.bench.results import RunRecord  # noqa: E402
from ggufspec.bench.theory import pooled_decode_step  # noqa: E402

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
    print("| regime | set | config | measured | bound | measured / bound | per prompt | measured / it | alpha | K | c "
          "| verify (steps) | drafting share |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for bench in sorted(grid.glob("*/bench.json")):
        data = json.loads(bench.read_text())
        runs = records(bench)
        default = data["summary"]["default_config"]
        sets = data["summary"].get("sets") or {"all": data["summary"]}
        for name, sub in sets.items():
            ids = set(sub.get("prompts", []))
            ok = [r for r in runs if r.prompt_id in ids]
            step = pooled_decode_step(ok, temperature=0.0)
            by = {c["name"]: c for c in sub["configs"]}
            for cfg in (default, "Q4_1 K=8"):
                rs = [r for r in ok if r.config == cfg]
                if not rs or cfg not in by or step is None:
                    continue
                b = bound(rs, step)
                if b is None:
                    continue
                per = [bound(prs, step) for prs in by_prompt(rs).values()]
                pp = median([1.0 if x is None and not drafted(prs) else x.speedup
                             for x, prs in zip(per, by_prompt(rs).values()) if x is not None or not drafted(prs)])
                m = by[cfg]["speedup"]
                v = "-" if b.verify is None else f"{b.verify:.2f}"
                print(f"| {bench.parent.name} | {name} | {cfg} | {m:.2f} | {b.speedup:.2f} | {m / b.speedup:.2f} "
                      f"| {pp:.2f} | {m / pp:.2f} | {b.alpha:.2f} | {b.k:.1f} | {b.c:.2f} | {v} | {b.share:.2f} |")


def by_prompt(rs: list[RunRecord]) -> dict[str, list[RunRecord]]:
    out: dict[str, list[RunRecord]] = {}
    for r in rs:
        out.setdefault(r.prompt_id, []).append(r)
    return out


def drafted(rs: list[RunRecord]) -> bool:
    return any(r.drafted for r in rs)


def bound(rs: list[RunRecord], step: float):
    rounds = sum(r.rounds for r in rs)
    return measured_bound(accepted=sum(r.accepted for r in rs), rejections=sum(r.rejections for r in rs),
                          drafted=sum(r.drafted for r in rs),
                          drafting_rounds=rounds - sum(r.k_hist.get(0, 0) for r in rs), rounds=rounds,
                          draft_s=sum(r.draft_s for r in rs), verify_s=sum(r.verify_s for r in rs), step_s=step)


if __name__ == "__main__":
    main()
