#!/bin/bash
# Issue 40's four no-pay rows with the issue's own command (run --compare --repeats 3, 128 tokens,
# greedy, the default drafters named), each row run fresh (--no-remember: what every run was before
# ggufspec.remember, and what the first run of a pair on a machine still is) and remembering (the
# state of the earlier runs of that row in a state folder of this script's own), alternated, the
# order flipped every pass. One priming run a row first (its state only). One JSON a run in OUT,
# one line a run on stdout: arm, median, the three repeats, rounds the controller knew before.
# TARGETS: the embedded target types (default "Q8_0 Q4_1"; "F32": the default pair's target).
#     docs/bench/remember-2026-11-29/nopay.sh OUT [PASSES]
set -euo pipefail
root="$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
mkdir -p "$1"; out="$(cd "$1" && pwd)"
export GGUFSPEC_STATE="$out/state"
cd "$root"
prompts=("Why is the sky blue?" "Write a Python function that checks whether a number is prime.")
row() {  # row TARGET PROMPT ARM FILE
  local flag=--remember; [ "$3" = fresh ] && flag=--no-remember
  .venv/bin/ggufspec run --target "embedded:smollm2:$1" --draft embedded:smollm2:Q4_1 --draft lookup --chat \
    -p "$2" -n 128 --temp 0 --compare --repeats 3 --json "$flag" > "$4"
}
for t in ${TARGETS:-Q8_0 Q4_1}; do for p in "${prompts[@]}"; do row "$t" "$p" remember "$out/prime_${t}_${#p}.json"; done; done
for pass in $(seq 1 "${2:-3}"); do
  arms=(fresh remember); [ $((pass % 2)) = 0 ] && arms=(remember fresh)
  for t in ${TARGETS:-Q8_0 Q4_1}; do
    for p in "${prompts[@]}"; do
      for arm in "${arms[@]}"; do
        f="$out/${arm}_${pass}_${t}_${#p}.json"
        row "$t" "$p" "$arm" "$f"
        .venv/bin/python -c "import json,sys; d=json.load(open(sys.argv[1])); c=d['compare']; print(sys.argv[2], c['median'], c['speedups'], 'knew', d['remembered_rounds'])" \
          "$f" "pass $pass $t ${#p} $arm"
      done
    done
  done
done
