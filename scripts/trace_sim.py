"""Draft policies judged without timing noise: recorded acceptance traces, simulated rounds.

On the shared 2-core hosts a run's tokens/s moves by 10-12% (docs/bench/pooled.md), so a real
A/B of two controller versions resolves about 2% over 116 prompt runs, and a bench cell about
5%. This script separates what a policy decides from what the machine does:

    record    runs the default pair once per prompt (both built-in sets, the bench's order): the
              target's greedy reply, and for every position p of it how many of the draft model's
              greedy tokens from p (up to 8; its cache the target's for the history before p, as
              after a fully accepted round) equal the reply's. About 20 minutes on the 2-core EPYC.
    simulate  replays each prompt through the real `DraftController` and `LookupDrafter`: a
              round's drafts are accepted as the trace says, its seconds are the bench's measured
              costs (`micro` in a bench.json: a target step, a verify of K + 1 rows, a draft step;
              the draft's first call 4.9 ms dearer, as measured), with per-round noise if asked.
              Prints each policy's median speedup per prompt set and category (the bench's
              statistic, two repeats) and the default against always-draft and fixed K = 8.

Checked against the real loop: fixed K = 8 over the 58 prompts ran 843 rounds, the simulation
841 (and 841 with the draft's cache refreshed from the target's every round, the trace's model).
Its speedups are about 15% above the bench's (the micro costs are timed back to back, at a short
context; the loop's rounds cost more): use it for differences between policies.

    .venv/bin/python scripts/trace_sim.py record --out traces.json
    .venv/bin/python scripts/trace_sim.py simulate traces.json --bench docs/bench/epyc-first/bench.json
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import random
import statistics as st
import sys
from pathlib import Path
from typing import Any

from ggufspec.control import Candidate, Choice, DraftController, Scored
from ggufspec.drafters import LookupDrafter, common_prefix

MODEL = "model"
K_MAX = 8
MAX_TOKENS = 128  # new tokens a generation, as the bench's
POLICIES = ("default", "model", "always", "K8", "K4")  # model + lookup; model alone; always-draft; fixed K


def record(out: Path, max_tokens: int) -> None:
    import numpy as np

    from ggufspec import ContextSettings, PairSettings, SamplingSettings, load_pair
    from ggufspec.bench.prompts import load_prompts

    traces: dict[str, Any] = {}
    with load_pair(settings=PairSettings(context=ContextSettings(n_ctx=2048))) as pair:
        target = pair.target_ctx
        draft = next(d for d in pair.drafters if not getattr(d, "free", False)).ctx  # type: ignore[attr-defined]
        for s in ("tuned", "heldout"):
            for p in load_prompts(prompt_set=s):
                gen = pair.generate(messages=list(p.messages), max_tokens=max_tokens, drafters=(), cache_prompt=False,
                                    sampling=SamplingSettings(temperature=0.0))
                gen.run()
                prompt = list(pair.encode(messages=list(p.messages)))
                hist = prompt + list(gen.tokens)
                target.clear()
                target.decode(hist[:-1], logits="none")
                state = target.state()
                accepted = []
                for pos in range(len(prompt), len(hist)):  # a round whose history is hist[:pos]
                    if not draft.load_state(state, hist[:-1]):
                        sys.exit("error: the draft model refused the target's KV cache (not the same network)")
                    draft.truncate(pos - 1)
                    tok, n = hist[pos - 1], 0
                    while n < K_MAX and pos + n < len(hist):
                        draft.decode([tok], logits="last")
                        tok = int(np.argmax(draft.logits(-1)))
                        if tok != hist[pos + n]:
                            break
                        n += 1
                    accepted.append(n)
                traces[p.id] = {"set": s, "category": p.category, "prompt": prompt, "reply": list(gen.tokens),
                                "model_accepted": accepted}
                print(f"{p.id}: {len(gen.tokens)} tokens, {st.mean(accepted):.2f} accepted from each position", flush=True)
    tmp = out.with_suffix(out.suffix + ".tmp")
    tmp.write_text(json.dumps(traces))
    tmp.replace(out)


class Costs:
    """Seconds of a round's parts, from a bench's `micro` block."""

    def __init__(self, micro: dict[str, Any]) -> None:
        self.a = float(micro["target_step_s"])
        self.verify = {int(k): float(v) for k, v in micro["verify_s"].items()}
        steps = [v for k, v in micro["draft_step_s"].items() if v]
        self.b = float(steps[0])
        self.f = self.b + 0.0049  # the first call imports the target's cache (ggufspec.drafters.Draft.first_s)
        self.python = 0.0003  # our Python a round (the bench's time split)

    def verify_s(self, k: int) -> float:
        ks = sorted(self.verify)
        for lo, hi in zip(ks, ks[1:]):
            if lo <= k <= hi:
                return self.verify[lo] + (self.verify[hi] - self.verify[lo]) * (k - lo) / (hi - lo)
        lo, hi = ks[-2], ks[-1]
        return self.verify[hi] + (self.verify[hi] - self.verify[lo]) / (hi - lo) * (k - hi)


def simulate_prompt(trace: dict[str, Any], policy: str, ctl: DraftController | None, costs: Costs,
                    rng: random.Random, noise: float, max_tokens: int = MAX_TOKENS) -> float:
    """Seconds the generation takes under `policy` (the first token, from the prefill, excluded)."""
    prompt, reply, accepted_at = trace["prompt"], trace["reply"], trace["model_accepted"]
    end = min(max_tokens, len(reply))
    hist, gen, seconds = prompt + reply[:1], 1, 0.0
    lookup = LookupDrafter()
    lookup.prefill(prompt)
    if ctl is not None:
        ctl.begin(prefilled=[MODEL], prefill={MODEL: (len(prompt) - 1, 0.002)})
    while gen < end:
        at = len(hist) - len(prompt)  # the reply's index of the next token
        remaining = end - gen
        k_max = min(K_MAX, remaining - 1)
        jitter = math.exp(rng.gauss(0.0, noise)) if noise else 1.0
        proposal = lookup.propose(hist, draft_len=k_max) if policy == "default" and k_max > 0 else None
        choice: Choice | None = None
        if k_max > 0 and policy.startswith("K"):
            choice = Choice(MODEL, min(int(policy[1:]), k_max))
        elif k_max > 0 and ctl is not None:
            cands = [Candidate(MODEL, kv_shared=True)]
            if proposal is not None and proposal.tokens:
                cands.append(Candidate("lookup", free=True, match_len=len(proposal.tokens), grade=proposal.grade))
            choice = ctl.choose(drafters=cands, draft_max=k_max, allow_none=policy != "always", remaining=remaining)
        k = choice.draft_len if choice is not None and choice.drafter is not None else 0
        draft_s = 0.0
        if k and choice is not None and choice.drafter == MODEL:
            accepted = min(k, accepted_at[at])
            draft_s = (costs.f + (k - 1) * costs.b) * jitter
        elif k and proposal is not None:
            accepted = common_prefix(proposal.tokens[:k], reply[at:])
        else:
            accepted = 0
        round_s = (costs.verify_s(k) + costs.python) * jitter + draft_s
        emitted = accepted + 1
        if ctl is not None and choice is not None and not policy.startswith("K"):
            scored = {}
            if proposal is not None and proposal.tokens and choice.drafter != "lookup":
                scored["lookup"] = Scored(len(proposal.tokens), common_prefix(proposal.tokens, reply[at:at + emitted]),
                                          proposal.grade)
            ctl.observe(choice=choice, drafted=k, accepted=accepted, emitted=emitted, round_s=round_s, draft_s=draft_s,
                        free=choice.drafter == "lookup", scored=scored,
                        draft_first_s=costs.f * jitter if k and choice.drafter == MODEL else None,
                        draft_calls=k if choice.drafter == MODEL else 0)
        take = min(emitted, end - gen)
        hist += reply[at:at + take]
        gen += take
        seconds += round_s
    return seconds


def simulate(path: Path, bench: Path, noise: float, seeds: int) -> None:
    traces = json.loads(path.read_text())
    costs = Costs(json.loads(bench.read_text())["micro"])
    cell = {pid: f"{'held-out' if t['set'] == 'heldout' else 'tuned'} {t['category']}" for pid, t in traces.items()}
    speedups: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
    for seed in range(seeds):
        rng = random.Random(seed)
        ctls = {p: DraftController() for p in POLICIES if not p.startswith("K")}  # one per policy, kept across prompts
        for _ in range(2):  # the bench's two repeats, in its order
            for pid, t in traces.items():
                alone = (min(MAX_TOKENS, len(t["reply"])) - 1) * (costs.a + costs.python)
                for policy in POLICIES:
                    seconds = simulate_prompt(t, policy, ctls.get(policy), costs, rng, noise)
                    speedups[(policy, pid)].append(alone / seconds)
    cells = sorted(set(cell.values()))

    def per_cell(f) -> str:
        return " | ".join(f"{st.median(f(i) for i in cell if cell[i] == c):.3f}" for c in cells)
    print(f"costs: target step {costs.a * 1e3:.1f} ms, draft step {costs.b * 1e3:.2f} ms, verify of 9 rows "
          f"{costs.verify_s(8) * 1e3:.1f} ms; noise {noise} a round; {seeds} seed(s)\n")
    print("| policy | " + " | ".join(cells) + " |\n|---|" + "---:|" * len(cells))
    for policy in POLICIES:
        print(f"| {policy} | " + per_cell(lambda i: st.median(speedups[(policy, i)])) + " |")
    for other in ("always", "K8"):
        print(f"| default / {other}, per prompt | "
              + per_cell(lambda i: st.median(speedups[("default", i)]) / st.median(speedups[(other, i)])) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record", help="record acceptance traces of the default pair")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--max-tokens", type=int, default=MAX_TOKENS)
    s = sub.add_parser("simulate", help="replay the traces through the controller")
    s.add_argument("traces", type=Path)
    s.add_argument("--bench", type=Path, default=Path("docs/bench/epyc-first/bench.json"),
                   help="a bench.json whose measured costs price the rounds")
    s.add_argument("--noise", type=float, default=0.0, help="sd of a round's log-normal time noise (0: none)")
    s.add_argument("--seeds", type=int, default=1)
    args = ap.parse_args()
    if args.cmd == "record":
        record(args.out, args.max_tokens)
    else:
        for p in (args.traces, args.bench):
            if not p.is_file():
                sys.exit(f"error: {p} does not exist; record traces first, or pass --bench FILE")
        simulate(args.traces, args.bench, args.noise, args.seeds)


if __name__ == "__main__":
    main()
