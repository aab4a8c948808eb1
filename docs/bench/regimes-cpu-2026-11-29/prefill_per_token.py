"""Per regime: the target's prompt prefill seconds a token over a (rule prefill_slope's p / a)."""
import sys
from ggufspec.bench.regimes import parse_regimes
from ggufspec.bench.ours import prompt_tokens
from ggufspec.bench.prompts import load_prompts
from ggufspec.loop.control import DraftController
from ggufspec.loop.engine import generate
from ggufspec.loop.sampling import SamplingSettings
from ggufspec.runtime import load_pair
from ggufspec.settings import ContextSettings, PairSettings
prompts = load_prompts(prompt_set="tuned")[:3]
for name in sys.argv[1:]:
    reg = parse_regimes(name)[0]
    pair = load_pair(target=reg.target, draft=list(reg.drafts), settings=PairSettings(context=ContextSettings(n_ctx=1024)))
    ctl = DraftController()
    for p in prompts:
        toks = prompt_tokens(pair, p)
        g = generate(target=pair.target_ctx, prompt=toks, drafters=list(pair.drafters), max_tokens=64, cache_prompt=False,
                     sampling=SamplingSettings(temperature=0.0), controller=ctl)
        g.run()
        a = ctl.base_s(); pr = ctl._prefill_row.median(ctl.round, 1 << 30)
        print(name, p.id, len(toks), f"a={a*1e3:.2f}ms p={pr*1e3:.2f}ms p/a={pr/a:.2f} v={ctl._verify_line(a)[1]/a:.2f}a", flush=True)
