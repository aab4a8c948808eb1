cd /tmp/wt
for i in 1 2 3 4; do
  GGUFSPEC_PURE=1 .venv/bin/python scripts/overhead.py --repeats 3 > /tmp/ab2/pure_$i.md 2>&1
  .venv/bin/python scripts/overhead.py --repeats 3 > /tmp/ab2/compiled_$i.md 2>&1
done
echo done
