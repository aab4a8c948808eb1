"""A change of the draft controller's settings, A/B in lockstep on the real default pair.

Arms, on forks of the default pair (or --regime's target and drafters; each arm on the next fork
from prompt to prompt), warmed by one untimed generation, run step by step together on each prompt
(ggufspec.bench.lockstep): the target alone, fixed K = 8 (the draft model), the drafters under `ControlSettings(**OLD)` and
`DraftLengthSettings(**OLD)` ("old"; KEY names a field of either) and under NEW ("new"; the defaults
where not given), one controller per arm kept across prompts (`--fresh`: across one pass's
prompts, each pass starting both afresh). A prompt set (tuned unless told: decisions are made on
it only), 128 tokens, greedy.

The interval "per run" is over the (prompt, pass) ratios of one run, whose controllers each
follow their own path: it understates the spread from run to run (an effective A/A read 0.974
[0.949-0.999] on gemma). With `--fresh` the passes are independent, and the report adds each
pass's geometric mean and a t-interval over passes: the one to judge a rule by. A/A on gemma,
`--fresh`, 4 passes x 8 tuned prompts (`--old expire=1025`, a setting no arm's ~500 rounds can
reach): passes 0.986, 1.043, 0.968, 0.974; 0.992 [0.953-1.033].

    .venv/bin/python scripts/control_ab.py PASSES OUT.json --old check_rounds=0 [--new KEY=VAL ...]
        [--set tuned|heldout] [--categories chat,code] [--limit N] [--regime as-1b] [--ngl auto] [--fresh]
        # 2 passes of the tuned set on the default pair: ~15 min on the 2-core EPYC
    .venv/bin/python scripts/control_ab.py --report OUT.json

Measured:
- the lookup check (33bef66), `--old check_rounds=0`, 2 passes x 34 tuned prompts: new / old
  1.011 [1.002-1.020] per prompt (geometric mean, 90% bootstrap), chat 1.019 [1.007-1.031],
  summaries 0.994.
- the target alone's retries spaced by its margin (1e6b162), `--old spacing=1`, 2 passes x 34 tuned
  prompts: new / old 1.003 [0.995-1.010]; chat 1.009, maths 1.020, summaries 0.990, long 0.987.
- lookup's continuation of a model's drafts (f7bf779), `--old draft_extend=0`, one pass x 34 tuned
  prompts: chat 1.011 [0.995-1.027], maths 1.009, summaries 1.043 [0.996-1.094], code 0.993, long
  0.984 (the per-prompt spread of one pass is +-3-8%).
"""
import collections
import json
import math
import statistics as st
import sys
import time


def report(path: str) -> None:
    from ggufspec.bench.spread import geomean_interval

    d = json.load(open(path)); res, cat = d["res"], d["cat"]
    def sp(a, pid): return st.median(res[f"{a}|{pid}"]) / st.median(res[f"alone|{pid}"])
    for c in sorted(set(cat.values())) + ["all"]:
        pids = [p for p in cat if c == "all" or cat[p] == c]
        med = {a: st.median(sp(a, p) for p in pids) for a in ("K8", "old", "new")}
        xs = [n / o for p in pids for n, o in zip(res[f"new|{p}"], res[f"old|{p}"])]
        g, lo, hi = geomean_interval(xs)
        print(f"{c:10s} " + " ".join(f"{a}={v:.3f}" for a, v in med.items())
              + f"  old/K8 {med['old'] / med['K8']:.3f} new/K8 {med['new'] / med['K8']:.3f}"
              + f"  new/old per run {g:.3f} [{lo:.3f}-{hi:.3f}]")
        if d.get("fresh"):
            print(f"{'':10s} new/old per pass (fresh controllers: the unit of independence) " + per_pass(res, pids))


def per_pass(res: dict, pids: list[str]) -> str:
    """Each pass's geometric mean of new/old over `pids`, and their geometric mean with a 90%
    t-interval over passes: a pass starts both arms' controllers afresh, so passes are
    independent where the runs of one pass are not (each arm's controller follows its own path)."""
    n = len(res[f"new|{pids[0]}"])
    logs = [st.fmean(math.log(res[f"new|{p}"][r] / res[f"old|{p}"][r]) for p in pids) for r in range(n)]
    g = math.exp(st.fmean(logs))
    if n < 2:
        return f"{g:.3f}"
    from scipy.stats import t

    half = float(t.ppf(0.95, n - 1)) * st.stdev(logs) / math.sqrt(n)
    return (" ".join(f"{math.exp(x):.3f}" for x in logs)
            + f"; {g:.3f} [{math.exp(st.fmean(logs) - half):.3f}-{math.exp(st.fmean(logs) + half):.3f}]")


