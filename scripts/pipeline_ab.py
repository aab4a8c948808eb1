"""Rounds of the target alone launched ahead on an asynchronous device, A/B in lockstep.

On a GPU or an RPC worker a decode returns before the device is done (`Target.asynchronous`), and
the loop launches a round of the target alone at the end of the round before it (no drafter, the
last tokens, or the controller's hold), doing its bookkeeping while the device computes
(ggufspec.loop.round_runner). This runs the target alone and the default (a regime's drafters
under the controller), each with that off (every decode waited for: the context's `asynchronous`
set False) and on, on forks of the pair (each arm on the next fork from prompt to prompt), step by
step together on each prompt (ggufspec.bench.lockstep, which waits for each lane's launched round
inside its step: what is measured is what the device hid of our Python, not another lane's work).
One controller per default arm, kept across prompts. 128 tokens, greedy.

    .venv/bin/python scripts/pipeline_ab.py PASSES OUT.json [--regime default | --target REF --draft REF ...]
        [--set tuned] [--limit N] [--ngl all] [--rpc HOST:PORT,...]
    .venv/bin/python scripts/pipeline_ab.py --report OUT.json

Greedy output must be the same in every arm (checked; a difference is reported and fails the run).
"""
import collections
import json
import statistics as st
import sys
import time

ARMS = ("alone:off", "alone:on", "default:off", "default:on")


def report(path: str) -> None:
    from ggufspec.bench.spread import geomean_interval

    d = json.load(open(path))
    res = d["res"]
    pids = sorted({k.split("|")[1] for k in res})
    print(f"regime {d['regime']}, set {d['set']}, {len(pids)} prompts, {d['passes']} passes; tok/s, median over prompts "
          f"of each prompt's median:")
    for a in ARMS:
        print(f"  {a:12s} {st.median(st.median(res[f'{a}|{p}']) for p in pids):8.1f}")
    for num, den in (("alone:on", "alone:off"), ("default:on", "default:off"), ("default:off", "alone:off"),
                     ("default:on", "alone:on")):
        xs = [n / o for p in pids for n, o in zip(res[f"{num}|{p}"], res[f"{den}|{p}"])]
        g, lo, hi = geomean_interval(xs)
        print(f"  {num} / {den}: {g:.3f} [{lo:.3f}-{hi:.3f}] (geometric mean over prompts and passes, 90%)")
    if d.get("differs"):
        print(f"  greedy output differed: {d['differs']}")


def main() -> None:
    from ab_lanes import Lanes, ab_parser, load_ab_pair

    ap = ab_parser(__doc__, report, ngl="all", ngl_help="layers of the target and the draft on the device (as `run --ngl`)")
    if ap is None:
        return
    ap.add_argument("--target", default=None, help="a target instead of the regime's (a model reference, as `run`)")
    ap.add_argument("--draft", action="append", default=None,
                    help="with --target: its drafters (repeatable, as `run`; default: the regime's)")
    ap.add_argument("--rpc", default="", help="RPC workers HOST:PORT,... (as `run --rpc`)")
    args = ap.parse_args()

    from ggufspec.bench.ours import prompt_tokens
    from ggufspec.bench.prompts import load_prompts
    from ggufspec.bench.regimes import parse_regimes
    from ggufspec.loop.control import DraftController

    prompts = load_prompts(prompt_set=args.set)[:args.limit]
    regime = parse_regimes(args.regime)[0]
    target, drafts, name = regime.target, list(regime.drafts), regime.name
    if args.target:
        target, drafts, name = args.target, args.draft or drafts, f"{args.target} + {'+'.join(args.draft or drafts)}"
    pair = load_ab_pair(target, drafts, ngl=args.ngl, rpc=[e for e in args.rpc.split(",") if e])
    if not pair.target_ctx.asynchronous:
        sys.exit("error: the target's decodes wait for the CPU (no GPU or RPC device): nothing to launch ahead; "
                 "give --ngl with a GPU, or --rpc")
    toks = {p.id: prompt_tokens(pair, p) for p in prompts}
    lanes = Lanes(pair, ARMS)

    def start(arm: str, pid: str, ctl, lane: int):
        return lanes.generate(lane, toks[pid], drafters=lanes.names if arm.startswith("default") else (),
                              controller=ctl, asynchronous=arm.endswith(":on"))

    lanes.warm(lambda arm, lane: start(arm, prompts[0].id, DraftController(), lane))
    ctls = {a: (DraftController() if a.startswith("default") else None) for a in ARMS}
    res: dict[str, list] = collections.defaultdict(list)
    differs = []
    for r in range(args.passes):
        for j, p in enumerate(prompts):
            done = lanes.block(r * len(prompts) + j, lambda arm, lane: start(arm, p.id, ctls[arm], lane))
            if any(g.tokens != done[0][0].tokens for g, _ in done):
                differs.append(p.id)
            for a, (_, rate) in zip(ARMS, done):
                res[f"{a}|{p.id}"].append(rate)
        print(f"pass {r + 1}/{args.passes} {time.strftime('%H:%M:%S')}", flush=True)
        json.dump({"res": res, "regime": name, "set": args.set, "passes": r + 1, "differs": differs},
                  open(args.out, "w"))
    report(args.out)
    if differs:
        sys.exit(1)


if __name__ == "__main__":
    main()
