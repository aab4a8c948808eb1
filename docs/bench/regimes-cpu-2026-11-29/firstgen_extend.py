"""A user's first generation with and without lookup's continuation (`--draft-extend 0`), over
prompts of both sets: each run a fresh `ggufspec run --pair default --chat -p PROMPT -n 128 --json`
process (a fresh controller), the two arms alternated, the order flipped every pair.

    .venv/bin/python docs/bench/regimes-cpu-2026-11-29/firstgen_extend.py [PAIRS] > out.txt

Prompts: the first 3 chat and first 3 code prompts of each set (tuned, held-out), their first user
message. Prints one line a run and, per set, the median over prompts of the per-prompt median of
default / no-extension tok/s.
"""

from __future__ import annotations

import json
import statistics as st
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
ARMS = {"default": [], "no extension": ["--draft-extend", "0"]}


def prompts(name: str) -> list[tuple[str, str]]:
    rows = [json.loads(ln) for ln in (ROOT / "ggufspec/prompts" / name).read_text().splitlines()
            if ln.strip() and not ln.startswith("#")]
    out = []
    for cat, n in (("chat", 3), ("code", 3)):
        for r in [r for r in rows if r["category"] == cat][:n]:
            out.append((r["id"], next(m["content"] for m in r["messages"] if m["role"] == "user")))
    return out


def run(prompt: str, extra: list[str]) -> dict:
    cmd = [sys.executable, "-m", "ggufspec.cli", "run", "--pair", "default", "--chat", "-p", prompt, "-n", "128",
           "--json", *extra]
    s = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT).stdout)["stats"]
    return {k: s[k] for k in ("gen_tps", "rounds", "drafted", "accepted", "k_hist")}


def main() -> None:
    pairs = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    for set_name, file in (("tuned", "bench.jsonl"), ("held-out", "heldout.jsonl")):
        ratios = []
        for i, (pid, text) in enumerate(prompts(file)):
            tps: dict[str, list[float]] = {a: [] for a in ARMS}
            for j in range(pairs):
                order = list(ARMS) if (i + j) % 2 == 0 else list(reversed(ARMS))
                for arm in order:
                    r = run(text, ARMS[arm])
                    tps[arm].append(r["gen_tps"])
                    print(f"{set_name} {pid} {arm}: {r}", flush=True)
            ratios.append(st.median(tps["default"]) / st.median(tps["no extension"]))
            print(f"{set_name} {pid} default / no extension {ratios[-1]:.3f}", flush=True)
        print(f"== {set_name}: median over prompts {st.median(ratios):.3f} "
              f"(per prompt {', '.join(f'{x:.3f}' for x in ratios)})", flush=True)


if __name__ == "__main__":
    main()
