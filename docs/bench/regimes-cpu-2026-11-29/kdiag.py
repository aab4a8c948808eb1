"""Default pair: why K = 6? Each model round of the default (fresh controller, 4 tuned prompts x 2):
the K chosen, the modelled rate E(K)/T(K) at K = 4..8 (relative to the best), the curve pi(1..8),
the costs (a, v0, v, f, b in a), and what the round delivered."""
import os, sys, collections
os.environ["GGUFSPEC_PURE"] = "1"  # it replaces the controller's methods: the source, not the compiled one
from ggufspec.bench.ours import prompt_tokens
from ggufspec.bench.prompts import load_prompts
from ggufspec.bench.regimes import parse_regimes
from ggufspec.loop.control import DraftController
from ggufspec.loop.engine import generate
from ggufspec.loop.sampling import SamplingSettings
from ggufspec.runtime import load_pair
from ggufspec.settings import ContextSettings, PairSettings
reg = parse_regimes("default")[0]
pair = load_pair(target=reg.target, draft=list(reg.drafts), settings=PairSettings(context=ContextSettings(n_ctx=1024)))
prompts = load_prompts(prompt_set="tuned")[:4]
ctl = DraftController()
model = [d.name for d in pair.drafters if d.name != "lookup"][0]
log = []
orig = DraftController.observe
def observe(self, r):
    c = r.choice
    if c is not None and c.drafter == model:
        a = self.base_s(); v0, v = self._verify_line(a)
        costs = self.round_costs(model, 8); pis = self.prefix_accept(model, 8)
        e, rates = 1.0, {}
        for k in range(1, 9):
            e += pis[k - 1]; rates[k] = e / costs[k]
        best = max(rates.values())
        b = self.per_token_s(model); f = self._first_s(model, b)
        log.append((c.draft_len, r.drafted, r.accepted, {k: round(rates[k] / best, 3) for k in (4, 5, 6, 7, 8)},
                    [round(p, 2) for p in pis], f"a={a*1e3:.1f}ms v0={v0/a:.2f} v={v/a:.2f} f={f/a:.2f} b={b/a:.2f}"))
    return orig(self, r)
DraftController.observe = observe
for rep in range(2):
    for p in prompts:
        toks = prompt_tokens(pair, p)
        g = generate(target=pair.target_ctx, prompt=toks, drafters=list(pair.drafters), max_tokens=128, cache_prompt=False,
                     sampling=SamplingSettings(temperature=0.0), controller=ctl).run()
        ks = collections.Counter(x[0] for x in log)
        print(p.id, rep, f"{g.stats.generated_tokens / g.stats.gen_s:.1f} tok/s", dict(g.stats.k_hist), flush=True)
        for x in log[-6:]:
            print("   ", x)
        log.clear()
