"""The lookup check's A/B, in lockstep (the record of 33bef66's measurement).

Arms, each on its own fork of the default pair, warmed by one untimed generation, run step by step
together on each prompt (ggufspec.bench.lockstep): the target alone, fixed K = 8 (Q4_1), the
default controller without the check (`ControlSettings(check_rounds=0)`, "old") and the default
("new"), one controller per arm kept across prompts. The tuned prompt set, 128 tokens, greedy.

    .venv/bin/python scripts/check_ab.py PASSES OUT.json [CATEGORY,...]   # 2 passes: ~15 min on the 2-core EPYC
    .venv/bin/python scripts/check_ab.py --report OUT.json

Measured (2 passes x 34 prompts): new / old 1.011 [1.002-1.020] per prompt (geometric mean, 90%
bootstrap), chat 1.019 [1.007-1.031], summaries 0.994.
"""
import collections, json, math, random, statistics as st, sys, time


def report(path: str) -> None:
    d = json.load(open(path)); res, cat = d["res"], d["cat"]
    def sp(a, pid): return st.median(res[f"{a}|{pid}"]) / st.median(res[f"alone|{pid}"])
    gm = lambda v: math.exp(st.mean(math.log(x) for x in v))
    for c in sorted(set(cat.values())) + ["all"]:
        pids = [p for p in cat if c == "all" or cat[p] == c]
        med = {a: st.median(sp(a, p) for p in pids) for a in ("K8", "old", "new")}
        xs = [n / o for p in pids for n, o in zip(res[f"new|{p}"], res[f"old|{p}"])]
        b = sorted(gm(random.Random(s).choices(xs, k=len(xs))) for s in range(2000))
        print(f"{c:10s} " + " ".join(f"{a}={v:.3f}" for a, v in med.items())
              + f"  old/K8 {med['old'] / med['K8']:.3f} new/K8 {med['new'] / med['K8']:.3f}"
              + f"  new/old per run {gm(xs):.3f} [{b[100]:.3f}-{b[1900]:.3f}]")


def main() -> None:
    if sys.argv[1:2] == ["--report"]:
        report(sys.argv[2])
        return
    from ggufspec.bench.lockstep import interleave
    from ggufspec.bench.prompts import load_prompts
    from ggufspec.control import ControlSettings, DraftController
    from ggufspec.drafters import DraftLengthSettings
    from ggufspec.engine import SpeculativeSettings, generate
    from ggufspec.runtime import load_pair
    from ggufspec.sampling import SamplingSettings
    from ggufspec.settings import ContextSettings, PairSettings

    passes, out = int(sys.argv[1]), sys.argv[2]
    cats = sys.argv[3].split(",") if len(sys.argv) > 3 else None
    prompts = [p for p in load_prompts(prompt_set="tuned") if cats is None or p.category in cats]
    pair = load_pair(settings=PairSettings(context=ContextSettings(n_ctx=1024), n_gpu_layers=0, n_gpu_layers_draft=0))
    model = [d for d in pair.drafters if d.name != "lookup"]
    arms = {
        "alone": ((), SpeculativeSettings(), None),
        "K8": (model, SpeculativeSettings(length=DraftLengthSettings(fixed=True)), None),
        "old": (list(pair.drafters), SpeculativeSettings(), lambda: DraftController(settings=ControlSettings(check_rounds=0))),
        "new": (list(pair.drafters), SpeculativeSettings(), DraftController),
    }
    toks = {p.id: pair.encode(messages=p.messages) for p in prompts}
    lanes = {arm: pair.fork(list(ds)) for arm, (ds, _, _) in arms.items()}

    def gen(arm, pid, ctl):
        target, copies = lanes[arm]
        return generate(target=target, prompt=toks[pid], drafters=copies, max_tokens=128, cache_prompt=False,
                        sampling=SamplingSettings(temperature=0.0), speculative=arms[arm][1], controller=ctl)

    for arm in arms:
        gen(arm, prompts[0].id, DraftController()).run()  # warm the lane
    ctls = {arm: (make() if make else None) for arm, (_, _, make) in arms.items()}
    res = collections.defaultdict(list)
    for r in range(passes):
        for p in prompts:
            gens = [gen(a, p.id, ctls[a]) for a in arms]
            busy = interleave(gens)
            for a, g, b in zip(arms, gens, busy):
                res[f"{a}|{p.id}"].append(len(g.tokens) / max(1e-9, b - g.stats.prompt_s))
                if a in ("old", "new"):
                    res[f"{a}|{p.id}|stats"].append([g.stats.rounds, g.stats.checks, g.stats.checks_failed,
                                                     dict(g.stats.drafter_rounds)])
        print(f"pass {r + 1}/{passes} {time.strftime('%H:%M:%S')}", flush=True)
        json.dump({"cat": {p.id: p.category for p in prompts}, "res": res}, open(out, "w"))
    report(out)


if __name__ == "__main__":
    main()
