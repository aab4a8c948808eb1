"""A fresh controller on the as-1b regime, "Why is the sky blue?" as `run --compare` meets it (a 16-token warm-up, then 128 tokens twice): each priced round's estimates where the draft model has a backlog, each model round. GGUFSPEC_PURE=1 .venv/bin/python docs/bench/regimes-cpu-2026-12-07d/as1b_cold_sky.py"""
import sys
from ggufspec.runtime import load_pair
from ggufspec.settings import PairSettings, ContextSettings
from ggufspec.loop.control import DraftController
from ggufspec.loop.catchup import CatchUp
from ggufspec.bench.prompts import load_prompt_sets, limit_per_set
pair = load_pair(target="embedded:smollm2-as-1b:Q8_0", draft=["embedded:smollm2:Q4_1", "lookup"],
                 settings=PairSettings(context=ContextSettings(n_ctx=1024)))
prompts = limit_per_set(load_prompt_sets("tuned"), 8)
ctl = DraftController(settings=pair.controller.settings)
M = "SmolLM2-135M-Instruct.Q4_1"
orig_pb = CatchUp._price_backlogs
def pb(self, drafters, options, rates, pooled, prior, horizon):
    before = dict(options); r0 = dict(rates)
    orig_pb(self, drafters, options, rates, pooled, prior, horizon)
    bl = {c.name[:6]: c.backlog for c in drafters if not c.free}
    if M in before:
        costs = self.round_costs(M, 8)
        print(f"  rd {self.round} backlog={bl} kept={M in options} rates={ {k[:6]: round(v,1) for k,v in r0.items()} } pooled={round(pooled.get(M,0),1)} prior={round(prior.get(M,0),1)} unsettled={self._unsettled(M)} u={1e3*(self.catchup_s(M) or 0):.1f}ms a={1e3*self.base_s():.1f} T={[round(c*1e3) for c in costs]} pi={[round(p,2) for p in self.prefix_accept(M, 8)]} horizon={horizon}", file=sys.stderr)
CatchUp._price_backlogs = pb
orig_obs = DraftController.observe
def observe(self, r):
    orig_obs(self, r)
    if r.choice is not None and (r.choice.drafter is not None or r.choice.retry):
        print(f"  obs {self.round:4d} {str(r.choice.drafter)[:8]:8s} K={r.drafted} acc={r.accepted} retry={r.choice.retry} round={r.round_s*1e3:6.1f} verify={r.verify_s*1e3:6.1f} draft={r.draft_s*1e3:6.1f} catchup={r.catchup_tokens}/{r.catchup_s*1e3:.1f}", file=sys.stderr)
DraftController.observe = observe
toks = pair.encode(messages=[{"role": "user", "content": "Why is the sky blue?"}])
for i, n in enumerate((16, 128, 128)):
    print("=== gen", i, n, file=sys.stderr)
    g = pair.generate(prompt_tokens=toks, max_tokens=n, cache_prompt=False, controller=ctl).run()
    print("gen", i, round(g.stats.gen_tps, 1), dict(g.stats.drafter_rounds), dict(g.stats.k_hist), file=sys.stderr)
