#!/bin/bash
# A/B of our Python a round: the installed build of /work/main (old) against /tmp/wt built in place (new), alternated
out=$1; n=${2:-4}; mkdir -p $out
for i in $(seq 1 $n); do
  if [ $((i % 2)) = 1 ]; then order="old new"; else order="new old"; fi
  for arm in $order; do
    dir=/work/main; [ $arm = new ] && dir=/tmp/wt
    (cd $dir && /work/main/.venv/bin/python scripts/overhead.py > $out/${arm}_$i.md 2>&1)
  done
done
grep -H "^| default | pays\|^| default | h200\|^| K4\|^| lookup" $out/*.md
