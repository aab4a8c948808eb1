#!/usr/bin/env bash
# The replay tables of README.md, from the repository root (each ~20-60 s on the 2-core EPYC).
#   bash docs/bench/coldstart-replay-2026-11-29/replay.sh > OUT.txt
set -euo pipefail
D=docs/bench/coldstart-replay-2026-11-29
PY=${PY:-.venv/bin/python}
RIVALS="K2 K4 K8 always"
echo "## smollm2-as-1b, each seed's cold start on another of 12 prompts (4 a set, 2 repeats: the grid's)"
for n in 0 0.1 0.15; do
  echo "### noise $n"
  $PY scripts/coldstart_sim.py $D/traces-as1b-own-first12.json --profile epyc-as-1b --prompts 4 --seeds 120 --noise $n \
      --policies default $RIVALS
done
echo "## the other CPU regimes (the default pair's traces), noise 0.1 and 0.15"
for n in 0.1 0.15; do
  echo "### default pair (epyc-first micro costs), noise $n"
  $PY scripts/coldstart_sim.py docs/bench/traces-default-pair.json --bench docs/bench/epyc-first/bench.json --prompts 4 \
      --seeds 120 --noise $n --policies default $RIVALS | tail -4
  for p in epyc-q8_0 epyc-q4_1; do
    echo "### $p, noise $n"
    $PY scripts/coldstart_sim.py docs/bench/traces-default-pair.json --profile $p --prompts 4 --seeds 120 --noise $n \
        --policies default $RIVALS | tail -4
  done
done
echo "## as-1b: settings of the controller, one at a time (noise 0.1, 120 seeds)"
for p in default@prior_rounds=4 default@prompt_prior_rounds=16 default@confirm=6 default@few_runs=0 default@opening=5 \
         default@retry=16 default@hold=0 default@decay=0.9 default@accept_decay=0.99 default@close=0.8; do
  echo "### $p"
  $PY scripts/coldstart_sim.py $D/traces-as1b-own-first12.json --profile epyc-as-1b --prompts 4 --seeds 120 --noise 0.1 \
      --policies $p $RIVALS | grep -E '^\| (default|tuned|heldout)'
done
