#!/bin/bash
# Issue 40's four no-pay rows, two passes, --repeats 9: one JSON per row in OUT (default: this
# folder; nopay_<pass>_<target>_<prompt length>.json), and each row's median speedup on stdout.
#     docs/bench/nopay-2026-11-28/run.sh [OUT [EXTRA RUN FLAGS...]]    (e.g. OUT --sequential)
set -euo pipefail
root="$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
out="$(cd "${1:-$(dirname "$0")}" && pwd)"
shift || true
cd "$root"
for pass in 1 2; do
  for t in Q8_0 Q4_1; do
    for p in "Why is the sky blue?" "Write a Python function that checks whether a number is prime."; do
      f="$out/nopay_${pass}_${t}_${#p}.json"
      .venv/bin/ggufspec run --target "embedded:smollm2:$t" --draft embedded:smollm2:Q4_1 --draft lookup --chat \
        -p "$p" -n 128 --temp 0 --compare --repeats 9 --json "$@" > "$f"
      .venv/bin/python -c "import json,sys; c=json.load(open(sys.argv[1]))['compare']; print(sys.argv[2], c['median'], c['min'], c['max'])" \
        "$f" "pass $pass $t | $p"
    done
  done
done
