#!/bin/bash
# The 1B cost stand-in's cold start (docs/bench/coldstart-replay-2026-11-29: a fresh controller ran
# the target alone in ~106 of ~113 rounds of the held-out prompt h-chat-01), fresh (--no-remember)
# and remembering, alternated, the order flipped every pass: `run --pair smollm2-as-1b --compare
# --repeats 2` on h-chat-01, 128 tokens, greedy. The remembering arm's state: one priming run on
# another prompt ("Why is the sky blue?"), then the earlier passes' runs. One JSON a run in OUT,
# one line a run: arm, median, the repeats, the first repeat's rounds by drafter, rounds known before.
#     docs/bench/remember-2026-11-29/as1b.sh OUT [PASSES]
set -euo pipefail
root="$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
mkdir -p "$1"; out="$(cd "$1" && pwd)"
export GGUFSPEC_STATE="$out/state"
cd "$root"
prompt="My neighbour's dog barks every morning at six. How can I raise it with them without starting a feud?"
run() {  # run PROMPT FLAG FILE
  .venv/bin/ggufspec run --pair smollm2-as-1b --chat -p "$1" -n 128 --temp 0 --compare --repeats 2 --json "$2" > "$3"
}
run "Why is the sky blue?" --remember "$out/prime.json"
for pass in $(seq 1 "${2:-3}"); do
  arms=(fresh remember); [ $((pass % 2)) = 0 ] && arms=(remember fresh)
  for arm in "${arms[@]}"; do
    flag=--remember; [ "$arm" = fresh ] && flag=--no-remember
    f="$out/${arm}_${pass}.json"
    run "$prompt" "$flag" "$f"
    .venv/bin/python -c "import json,sys; d=json.load(open(sys.argv[1])); c=d['compare']; print(sys.argv[2], c['median'], c['speedups'], d['stats']['drafter_rounds'], 'knew', d['remembered_rounds'])" \
      "$f" "pass $pass $arm"
  done
done
