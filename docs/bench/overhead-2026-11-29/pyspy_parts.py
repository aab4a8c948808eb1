"""py-spy raw stacks of nopay_loop.py runs: each function's samples (inclusive) among the samples of
our Python in a generation (not inside llama_decode), per 10,000 generation samples; a second file
beside it (the target alone)."""
import collections,re,sys
def agg(path):
    incl=collections.Counter(); py=0; gen=0
    for line in open(path):
        stack, _, cnt = line.rstrip().rpartition(' ')
        cnt=int(cnt); frames=stack.split(';')
        if not any('_steps' in f and 'engine.py' in f for f in frames): continue
        gen+=cnt
        if '_decode (ggufspec/llama/lib.py' in frames[-1]: continue
        py+=cnt
        seen=set()
        for f in frames:
            name=re.sub(r':\d+\)',')',f)
            if name not in seen: incl[name]+=cnt; seen.add(name)
    return incl,py,gen
a=agg(sys.argv[1]); b=agg(sys.argv[2]) if len(sys.argv)>2 else None
print('python samples',a[1],'of',a[2], (b[1],b[2]) if b else '')
keys=sorted(a[0], key=lambda k:-a[0][k])[:60]
for k in keys:
    # per-generation-sample normalized: share of generation samples
    x=a[0][k]/a[2]*1e4; y=(b[0].get(k,0)/b[2]*1e4) if b else 0
    print(f'{x:7.1f} {y:7.1f}  {k}')
