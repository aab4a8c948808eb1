"""Q4_1 regime: where the default loses to the target alone, per round kind (lockstep, 2 lanes)."""
import sys, time, statistics as st, collections
sys.path.insert(0, "scripts")
from ab_lanes import Lanes
from ggufspec.bench.ours import prompt_tokens
from ggufspec.bench.prompts import load_prompts
from ggufspec.bench.regimes import parse_regimes
from ggufspec.bench.lockstep import interleave
from ggufspec.loop.control import DraftController
from ggufspec.runtime import load_pair
from ggufspec.settings import ContextSettings, PairSettings

class Timed:
    def __init__(self, g): self.g, self.steps = g, []
    def __iter__(self): return self
    def __next__(self):
        t = time.perf_counter(); s = next(self.g); w = self.g.wait; w(); self.steps.append((s, time.perf_counter() - t)); return s
reg = parse_regimes(sys.argv[1] if len(sys.argv) > 1 else "q4_1")[0]
passes = int(sys.argv[2]) if len(sys.argv) > 2 else 3
pair = load_pair(target=reg.target, draft=list(reg.drafts), settings=PairSettings(context=ContextSettings(n_ctx=1024)))
prompts = load_prompts(prompt_set="tuned")[:4]
toks = {p.id: prompt_tokens(pair, p) for p in prompts}
arms = ["alone", "default"]
lanes = Lanes(pair, arms)
def start(arm, pid, ctl, lane):
    return lanes.generate(lane, toks[pid], drafters=lanes.names if arm == "default" else (), controller=ctl)
lanes.warm(lambda arm, lane: start(arm, prompts[0].id, DraftController(), lane))
agg = collections.defaultdict(list)
for r in range(passes):
    ctl = DraftController()
    for j, p in enumerate(prompts):
        n = len(arms); blk = r * len(prompts) + j
        gens = {a: Timed(start(a, p.id, ctl if a == "default" else None, (i + blk) % n)) for i, a in enumerate(arms)}
        interleave(list(gens.values()))
        # alone: each step a round of one token
        al = [dt for s, dt in gens["alone"].steps[1:]]
        agg["alone_round"] += al
        rounds = collections.defaultdict(lambda: [0, 0.0])
        for s, dt in gens["default"].steps[1:]:
            key = ("none" if s.drafted == 0 else (s.drafter or "?") + f"@{s.drafted}")
            if s.drafted == 0 or s.source.name != "TARGET" or True:
                pass
            agg[("step", "none" if s.drafted == 0 else "draft")].append(dt)
        tot_al = sum(al); tot_de = sum(dt for _, dt in gens["default"].steps[1:])
        nd = len(gens["default"].steps) - 1
        none_steps = [dt for s, dt in gens["default"].steps[1:] if s.drafted == 0]
        draft_steps = [(s, dt) for s, dt in gens["default"].steps[1:] if s.drafted > 0]
        print(f"pass {r} {p.id}: alone {tot_al*1e3:.0f} ms {len(al)} tok ({st.median(al)*1e3:.2f} med); default {tot_de*1e3:.0f} ms {nd} tok; "
              f"none steps {len(none_steps)} sum {sum(none_steps)*1e3:.0f} med {st.median(none_steps)*1e3:.2f}; "
              f"draft-round steps {len(draft_steps)} sum {sum(dt for _, dt in draft_steps)*1e3:.0f}", flush=True)
        rs = {}
        for s, dt in draft_steps:
            e = rs.setdefault(s.round, [s.drafter, s.drafted, 0, 0.0]); e[2] += 1; e[3] += dt
        print("   ", "  ".join(f"{d}/K{k}:{n}tok {t*1e3:.0f}ms" for d, k, n, t in rs.values()))
