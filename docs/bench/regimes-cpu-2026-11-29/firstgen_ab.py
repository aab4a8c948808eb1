"""First generation, fresh process per run: checkout A vs checkout B over the 12 firstgen prompts."""
import json, statistics as st, subprocess, sys
sys.path.insert(0, "/work/main/docs/bench/regimes-cpu-2026-11-29")
from firstgen_extend import prompts, ROOT
RUNW = str(ROOT / "docs/bench/regimes-cpu-2026-11-29/runw.py")
ARMS = {"A": sys.argv[2], "B": sys.argv[3]}
def run(root, prompt):
    cmd = [sys.executable, RUNW, root, "run", "--pair", "default", "--chat", "-p", prompt, "-n", "128", "--json"]
    s = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=root).stdout)["stats"]
    return {k: s.get(k) for k in ("gen_tps", "rounds", "drafted", "accepted", "k_hist")}
pairs = int(sys.argv[1])
for set_name, file in (("tuned", "bench.jsonl"), ("held-out", "heldout.jsonl")):
    ratios = []
    for i, (pid, text) in enumerate(prompts(file)):
        tps = {a: [] for a in ARMS}
        for j in range(pairs):
            order = list(ARMS) if (i + j) % 2 == 0 else list(reversed(ARMS))
            for arm in order:
                r = run(ARMS[arm], text); tps[arm].append(r["gen_tps"])
                print(f"{set_name} {pid} {arm}: {r}", flush=True)
        ratios.append(st.median(tps["A"]) / st.median(tps["B"]))
        print(f"{set_name} {pid} A/B {ratios[-1]:.3f}", flush=True)
    print(f"== {set_name}: median {st.median(ratios):.3f} ({', '.join(f'{x:.3f}' for x in ratios)})", flush=True)
