"""A one-shot `ggufspec run` (no --compare, no warm-up: one generation in a new process), the target
alone (--draft none), fresh (--no-remember) and remembering, the three arms rotated run by run, on
the Q8_0 target (where nothing pays) and the default pair's F32 target, the issue's prime prompt,
128 tokens, greedy. The remembering arm's state folder is the script's own, primed by one run a
target. Prints each run's generation tok/s and, per target, the medians and the ratios to the
target alone; writes runs.json to OUT.

    .venv/bin/python docs/bench/remember-2026-11-29/oneshot.py OUT [PASSES]
"""
import json, os, statistics, subprocess, sys
from pathlib import Path

root = Path(__file__).resolve().parents[3]
out = Path(sys.argv[1]).resolve(); out.mkdir(parents=True, exist_ok=True)
passes = int(sys.argv[2]) if len(sys.argv) > 2 else 6
prompt = "Write a Python function that checks whether a number is prime."
env = dict(os.environ, GGUFSPEC_STATE=str(out / "state"))
ARMS = {"alone": ["--draft", "none"], "fresh": ["--draft", "embedded:smollm2:Q4_1", "--draft", "lookup", "--no-remember"],
        "remember": ["--draft", "embedded:smollm2:Q4_1", "--draft", "lookup", "--remember"]}


def run(target: str, arm: str) -> dict:
    cmd = [str(root / ".venv/bin/ggufspec"), "run", "--target", f"embedded:smollm2:{target}", *ARMS[arm], "--chat",
           "-p", prompt, "-n", "128", "--temp", "0", "--json"]
    d = json.loads(subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=root, check=True).stdout)
    return {"gen_tps": d["stats"]["gen_tps"], "drafter_rounds": d["stats"]["drafter_rounds"],
            "remembered_rounds": d["remembered_rounds"], "text": d["text"]}


targets = ("Q8_0", "F32")
for t in targets:
    run(t, "remember")  # primes the state
runs: list[dict] = []
for p in range(passes):
    for t in targets:
        order = list(ARMS)[p % 3:] + list(ARMS)[:p % 3]
        for arm in order:
            r = run(t, arm) | {"pass": p + 1, "target": t, "arm": arm}
            runs.append(r)
            print(p + 1, t, arm, r["gen_tps"], r["drafter_rounds"], "knew", r["remembered_rounds"], flush=True)
(out / "runs.json").write_text(json.dumps(runs, indent=1))
print("\n| target | alone tok/s | fresh | remembering | fresh / alone | remembering / alone |\n|---|---:|---:|---:|---:|---:|")
for t in targets:
    med = {a: statistics.median(r["gen_tps"] for r in runs if r["target"] == t and r["arm"] == a) for a in ARMS}
    # per pass ratios (the three arms of a pass ran one after the other)
    rat = {a: statistics.median(
        next(r["gen_tps"] for r in runs if r["target"] == t and r["arm"] == a and r["pass"] == p + 1)
        / next(r["gen_tps"] for r in runs if r["target"] == t and r["arm"] == "alone" and r["pass"] == p + 1)
        for p in range(passes)) for a in ("fresh", "remember")}
    print(f"| {t} | {med['alone']:.1f} | {med['fresh']:.1f} | {med['remember']:.1f} | {rat['fresh']:.3f} | {rat['remember']:.3f} |")
