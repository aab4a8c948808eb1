#!/bin/bash
# Issue 40's four no-pay rows with the issue's own command (run --compare --repeats 3, 128 tokens,
# greedy, the default drafters named), now in lockstep; PASSES passes (default 3). One JSON a run
# in OUT, one line a run on stdout: median, min, max.
#     docs/bench/nopay-2026-11-29/issue.sh OUT [PASSES]
set -euo pipefail
root="$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
mkdir -p "$1"; out="$(cd "$1" && pwd)"
cd "$root"
for pass in $(seq 1 "${2:-3}"); do
  for t in Q8_0 Q4_1; do
    for p in "Why is the sky blue?" "Write a Python function that checks whether a number is prime."; do
      f="$out/issue_${pass}_${t}_${#p}.json"
      .venv/bin/ggufspec run --target "embedded:smollm2:$t" --draft embedded:smollm2:Q4_1 --draft lookup --chat \
        -p "$p" -n 128 --temp 0 --compare --repeats 3 --json > "$f"
      .venv/bin/python -c "import json,sys; d=json.load(open(sys.argv[1])); c=d['compare']; s=d['stats']; print(sys.argv[2], c['median'], c['min'], c['max'], 'drafted rounds', s['rounds'] - s['k_hist'].get('0', 0), 'of', s['rounds'])" \
        "$f" "pass $pass $t | $p"
    done
  done
done
