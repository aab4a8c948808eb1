#!/bin/bash
# Rule load_costs on first generations: control_ab.py with fresh controllers (each pass a fresh
# controller per arm, so every generation is a controller's first), one prompt at a time, the
# first prompt of each category of both sets, PASSES passes each, the rule off (old) against on.
#     docs/bench/load-costs-2026-12-07/first.sh REGIME PASSES OUT
set -euo pipefail
root="$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
mkdir -p "$3"; cd "$root"
for set in tuned heldout; do
  for cat in chat code summarise maths; do
    .venv/bin/python scripts/control_ab.py "$2" "$3/$1-$set-$cat.json" --old load_costs=False --regime "$1" \
      --set "$set" --categories "$cat" --limit 1 --fresh | tail -1 | sed "s/^/$1 $set $cat: /"
  done
done