def _settings(pairs: list[str]):
    """(ControlSettings, DraftLengthSettings) from KEY=VAL pairs naming fields of either."""
    from ggufspec.loop.control import ControlSettings
    from ggufspec.loop.speculation import DraftLengthSettings

    fields = {f: (ControlSettings, type(getattr(ControlSettings(), f))) for f in ControlSettings.__dataclass_fields__}
    fields.update({f: (DraftLengthSettings, type(getattr(DraftLengthSettings(), f)))
                   for f in ("draft_max", "draft_extend", "draft_p_min")})
    kw: dict = {ControlSettings: {}, DraftLengthSettings: {}}
    for kv in pairs:
        key, _, val = kv.partition("=")
        if key not in fields or not val:
            sys.exit(f"error: {kv!r} is no field=value of ControlSettings or DraftLengthSettings; fields: {', '.join(fields)}")
        cls, typ = fields[key]
        kw[cls][key] = val.lower() in ("1", "true", "yes") if typ is bool else typ(val)
    return ControlSettings(**kw[ControlSettings]), DraftLengthSettings(**kw[DraftLengthSettings])


def main() -> None:
    from ab_lanes import Lanes, ab_parser, load_ab_pair

    ap = ab_parser(__doc__, report, ngl="0", ngl_help="layers of the target and the draft on a GPU: 0 (default: the "
                                                      "CPU), a count, 'all' or 'auto' (the planner's, as `run`)")
    if ap is None:
        return
    ap.add_argument("--old", nargs="*", default=[], metavar="KEY=VAL")
    ap.add_argument("--new", nargs="*", default=[], metavar="KEY=VAL")
    ap.add_argument("--categories", default=None)
    ap.add_argument("--fresh", action="store_true",
                    help="each pass starts old's and new's controllers afresh (passes independent: "
                         "the report adds an interval over passes)")
    args = ap.parse_args()
    (old, old_len), (new, new_len) = _settings(args.old), _settings(args.new)
    if (old, old_len) == (new, new_len):
        sys.exit("error: the two arms' settings are the same; give --old (and --new) KEY=VAL")

    from ggufspec.bench.ours import prompt_tokens
    from ggufspec.bench.prompts import load_prompts
    from ggufspec.bench.regimes import parse_regimes
    from ggufspec.loop.control import DraftController
    from ggufspec.loop.speculation import DraftLengthSettings, SpeculativeSettings

    cats = args.categories.split(",") if args.categories else None
    prompts = [p for p in load_prompts(prompt_set=args.set) if cats is None or p.category in cats][:args.limit]
    regime = parse_regimes(args.regime)[0]
    pair = load_ab_pair(regime.target, regime.drafts, ngl=args.ngl)
    every = [d.name for d in pair.drafters]
    model = [n for n in every if n != "lookup"]
    arms = {
        "alone": ((), SpeculativeSettings(), None),
        "K8": (model, SpeculativeSettings(length=DraftLengthSettings(fixed=True)), None),
        "old": (every, SpeculativeSettings(length=old_len), lambda: DraftController(settings=old)),
        "new": (every, SpeculativeSettings(length=new_len), lambda: DraftController(settings=new)),
    }
    toks = {p.id: prompt_tokens(pair, p) for p in prompts}
    lanes = Lanes(pair, list(arms))

    def start(arm, pid, ctl, lane):
        return lanes.generate(lane, toks[pid], drafters=arms[arm][0], speculative=arms[arm][1], controller=ctl)

    lanes.warm(lambda arm, lane: start(arm, prompts[0].id, DraftController(), lane))
    ctls = {arm: (make() if make else None) for arm, (_, _, make) in arms.items()}
    res = collections.defaultdict(list)
    for r in range(args.passes):
        if args.fresh and r:
            ctls = {arm: (make() if make else None) for arm, (_, _, make) in arms.items()}
        for j, p in enumerate(prompts):
            done = lanes.block(r * len(prompts) + j, lambda arm, lane: start(arm, p.id, ctls[arm], lane))
            for a, (g, rate) in zip(arms, done):
                res[f"{a}|{p.id}"].append(rate)
                if a in ("old", "new"):
                    res[f"{a}|{p.id}|stats"].append([g.stats.rounds, g.stats.checks, g.stats.checks_failed,
                                                     dict(g.stats.drafter_rounds), dict(g.stats.k_hist),
                                                     g.stats.extended, g.stats.extended_accepted])
        print(f"pass {r + 1}/{args.passes} {time.strftime('%H:%M:%S')}", flush=True)
        json.dump({"cat": {p.id: p.category for p in prompts}, "res": res, "regime": regime.name,
                   "old": args.old, "new": args.new, "set": args.set, "fresh": args.fresh}, open(args.out, "w"))
    report(args.out)


if __name__ == "__main__":
    main()
