#!/bin/bash
# the issue's four no-pay rows, two passes (run from the repository root); writes /tmp/ov/nopay-PASS-TARGET-PROMPT.json
for pass in 1 2; do
for t in Q8_0 Q4_1; do
for p in "Why is the sky blue?" "Write a Python function that checks whether a number is prime."; do
  out=$(.venv/bin/ggufspec run --target embedded:smollm2:$t --draft embedded:smollm2:Q4_1 --draft lookup --chat -p "$p" -n 128 --temp 0 --compare --repeats 9 --json 2>/dev/null)
  echo "$out" > "/tmp/ov/nopay-$pass-$t-${p:0:3}.json"
  echo "$pass $t ${p:0:12}: $(echo "$out" | python3 -c '
import json,sys
d=json.load(sys.stdin)
c=d.get("compare") or d
def find(x, k):
    if isinstance(x, dict):
        for kk, v in x.items():
            if kk==k: return v
            r=find(v,k)
            if r is not None: return r
    if isinstance(x, list):
        for v in x:
            r=find(v,k)
            if r is not None: return r
print("speedup", find(d,"speedup"), "min", find(d,"speedup_min"), "max", find(d,"speedup_max"))
')"
done; done; done
