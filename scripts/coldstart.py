"""A fresh draft controller's first prompts on a regime: who drafted each prompt's rounds.

A cold start (a new pair, a new server) judges the draft model by its first rounds. This runs
`runs` fresh controllers, one after the other, on the first `prompts` prompts of a set (128
tokens, greedy) with a regime's target and drafters (`bench --regimes`), and prints each prompt's
rounds by source and the cost model's V(K) and D(K) after it (ms, K = 1, 2, 4, 8), so a prompt
the default sat out (its rounds all "none") shows. Settings: ControlSettings or DraftLengthSettings
fields as KEY=VAL (scripts/control_ab.py's parsing).

    .venv/bin/python scripts/coldstart.py --regime as-1b --prompts 5 --runs 5 [--set heldout] [unsettled=0 ...]

Measured (docs/bench/regimes-cpu-2026-11-27d): on as-1b, 5 held-out prompts, the model sat out 2-4
of prompts 2-5 in each of 6 runs with `unsettled=0`, none of them in 6 runs with the default.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from control_ab import _settings  # noqa: E402  (KEY=VAL: ControlSettings and DraftLengthSettings fields)


def regime_run(regime_name: str, prompt_set: str, n: int):  # type: ignore[no-untyped-def]
    """(regime, prompts, run): `run(controller, prompt, length)` generates 128 greedy tokens of one
    of the set's first `n` prompts with the regime's target and drafters on the CPU, on one fork of
    them (scripts/round_trace.py's too); `run(..., use=pred)`, with the drafters `pred` keeps only
    (`lambda d: False`: the target alone)."""
    from ggufspec.bench.ours import prompt_tokens
    from ggufspec.bench.prompts import load_prompts
    from ggufspec.bench.regimes import parse_regimes
    from ggufspec.loop.engine import generate
    from ggufspec.loop.sampling import SamplingSettings
    from ggufspec.loop.speculation import SpeculativeSettings
    from ggufspec.runtime import load_pair
    from ggufspec.settings import ContextSettings, PairSettings

    regime = parse_regimes(regime_name)[0]
    prompts = load_prompts(prompt_set=prompt_set)[:n]
    pair = load_pair(target=regime.target, draft=list(regime.drafts),
                     settings=PairSettings(context=ContextSettings(n_ctx=1024), n_gpu_layers=0, n_gpu_layers_draft=0))
    target, copies = pair.fork(list(pair.drafters))
    toks = {p.id: prompt_tokens(pair, p) for p in prompts}

    def run(ctl, prompt, length, on_drafters=None, use=None):  # type: ignore[no-untyped-def]
        drafters = [d for d in copies if use is None or use(d)]
        if on_drafters is not None:  # (scripts/prefill_trace.py watches their decodes)
            on_drafters(drafters)
        g = generate(target=target, prompt=toks[prompt.id], drafters=drafters, max_tokens=128, cache_prompt=False,
                     sampling=SamplingSettings(temperature=0.0), speculative=SpeculativeSettings(length=length),
                     controller=ctl)
        g.run()
        return g

    return regime, prompts, run


def add_regime_args(ap: argparse.ArgumentParser, *, regime: str, prompt_set: str, prompts: int) -> None:
    """`regime_run`'s inputs as options (these defaults), and the controller's KEY=VAL settings."""
    ap.add_argument("--regime", default=regime)
    ap.add_argument("--set", default=prompt_set, choices=("tuned", "heldout"))
    ap.add_argument("--prompts", type=int, default=prompts)
    ap.add_argument("settings", nargs="*", metavar="KEY=VAL",
                    help="ControlSettings or DraftLengthSettings fields (booleans 0/1)")


def regime_from(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    """(ControlSettings, DraftLengthSettings, regime, prompts, run) of `add_regime_args`' options."""
    settings, length = _settings(args.settings)
    return (settings, length, *regime_run(args.regime, args.set, args.prompts))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_regime_args(ap, regime="as-1b", prompt_set="heldout", prompts=5)
    ap.add_argument("--runs", type=int, default=1)
    args = ap.parse_args()

    from ggufspec.loop.control import DraftController

    settings, length, regime, prompts, generate_one = regime_from(args)
    for run in range(args.runs):
        ctl = DraftController(settings=settings)
        print(f"run {run + 1}/{args.runs} {regime.name} {' '.join(args.settings)}", flush=True)
        for p in prompts:
            g = generate_one(ctl, p, length)
            models = [m for m in ctl._drafters if not ctl._drafters[m].free]
            v = [round((ctl.verify_s(k) or 0.0) * 1e3) for k in (1, 2, 4, 8)]
            d = [round((ctl.draft_cost_s(models[0], k) or 0.0) * 1e3) for k in (1, 2, 4, 8)] if models else []
            print(f"  {p.id}: rounds {dict(g.stats.drafter_rounds)} V(K) {v} D(K) {d}", flush=True)


if __name__ == "__main__":
    main()
