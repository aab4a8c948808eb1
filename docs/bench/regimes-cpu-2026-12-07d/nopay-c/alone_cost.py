import sys, time, statistics as st
from ggufspec import load_pair, SamplingSettings
from ggufspec.loop.control import DraftController
greedy = SamplingSettings(temperature=0.0)
prompt = "Write a Python function that checks whether a number is prime."
pair = load_pair(target="embedded:smollm2:Q4_1", draft=["embedded:smollm2:Q4_1", "lookup"])
msgs = [{"role": "user", "content": prompt}]
toks = pair.encode(messages=msgs)
ctl = DraftController(settings=pair.controller.settings)
# warm & teach the controller that drafting does not pay
for _ in range(3):
    pair.generate(prompt_tokens=toks, max_tokens=128, cache_prompt=False, controller=ctl).run()
rows = {"pair": [], "alone": []}
for i in range(6):
    for side in (("pair", "alone") if i % 2 == 0 else ("alone", "pair")):
        if side == "pair":
            g = pair.generate(prompt_tokens=toks, max_tokens=128, cache_prompt=False, controller=ctl).run()
        else:
            g = pair.generate(prompt_tokens=toks, max_tokens=128, cache_prompt=False, drafters=()).run()
        s = g.stats
        rows[side].append((s.gen_tps, s.gen_s, s.verify_s, s.draft_s, s.overhead_s, s.rounds, dict(s.drafter_rounds)))
for side, rs in rows.items():
    print(side, "tps %.1f" % st.median(r[0] for r in rs), "gen_s %.4f verify_s %.4f draft_s %.4f overhead_s %.4f rounds %d" % tuple(st.median(r[i] for r in rs) for i in (1, 2, 3, 4, 5)), rs[-1][6])
