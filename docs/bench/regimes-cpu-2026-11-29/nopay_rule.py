"""A no-pay row, three arms in one process, alternated (rotating order): the target alone, the
default with a rule on, and with it off; each controller kept across its generations (as run
--compare's pair). Usage: nopay_rule.py TARGET PROMPT PAIRS SETTING"""
import sys, statistics as st, math
from ggufspec.loop.control import ControlSettings, DraftController
from ggufspec.loop.engine import generate
from ggufspec.loop.sampling import SamplingSettings
from ggufspec.runtime import load_pair
target, prompt, n, key = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
pair = load_pair(target=f"embedded:smollm2:{target}", draft=["embedded:smollm2:Q4_1", "lookup"])
toks = pair.encode(messages=[{"role": "user", "content": prompt}])
ctls = {"on": DraftController(), "off": DraftController(settings=ControlSettings(**{key: type(getattr(ControlSettings(), key))(0) if not isinstance(getattr(ControlSettings(), key), bool) else False}))}
if key == "calibrate":
    ctls["off"] = DraftController(settings=ControlSettings(calibrate=1))
def one(arm):
    g = generate(target=pair.target_ctx, prompt=toks, drafters=list(pair.drafters) if arm != "alone" else [],
                 max_tokens=128, cache_prompt=False, sampling=SamplingSettings(temperature=0.0), controller=ctls.get(arm))
    g.run(); return g.stats.generated_tokens / g.stats.gen_s
for arm in ("alone", "on", "off"):
    one(arm)  # warm
res = {a: [] for a in ("alone", "on", "off")}
orders = [("alone", "on", "off"), ("off", "alone", "on"), ("on", "off", "alone")]
for i in range(n):
    for a in orders[i % 3]:
        res[a].append(one(a))
for a in ("on", "off"):
    r = [x / y for x, y in zip(res[a], res["alone"])]
    print(a, "/ alone median", round(st.median(r), 4), "min-max", round(min(r), 3), round(max(r), 3))
r = [math.log(x / y) for x, y in zip(res["on"], res["off"])]
m, se = st.mean(r), st.stdev(r) / math.sqrt(len(r))
print("on / off", round(math.exp(m), 4), "[", round(math.exp(m - 1.69 * se), 4), "-", round(math.exp(m + 1.69 * se), 4), "]")
