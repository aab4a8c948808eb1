"""How often a fresh controller's first round of the target alone is slow: 4 lanes in lockstep
(alone, K8, default, default) as control_ab, fresh controllers per pass; the first two target-alone
rounds' seconds of each fresh controller's first generation."""
import os, sys, collections
os.environ["GGUFSPEC_PURE"] = "1"  # it replaces the controller's methods: the source, not the compiled one
sys.path.insert(0, "scripts")
from ab_lanes import Lanes
from ggufspec.bench.ours import prompt_tokens
from ggufspec.bench.prompts import load_prompts
from ggufspec.bench.regimes import parse_regimes
from ggufspec.loop.control import ControlSettings, DraftController
from ggufspec.loop.speculation import DraftLengthSettings, SpeculativeSettings
from ggufspec.runtime import load_pair
from ggufspec.settings import ContextSettings, PairSettings
reg = parse_regimes(sys.argv[1])[0]; passes = int(sys.argv[2]); pset = sys.argv[3] if len(sys.argv) > 3 else "tuned"
log = collections.defaultdict(list)
orig = DraftController.observe
def observe(self, r):
    if getattr(self, "_tag", None) is not None and len(log[self._tag]) < 4:
        log[self._tag].append((r.drafted, r.round_s))
    return orig(self, r)
DraftController.observe = observe
pair = load_pair(target=reg.target, draft=list(reg.drafts), settings=PairSettings(context=ContextSettings(n_ctx=1024)))
prompts = load_prompts(prompt_set=pset)[:4]
toks = {p.id: prompt_tokens(pair, p) for p in prompts}
every = [d.name for d in pair.drafters]; model = [n for n in every if n != "lookup"]
arms = {"alone": ((), None), "K8": (model, SpeculativeSettings(length=DraftLengthSettings(fixed=True))), "d1": (every, None), "d2": (every, None)}
lanes = Lanes(pair, list(arms))
def start(arm, pid, ctl, lane):
    return lanes.generate(lane, toks[pid], drafters=arms[arm][0], speculative=arms[arm][1], controller=ctl)
lanes.warm(lambda arm, lane: start(arm, prompts[0].id, DraftController(), lane))
for r in range(passes):
    ctls = {a: None for a in arms}
    for a in ("d1", "d2"):
        ctls[a] = DraftController(settings=ControlSettings(calibrate=1)); ctls[a]._tag = (r, a)
    for j, p in enumerate(prompts):
        lanes.block(r * len(prompts) + j, lambda arm, lane: start(arm, p.id, ctls[arm], lane))
    for a in ("d1", "d2"):
        print(r, a, [(k, round(s * 1e3, 2)) for k, s in log[(r, a)]], flush=True)
