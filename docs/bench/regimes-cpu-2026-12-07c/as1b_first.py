"""A fresh controller's first generations on the real as-1b regime (the grid's first tuned prompts in order): each drafting
or retry round's choice and costs. GGUFSPEC_PURE=1 .venv/bin/python docs/bench/regimes-cpu-2026-12-07c/as1b_first.py 3"""
import sys, collections
from ggufspec.runtime import load_pair
from ggufspec.settings import PairSettings, ContextSettings
from ggufspec.loop.control import DraftController
from ggufspec.bench.prompts import load_prompt_sets, limit_per_set
pair = load_pair(target="embedded:smollm2-as-1b:Q8_0", draft=["embedded:smollm2:Q4_1", "lookup"],
                 settings=PairSettings(context=ContextSettings(n_ctx=1024)))
prompts = limit_per_set(load_prompt_sets("tuned"), 8)
ctl = DraftController(settings=pair.controller.settings)
orig_choose, orig_obs = DraftController.choose, DraftController.observe
log = []
def choose(self, **kw):
    c = orig_choose(self, **kw)
    log.append(c)
    return c
def observe(self, r):
    orig_obs(self, r)
    if r.choice is not None and (r.choice.drafter is not None or r.choice.retry):
        m = self._drafters.get("SmolLM2-135M-Instruct.Q4_1")
        print(f"  rd {self.round:4d} {str(r.choice.drafter)[:8]:8s} K={r.drafted} acc={r.accepted} retry={r.choice.retry} round={r.round_s*1e3:6.1f} verify={r.verify_s*1e3:6.1f} draft={r.draft_s*1e3:6.1f} catchup={r.catchup_tokens}/{r.catchup_s*1e3:.1f} "
              f"a={(self.base_s() or 0)*1e3:.1f} b={[round(x[1]*1e3,1) for x in m.per_token._items] if m else None} hopeless={sorted(self._hopeless_now)}", file=sys.stderr)
DraftController.choose, DraftController.observe = choose, observe
for i, p in enumerate(prompts[:int(sys.argv[1])]):
    toks = pair.encode(messages=list(p.messages))
    g = pair.generate(prompt_tokens=toks, max_tokens=128, cache_prompt=False, controller=ctl).run()
    print("gen", i, p.id, round(g.stats.gen_tps, 1), dict(g.stats.drafter_rounds), dict(g.stats.k_hist), file=sys.stderr)
