"""The tables of README.md from the runs' JSON (runs/): per script, each run's median speedup and
its first repeat (a one-shot run's experience), fresh against remembering.

    python3 docs/bench/remember-2026-11-29/summary.py
"""
import json, statistics
from pathlib import Path

here = Path(__file__).resolve().parent / "runs"


def load(d: str) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted((here / d).glob("*.json"))}


def rows(d: str) -> None:
    runs = load(d)
    print(f"\n## {d}\n\n| run | median | repeats | first repeat | rounds by drafter (first) | knew |\n|---|---:|---|---:|---|---:|")
    firsts: dict[str, list[float]] = {"fresh": [], "remember": []}
    meds: dict[str, list[float]] = {"fresh": [], "remember": []}
    for name, r in runs.items():
        c = r["compare"]
        print(f"| {name} | {c['median']:.3f} | {' '.join(f'{x:.3f}' for x in c['speedups'])} | {c['speedups'][0]:.3f} "
              f"| {r['stats']['drafter_rounds']} | {r['remembered_rounds']} |")
        arm = name.split("_")[0]
        if arm in firsts:
            firsts[arm].append(c["speedups"][0])
            meds[arm].append(c["median"])
    ratios = {k[len("fresh_"):]: (runs["remember_" + k[len("fresh_"):]]["compare"]["median"] / r["compare"]["median"],
                                   runs["remember_" + k[len("fresh_"):]]["compare"]["speedups"][0] / r["compare"]["speedups"][0])
              for k, r in runs.items() if k.startswith("fresh_") and "remember_" + k[len("fresh_"):] in runs}
    if ratios:
        med = sorted(x for x, _ in ratios.values())
        first = sorted(y for _, y in ratios.values())
        print(f"\nremembering / fresh, paired ({len(ratios)} pairs): median {statistics.median(med):.3f} "
              f"[{med[0]:.3f}-{med[-1]:.3f}]; first repeats {statistics.median(first):.3f} [{first[0]:.3f}-{first[-1]:.3f}]")
    for arm in ("fresh", "remember"):
        if meds[arm]:
            print(f"\n{arm}: medians {statistics.median(meds[arm]):.3f} [{min(meds[arm]):.3f}-{max(meds[arm]):.3f}], "
                  f"{sum(m >= 0.97 for m in meds[arm])}/{len(meds[arm])} at least 0.97; first repeats "
                  f"{statistics.median(firsts[arm]):.3f} [{min(firsts[arm]):.3f}-{max(firsts[arm]):.3f}]")


for d in ("nopay", "as1b", "f32", "f32prompts", "primeonly"):
    rows(d)
