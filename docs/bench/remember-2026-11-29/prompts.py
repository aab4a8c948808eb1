"""Fresh (--no-remember) against remembering on a pair, one prompt of each category of both prompt
sets: `ggufspec run --compare --repeats 1` (128 tokens, greedy, in lockstep), the two arms
alternated prompt by prompt, the order flipped every pass. The remembering arm keeps one state
folder for the whole script (a user's runs, one prompt after the other); a priming run on
"Why is the sky blue?" first. Prints one line a run and, per prompt, the median speedup of each
arm and their ratio; writes every run's JSON to OUT.

    .venv/bin/python docs/bench/remember-2026-11-29/prompts.py OUT [PASSES] [-- RUN ARGS]
    (RUN ARGS default: the default pair; e.g. -- --target embedded:smollm2:Q8_0)
"""
import json, os, statistics, subprocess, sys
from pathlib import Path

root = Path(__file__).resolve().parents[3]
out = Path(sys.argv[1]).resolve(); out.mkdir(parents=True, exist_ok=True)
passes = int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2] != "--" else 2
extra = sys.argv[sys.argv.index("--") + 1:] if "--" in sys.argv else []
prompts = []
for name in ("bench", "heldout"):
    seen = set()
    for line in (root / "ggufspec/prompts" / f"{name}.jsonl").read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        r = json.loads(line)
        if r["category"] not in seen and len(r["messages"]) == 1:
            seen.add(r["category"]); prompts.append((r["id"], r["messages"][0]["content"]))
env = dict(os.environ, GGUFSPEC_STATE=str(out / "state"))


def run(text: str, arm: str, path: Path) -> dict:
    flag = "--no-remember" if arm == "fresh" else "--remember"
    proc = subprocess.run([str(root / ".venv/bin/ggufspec"), "run", *extra, "--chat", "-p", text, "-n", "128",
                           "--temp", "0", "--compare", "--repeats", "1", "--json", flag],
                          capture_output=True, text=True, env=env, cwd=root, check=True)
    path.write_text(proc.stdout)
    return json.loads(proc.stdout)


run("Why is the sky blue?", "remember", out / "prime.json")
got: dict[tuple[str, str], list[float]] = {}
for p in range(1, passes + 1):
    for i, (pid, text) in enumerate(prompts):
        arms = ("fresh", "remember") if (i + p) % 2 else ("remember", "fresh")
        for arm in arms:
            d = run(text, arm, out / f"{arm}_{p}_{pid}.json")
            got.setdefault((pid, arm), []).append(d["speedup"])
            print(p, pid, arm, d["speedup"], d["stats"]["drafter_rounds"], "knew", d["remembered_rounds"], flush=True)
ratios = []
print("\n| prompt | fresh | remembering | ratio |\n|---|---:|---:|---:|")
for pid, _ in prompts:
    f, r = statistics.median(got[(pid, "fresh")]), statistics.median(got[(pid, "remember")])
    ratios.append(r / f)
    print(f"| {pid} | {f:.3f} | {r:.3f} | {r / f:.3f} |")
print(f"\nmedian ratio {statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f}) over {len(ratios)} prompts")
