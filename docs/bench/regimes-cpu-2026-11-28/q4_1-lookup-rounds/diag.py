import sys, statistics as st
sys.path.insert(0, "/work/main")
from ggufspec.runtime import load_pair
from ggufspec.settings import ContextSettings, PairSettings
from ggufspec.bench.prompts import load_prompts
from ggufspec.bench.ours import prompt_tokens
from ggufspec.loop.engine import generate
from ggufspec.loop.control import DraftController
from ggufspec.loop.sampling import SamplingSettings
log = []
class Ctl(DraftController):
    def choose(self, **kw):
        ch = super().choose(**kw)
        if ch.drafter is not None and ch.drafter.startswith("lookup"):
            a = self.base_s()
            v0, v = self._verify_line(a)
            self._pend = dict(K=ch.draft_len, a=a * 1e3, v0a=v0 / a, va=v / a, rates={k: round(r * a, 2) for k, r in self._rates.items()})
        else:
            self._pend = None
        return ch
    def observe(self, r):
        if getattr(self, "_pend", None) and r.choice is not None and r.choice.drafter and r.choice.drafter.startswith("lookup"):
            p = self._pend; a = p["a"] / 1e3
            log.append(dict(p, drafted=r.drafted, accepted=r.accepted, emitted=r.emitted, round_a=r.round_s / a, gain=r.emitted / (r.round_s / a)))
        super().observe(r)
pair = load_pair(target="embedded:smollm2:Q4_1", draft=["embedded:smollm2:Q4_1", "lookup"], settings=PairSettings(context=ContextSettings(n_ctx=1024)))
ctl = Ctl()
prompts = load_prompts(prompt_set="tuned")[:4]
for rep in range(2):
    for p in prompts:
        g = generate(target=pair.target_ctx, prompt=prompt_tokens(pair, p), drafters=list(pair.drafters), max_tokens=128,
                     controller=ctl, cache_prompt=False, sampling=SamplingSettings(temperature=0.0)).run()
        print(p.id, rep, g.stats.drafter_rounds, f"{g.stats.gen_tps:.1f} tok/s", flush=True)
for e in log: print(e)
if log:
    print("lookup rounds", len(log), "mean tokens per a-unit", st.mean(e["gain"] for e in log), "(1.0 = the target alone)")
