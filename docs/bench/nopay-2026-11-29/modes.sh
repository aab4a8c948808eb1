#!/bin/bash
# Issue 40's four no-pay rows (run --compare --repeats 9, 128 tokens, greedy), each row in both
# --compare modes, lockstep (the default) and --sequential (ABBA), alternated row by row, the
# order flipped every pass; two passes. One JSON per run in OUT, one line per run on stdout.
#     docs/bench/nopay-2026-11-29/modes.sh OUT [REPEATS]
set -euo pipefail
root="$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
mkdir -p "$1"; out="$(cd "$1" && pwd)"; repeats="${2:-9}"
cd "$root"
for pass in 1 2; do
  if [ $pass = 1 ]; then modes="lockstep sequential"; else modes="sequential lockstep"; fi
  for t in Q8_0 Q4_1; do
    for p in "Why is the sky blue?" "Write a Python function that checks whether a number is prime."; do
      for m in $modes; do
        f="$out/nopay_${m}_${pass}_${t}_${#p}.json"
        extra=(); [ $m = sequential ] && extra=(--sequential)
        .venv/bin/ggufspec run --target "embedded:smollm2:$t" --draft embedded:smollm2:Q4_1 --draft lookup --chat \
          -p "$p" -n 128 --temp 0 --compare --repeats "$repeats" --json "${extra[@]}" > "$f"
        .venv/bin/python -c "import json,sys; c=json.load(open(sys.argv[1]))['compare']; print(sys.argv[2], c['median'], c['min'], c['max'], c['lockstep'])" \
          "$f" "$m pass $pass $t | $p"
      done
    done
  done
done
