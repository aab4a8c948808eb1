"""Draft policies judged without timing noise: recorded acceptance traces, simulated rounds.

On the shared 2-core hosts a run's tokens/s moves by 10-12% (docs/bench/pooled.md), so a real
A/B of two controller versions resolves about 2% over 116 prompt runs, and a bench cell about
5%. This script separates what a policy decides from what the machine does:

    record    runs the default pair once per prompt (both built-in sets, the bench's order): the
              target's greedy reply, and for every position p of it how many of the draft model's
              greedy tokens from p (up to --k-max, 16; its cache the target's for the history
              before p, as after a fully accepted round) equal the reply's, and the draft's top
              probability at each (for --draft-p-min). About 25 minutes on the 2-core EPYC.
              `--target embedded:smollm2:Q8_0` another target of the draft's network; with
              `--own-cache` the draft's cache its own decode of the history (smollm2-as-1b's
              greedy text is the Q8_0 model's, and its draft cannot import its cache: the
              replay then prices the catch-ups); `--first N` the bench's --limit N (1.5 min).
    simulate  replays each prompt through the real loop, `ggufspec.loop.engine.generate` (its
              controller calls, its check, its extension, its acceptance), on a simulated clock
              (`ggufspec.loop.clock.now`, replaced for the replay): a fake target whose greedy rows
              are the recorded reply, a fake draft model that proposes the reply's tokens for as
              many as the trace says the draft kept from there and then ids that never match, the
              real `LookupDrafter`, and one real `DraftController` a policy, kept across prompts.
              A round's seconds are the bench's measured costs (`micro` in a bench.json: a target
              step, a verify of K + 1 rows, a draft step; the draft's first call a round 4.9 ms
              dearer, as measured) and our Python a round, with per-round noise if asked.
              Prints each policy's median speedup per prompt set and category (the bench's
              statistic, two repeats) and the first policy over each of the others, per prompt
              (`--policies default always:8 K8 default:12:0.3 default:8:0:0`: kind, draft_max, p_min,
              draft_extend). The default's full model drafts take lookup's continuation where the
              loop finds it pays (--draft-extend; the fourth field 0: off).
              `--profile NAME|FILE` prices rounds with costs given as numbers instead of a bench's
              (`PROFILES`: h200-135m, h200-135m-graphs, h200-135m-run4, h200-135m-run5,
              h200-as7b-graphs, h200-as7b-slowstart, rtx3090-8b, and this CPU's no-pay regimes
              epyc-q8_0, epyc-q4_1 and its 1B stand-in epyc-as-1b; or a JSON/TOML file of the same keys), for regimes this machine
              cannot produce; with the default first and fixed-K or always-draft rivals it also
              prints `bench --regimes`' cells per prompt set (docs/bench/regimes_simulated.md).
              `--losses`: the first policy's time against the target alone's, split by the kind
              of round (the target alone, the model, its retries, each lookup grade).

Checked against the real loop: the replay is the real loop, so the rounds are the engine's by
construction; what it models is the draft (the trace) and the costs. Fixed K = 8 over the 58
prompts of docs/bench/traces-default-pair.json: 840 rounds, 6,431 drafts, 5,951 kept, as the
copy of the engine's round this replay ran before gave. Against the first traces (2026-11-26)
the real loop ran 843 rounds, that copy 841, and the real loop with the draft's cache refreshed
from the target's every round (the trace's model) 841. The trace does not know the draft's
tokens past a mismatch: there they never match, so lookup never continues a model draft that
holds one (the real loop's lookup may, for rows the target rejects).

Priced with the micro costs its speedups are about 15% above the bench's (they are timed back to
back, at a short context; the loop's rounds cost more); `--loop-costs` prices rounds with what the
bench's fixed-K runs measured, and then they sit near the bench's. Use it for differences between
policies.

    .venv/bin/python scripts/trace_sim.py record --out traces.json
    .venv/bin/python scripts/trace_sim.py simulate traces.json --bench docs/bench/epyc-first/bench.json
    .venv/bin/python scripts/trace_sim.py simulate traces.json --profile rtx3090-8b --policies default always K2 K4 K8
"""

from __future__ import annotations

import argparse
import collections
import csv
import json
import math
import random
import statistics as st
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ggufspec.loop import clock, engine
from ggufspec.loop.control import SYNCED, ControlSettings, DraftController
from ggufspec.loop.drafters import Draft, Drafter, common_prefix, top_probability
from ggufspec.loop.lookup import LookupDrafter
from ggufspec.loop.sampling import SamplingSettings
from ggufspec.loop.speculation import DraftLengthSettings, SpeculativeSettings
from ggufspec.loop.stats import RunStats
from ggufspec.settings import DRAFT_EXTEND, DRAFT_MAX

# the tests' simulated clock and fake Target (tests/fakes.py), under the replay's trace-backed fakes
sys.path.append(str(Path(__file__).resolve().parents[1] / "tests"))
from fakes import CudaGraph, FakeClock, FakeModel, FakeVocab

sys.path.insert(0, str(Path(__file__).resolve().parent))
import round_losses  # noqa: E402

MODEL = "model"
K_MAX = 16  # draft tokens scored from each position by `record` (the most a replayed policy may draft)
MAX_TOKENS = 128  # new tokens a generation, as the bench's


class Watched(DraftController):
    """The default controller, handing each round it is told of to `on_round` before it observes
    it (compiled, a controller's methods cannot be replaced on an instance: ggufspec.loop.compiled)."""

    def __init__(self, *, settings: ControlSettings, on_round: Callable[[Any], None]) -> None:
        super().__init__(settings=settings)
        self.on_round = on_round

    def observe(self, r: Any) -> None:
        self.on_round(r)
        super().observe(r)


def record(out: Path, max_tokens: int, k_max: int = K_MAX, limit: int = 0, *, target_ref: str | None = None,
           first: int = 0, own_cache: bool = False) -> None:
    """Traces of both prompt sets into `out`, written again (atomically) after each prompt, in the
    bench's order. `limit`: the first `limit` prompts of each set's categories only, recorded
    one of each cell before a second of any (a partial file covers every cell); `first`: the first
    `first` prompts of each set only (the bench's --limit). Prompts that `out` already holds (same
    k_max) are kept, not recorded again: an interrupted run resumes. `target_ref`: another target
    than the default pair's, of the same network as its draft (whose cache the draft imports at
    each position), e.g. embedded:smollm2:Q8_0, whose greedy text smollm2-as-1b's is. `own_cache`:
    each position's draft from the draft's own cache of the history instead (a target of another
    network, as smollm2-as-1b's extra blocks, whose cache the draft cannot import: it keeps its own)."""
    from ggufspec import ContextSettings, PairSettings, load_pair
    from ggufspec.bench.prompts import load_prompts

    order = [(s, p) for s in ("tuned", "heldout") for p in load_prompts(prompt_set=s)[:first or None]]
    rank: dict[int, int] = {}
    seen: collections.Counter = collections.Counter()
    for i, (s, p) in enumerate(order):
        seen[(s, p.category)] += 1
        rank[i] = seen[(s, p.category)]
    todo = sorted((i for i in range(len(order)) if not limit or rank[i] <= limit), key=lambda i: (rank[i], i))
    traces: dict[str, Any] = {}
    if out.is_file():
        traces = {k: v for k, v in json.loads(out.read_text()).items() if v.get("k_max") == k_max}
    index = {p.id: i for i, (_, p) in enumerate(order)}

    def write() -> None:
        tmp = out.with_suffix(out.suffix + ".tmp")
        tmp.write_text(json.dumps(dict(sorted(traces.items(), key=lambda kv: index.get(kv[0], len(index))))))
        tmp.replace(out)

    draft_ref = "embedded:smollm2:Q4_1" if target_ref else None  # (the default pair's draft)
    with load_pair(target=target_ref, draft=draft_ref, settings=PairSettings(context=ContextSettings(n_ctx=2048))) as pair:
        target = pair.target_ctx
        draft = next(d for d in pair.drafters if not d.free).ctx  # type: ignore[attr-defined]
        for s, p in (order[i] for i in todo):
            if p.id in traces:
                continue
            gen = pair.generate(messages=list(p.messages), max_tokens=max_tokens, drafters=(), cache_prompt=False,
                                sampling=SamplingSettings(temperature=0.0))
            gen.run()
            prompt = list(pair.encode(messages=list(p.messages)))
            hist = prompt + list(gen.tokens)
            source = draft if own_cache else target  # the cache each round's draft starts from
            source.clear()
            source.decode(hist[:-1], logits="none")
            state = source.state()
            accepted, tops = [], []
            for pos in range(len(prompt), len(hist)):  # a round whose history is hist[:pos]
                if not draft.load_state(state, hist[:-1]):
                    sys.exit("error: the draft model refused the target's KV cache (not the same network)")
                draft.truncate(pos - 1)
                tok, n, top = hist[pos - 1], 0, []
                while n < k_max and pos + n < len(hist):
                    draft.decode([tok], logits="last")
                    logits = draft.logits(-1)
                    tok = int(np.argmax(logits))
                    top.append(round(top_probability(logits, tok), 4))
                    if tok != hist[pos + n]:
                        break
                    n += 1
                accepted.append(n)
                tops.append(top)
            traces[p.id] = {"set": s, "category": p.category, "prompt": prompt, "reply": list(gen.tokens),
                            "model_accepted": accepted, "model_top": tops, "k_max": k_max,
                            **({"own_cache": True} if own_cache else {})}
            write()
            print(f"{p.id}: {len(gen.tokens)} tokens, {st.mean(accepted):.2f} accepted from each position", flush=True)
    write()


PAUSE_ROUNDS = 8  # a draft model not called for more rounds than this is back after a pause (Costs.pause_extra)
FIRST_CALL_S = 0.0049  # the draft's first call imports the target's cache (ggufspec.loop.drafters.Draft.first_s)


class Costs:
    """Seconds of a round's parts: from a bench's `micro` block (decodes timed back to back), or,
    with `from_runs`, from its runs as the loop measured them."""

    def __init__(self, micro: dict[str, Any]) -> None:
        self.a = float(micro["target_step_s"])
        self.verify = {int(k): float(v) for k, v in micro["verify_s"].items()}
        # the draft model (lookup's step is 0)
        self.draft, self.b = next((k, float(v)) for k, v in micro["draft_step_s"].items() if v)
        self.f = self.b + FIRST_CALL_S
        self.u = self.b / 3  # a draft that keeps its own cache: a token of its prefill or catch-up (a batch)
        # our Python a round, python0 + python1 * K: in the EPYC's bench runs 0.22 ms for the target
        # alone and 0.2 ms more a drafted token (1.78 ms at K = 8; 3.3 ms at K = 16 measured)
        self.python0, self.python1 = 0.00022, 0.0002
        self.source = "micro"

    @classmethod
    def from_runs(cls, rows: list[dict[str, str]], draft: str) -> Costs:
        """The loop's own costs in a bench's runs.csv: a the target alone's verify seconds a round,
        V(K) the fixed-K runs' (`draft` K=k), b their draft seconds a drafted token once the first
        call's import is taken off, and our Python a round as a line in the drafted tokens. On the
        2-core EPYC (docs/bench/epyc-first) they read a = 36.5 ms, V(8) = 71.4 ms, b = 12.5 ms
        against the micro block's 33.9, 57.7 and 9.8 ms, and Python 0.22 ms + 0.2 ms a draft."""
        def per_round(config: str, col: str) -> tuple[float, float]:
            """(`col` seconds, drafted tokens) a round of `config`."""
            ok = [r for r in rows if r["config"] == config and not r["error"] and int(r["rounds"] or 0)]
            if not ok:
                sys.exit(f"error: no runs of {config!r} in the bench's runs.csv")
            n = sum(int(r["rounds"]) for r in ok)
            return sum(float(r[col]) for r in ok) / n, sum(int(r["drafted"]) for r in ok) / n
        a = per_round("target alone", "verify_s")[0]
        costs = cls({"target_step_s": a, "verify_s": {"0": a}, "draft_step_s": {draft: 1.0}})  # b, f set below
        fixed = sorted(int(c.rsplit("=", 1)[1]) for c in {r["config"] for r in rows} if c.startswith(f"{draft} K="))
        if len(fixed) < 2:
            sys.exit(f"error: the bench ran fewer than two fixed K of {draft}; run it with --sweep-k")
        for k in fixed:
            costs.verify[k] = per_round(f"{draft} K={k}", "verify_s")[0]
        draft_s, drafted = per_round(f"{draft} K={fixed[-1]}", "draft_s")
        costs.b = (draft_s - FIRST_CALL_S) / drafted
        costs.f = costs.b + FIRST_CALL_S
        costs.u = costs.b / 3
        # Python = python0 + python1 * drafted: least squares over the target alone and each fixed K
        pts = [per_round(c, "overhead_s") for c in ("target alone", *(f"{draft} K={k}" for k in fixed))]
        fit = st.linear_regression([d for _, d in pts], [o for o, _ in pts])
        costs.python0, costs.python1 = fit.intercept, fit.slope
        costs.source = f"{draft} runs"
        return costs

    @classmethod
    def from_profile(cls, profile: dict[str, Any]) -> Costs:
        """Costs given as numbers (`PROFILES`, or a JSON/TOML file of the same keys): milliseconds
        of a target step, of a verify of n rows (a few n, interpolated linearly, the last two
        points' line beyond), of a draft step, of the draft's first call a round over its other
        steps (`draft_first_extra_ms`: the catch-up on the 1-2 tokens the last round left, and the
        import of the target's cache where the draft is the target's network), and our Python a
        round: `python_round_ms` + `python_draft_ms` a drafted token, + `python_controller_ms`
        where the controller chose a drafting round (the default and always-draft; not fixed K nor
        the target alone), `python_controller_none_ms` where it chose the target alone (absent: the
        same)."""
        missing = [k for k in ("target_step_ms", "verify_ms", "draft_step_ms") if k not in profile]
        if missing:
            sys.exit(f"error: the cost profile lacks {', '.join(missing)}")
        rows = {int(n): float(ms) for n, ms in profile["verify_ms"].items()}
        if len(rows) < 2 or min(rows) < 1:
            sys.exit("error: verify_ms needs at least two row counts (1 = a step of the target alone)")
        ms = 1e-3
        costs = cls({"target_step_s": float(profile["target_step_ms"]) * ms,
                     "verify_s": {n - 1: v * ms for n, v in rows.items()},  # keyed by drafts: K drafts, K + 1 rows
                     "draft_step_s": {"draft": float(profile["draft_step_ms"]) * ms}})
        if 0 not in costs.verify:
            costs.verify[0] = costs.a
        costs.f = costs.b + float(profile.get("draft_first_extra_ms", 0.0)) * ms
        # a draft that keeps its own cache (own-cache traces): a token of a prompt prefill or a
        # catch-up, decoded in a batch (absent: a third of a draft step)
        costs.u = float(profile.get("draft_batch_ms", costs.b / ms / 3)) * ms
        costs.python0 = float(profile.get("python_round_ms", 0.0)) * ms
        costs.python1 = float(profile.get("python_draft_ms", 0.0)) * ms
        costs.python_ctl = float(profile.get("python_controller_ms", 0.0)) * ms
        costs.python_ctl_none = float(profile.get("python_controller_none_ms", profile.get("python_controller_ms", 0.0))) * ms
        if "uncaptured_ms" in profile or "launch_ms" in profile:  # a GPU's graph of the target: see Costs.uncaptured
            costs.uncaptured = float(profile.get("uncaptured_ms", 0.0)) * ms
            costs.launch = float(profile.get("launch_ms", 0.0)) * ms
            costs.capture = float(profile.get("capture_ms", 0.0)) * ms
        # a slow start: the first `slow_start_rounds` rounds in which a controller's draft model makes
        # more than one call cost `slow_start_ms` more a later call (see PROFILES' h200-as7b-slowstart)
        costs.slow_rounds = int(profile.get("slow_start_rounds", 0))
        costs.slow_b = float(profile.get("slow_start_ms", 0.0)) * ms
        # a draft model back after a pause: its first call after more than PAUSE_ROUNDS rounds
        # without one costs `pause_extra_ms` more (see PROFILES' h200-135m-run5)
        costs.pause_extra = float(profile.get("pause_extra_ms", 0.0)) * ms
        costs.source = str(profile.get("name", "profile"))
        return costs

    slow_rounds = 0  # a slow start (profiles only): rounds of later draft calls that cost slow_b more
    slow_b = 0.0
    pause_extra = 0.0  # a draft model's first call after a pause (profiles only), over f
    python_ctl = 0.0  # our Python a round on top of python_s where the controller chose to draft (profiles only)
    python_ctl_none = 0.0  # ... where it chose the target alone (a held choice prices nothing)
    # A GPU's graph of the target (profile keys `uncaptured_ms`, `launch_ms`, `capture_ms`):
    # llama.cpp's CUDA backend runs a decode whose shape (rows) differs from the last one's without
    # its graph (max(`uncaptured`, its replay + `launch`): fakes.CudaGraph), the next of the same
    # shape too and captures it (+ `capture`), then replays it (the verify_ms figures). None: no
    # graph (a CPU).
    uncaptured: float | None = None
    launch = 0.0
    capture = 0.0

    def bare_s(self, replay: float) -> float:
        """A decode without the graph that costs `replay` with it (fakes.CudaGraph.bare)."""
        return CudaGraph(self.uncaptured or 0.0, self.capture, self.launch).bare(replay)

    def python_s(self, k: int, *, controlled: bool = False) -> float:
        """Our Python in a round of k drafts (the verify's logits, the acceptance, bookkeeping),
        and the controller's where it chose the round."""
        ctl = (self.python_ctl if k > 0 else self.python_ctl_none) if controlled else 0.0
        return self.python0 + self.python1 * k + ctl

    def verify_s(self, k: int) -> float:
        ks = sorted(self.verify)
        for lo, hi in zip(ks, ks[1:]):
            if lo <= k <= hi:
                return self.verify[lo] + (self.verify[hi] - self.verify[lo]) * (k - lo) / (hi - lo)
        lo, hi = ks[-2], ks[-1]
        return self.verify[hi] + (self.verify[hi] - self.verify[lo]) / (hi - lo) * (k - hi)


# Cost profiles for regimes this machine cannot produce (`simulate --profile NAME`); their
# derivations are in docs/bench/regimes_simulated.md. verify_ms maps rows (K drafts + 1) to ms.
PROFILES: dict[str, dict[str, Any]] = {
    # The default pair (SmolLM2-135M Q8_0 target, its Q4_1 draft) on the H200 machine: one lockstep
    # bench, 64 tokens, 2 prompts x 2 repeats (issue 40's GPU check). CORRECTION (second H200 run,
    # docs/gpu.md): that bench kept every model on the CPU (n_gpu_layers=0, since fixed), so these
    # are the host's 16-core Xeon costs with prompt batches on the GPU, not a GPU's; the name stays
    # for the results that cite it. With every layer on the GPU the target steps in ~1.2 ms.
    # - target step 4.21 ms: the target alone's verify a token (one row a round; 231.6 tok/s with
    #   its 0.11 ms of Python)
    # - 9 rows 11.7 ms: fixed K = 8 verified 1.43 ms a generated token, at 8 x 0.9 + 1 = 8.2 tokens
    #   a round (its accept rate 0.84-0.95: 11.0-12.3 ms); rows between 1 and 9 interpolated
    #   linearly (no K in between was timed)
    # - draft step 4.0 ms: fixed K = 2 drafted at 3.96 ms a token, K = 8 at 4.1; with a first call
    #   dearer by e, b + e/2 = 3.96 and b + e/8 = 4.1 give e < 0: no first-call extra to see
    # - our Python: 0.11 ms a round alone; 0.10 ms a drafted token (the EPYC's 0.2 ms scaled by
    #   the two hosts' target-alone Python, 0.11 / 0.22); the default's 0.50 ms a token (mostly
    #   target-alone rounds, ~0.9 rounds a token, 0.23 drafted tokens a token: 0.92 ms of draft at
    #   4 ms) leaves ~0.4 ms a round for the controller's rounds. The third H200 run
    #   (docs/bench/gpu-h200-2026-11-27c/waited, runs.csv: overhead_s / rounds) splits it: where
    #   the controller ran the target alone (the default pair's draft model alone, 0.04 drafts a
    #   round) 0.148 ms a round against the target alone's 0.067, so 0.08 ms; where it drafted
    #   (the 7B stand-in's default, 7.6 drafts a round) 0.96 against 0.12 + 7.6 x 0.054 (fixed
    #   K's Python a draft), so 0.43 ms, and the draft model alone under it 0.33 ms
    "h200-135m": {
        "name": "h200-135m", "target_step_ms": 4.21, "verify_ms": {1: 4.21, 9: 11.7}, "draft_step_ms": 4.0,
        "draft_first_extra_ms": 0.0, "python_round_ms": 0.11, "python_draft_ms": 0.10, "python_controller_ms": 0.4,
        "python_controller_none_ms": 0.08,
    },
    # The default pair with every layer on the H200 (the third run, docs/gpu.md), the target's
    # CUDA graph priced (`uncaptured_ms`, `capture_ms`; Costs.uncaptured):
    # - target step 1.29 ms, verify of 3/5/9 rows 1.67/1.94/3.84 ms: the target alone's and fixed
    #   K = 2/4/8's verify seconds a round (bench --regimes default, decodes waited for)
    # - draft step 1.0 ms: the slope of fixed K's draft seconds a round (5.0/7.1/10.7 ms at K =
    #   2/4/8); their 3.0 ms intercept was the draft's own graph re-warmed every round by a
    #   decode without a logits row, since fixed (draft_first_extra_ms 0)
    # - uncaptured 2.6 ms: the target alone with CUDA graphs off, 365.8 tok/s (2.73 ms a token,
    #   ~0.1 of it Python); capture 1.0 ms: not measured (a guess)
    # - our Python: 0.07 ms a round alone, 0.05 a drafted token, 0.08 the controller's
    "h200-135m-graphs": {
        "name": "h200-135m-graphs", "target_step_ms": 1.29, "verify_ms": {1: 1.29, 3: 1.67, 5: 1.94, 9: 3.84},
        "draft_step_ms": 1.0, "draft_first_extra_ms": 0.0, "python_round_ms": 0.07, "python_draft_ms": 0.05,
        "python_controller_ms": 0.08, "uncaptured_ms": 2.6, "capture_ms": 1.0,
    },
    # The default pair on the H200 as the fourth run measured it (docs/gpu.md; docs/bench/
    # gpu-h200-2026-11-28, regimes-default runs.csv, both sets):
    # - target step 1.35 ms, verify of 3/5/9 rows 1.94/2.25/4.33 ms (the target alone's, fixed K's)
    # - draft step 1.09 ms, first-call extra 4.07: fixed K = 2 and 8's draft rounds, 6.23 and 12.60
    #   ms at 1.98 and 7.84 drafts (the draft imports the target's KV cache each round: docs/gpu.md)
    # - without the graph: 2.2 ms (the target alone with CUDA graphs off, 438 tok/s, less ~0.09 of
    #   Python) and at least the replay + 0.85
    # - our Python: 0.093 ms a round alone, 0.065 a drafted token (fixed K's line); the default's
    #   0.203 where it ran the target alone (0.11 the controller's), always-draft's 0.30 over fixed K
    "h200-135m-run4": {
        "name": "h200-135m-run4", "target_step_ms": 1.35, "verify_ms": {1: 1.35, 3: 1.94, 5: 2.25, 9: 4.33},
        "draft_step_ms": 1.09, "draft_first_extra_ms": 4.07, "python_round_ms": 0.093, "python_draft_ms": 0.065,
        "python_controller_ms": 0.30, "python_controller_none_ms": 0.11, "uncaptured_ms": 2.2, "launch_ms": 0.85,
        "capture_ms": 1.0,
    },
    # The 7B stand-in (smollm2-as-7b, Q8_0, 64 blocks) with every layer on the H200, the Q4_1 draft
    # there too (the fourth run, docs/gpu.md; docs/bench/gpu-h200-2026-11-28, regimes-as-7b runs.csv,
    # medians over both sets' runs):
    # - target step 7.32 ms, verify of 3/5/9 rows 9.85/13.31/13.88 ms: the target alone's and fixed
    #   K = 2/4/8's verify seconds a round
    # - draft step 1.17 ms, first-call extra 1.25: fixed K = 2 and 8's draft seconds a round (3.58
    #   and 10.39 ms at 1.98 and 7.80 drafts a round)
    # - launch 3.2 ms: what a decode without the target's graph costs over its replay; lookup
    #   always-draft (rows 1 and 2 alternating, a change of shape almost every round) verified 2.6-3.6
    #   ms a round over its rows' replays, the fixed K runs 0.0-0.8. Capture 1.0 ms: a guess, as above
    # - our Python: 0.125 ms a round alone, 0.055 a drafted token (fixed K's line); the default's
    #   1.06 ms a round at 7.3 drafts leaves 0.53 for the controller, the draft model's alone 0.40
    "h200-as7b-graphs": {
        "name": "h200-as7b-graphs", "target_step_ms": 7.32, "verify_ms": {1: 7.32, 3: 9.85, 5: 13.31, 9: 13.88},
        "draft_step_ms": 1.17, "draft_first_extra_ms": 1.25, "python_round_ms": 0.125, "python_draft_ms": 0.055,
        "python_controller_ms": 0.45, "python_controller_none_ms": 0.1, "launch_ms": 3.2, "capture_ms": 1.0,
    },
    # A consumer 7B-class GPU: llama 8B Q4_0 on an RTX 3090 (FlashAttention on), a 1B Q4 draft.
    # - target: llama-bench pp512 at micro-batch sizes 1-8 (the master column) in
    #   https://github.com/ggml-org/llama.cpp/pull/15802: 155.02, 277.36, 390.23, 468.95, 514.50,
    #   529.37, 559.17, 570.67 t/s; n rows cost n / (t/s). Past 8 rows: the last two points' line
    #   (1.5 ms a row).
    # - draft step 1.31 ms: TinyLlama 1.1B Q4_K_M tg128 762.37 t/s on an RTX 4090 (Vulkan),
    #   https://github.com/geerlingguy/ai-benchmarks/issues/43 (no one-row figure of a 1B on a 3090
    #   was found; the same PR 15802 has its 8-row batch, 2556.59 t/s = 3.13 ms, the most a one-row
    #   step can cost: see docs/bench/profiles/rtx3090-8b-slowdraft.json)
    # - first-call extra 0.16 ms: a round's first draft call decodes 1-2 tokens (no cache import:
    #   another network); the 8B's 2-row / 1-row cost (7.21 / 6.45 = 1.12) applied to the draft's step
    # - our Python: the H200 host's (above)
    "rtx3090-8b": {
        "name": "rtx3090-8b",
        "target_step_ms": 6.45,
        "verify_ms": {1: 6.451, 2: 7.211, 3: 7.688, 4: 8.530, 5: 9.718, 6: 11.334, 7: 12.519, 8: 14.019},
        "draft_step_ms": 1.31, "draft_first_extra_ms": 0.16,
        "python_round_ms": 0.11, "python_draft_ms": 0.10, "python_controller_ms": 0.4,
        "python_controller_none_ms": 0.08,
    },
    # Where nothing pays, on this 2-core AMD EPYC (issue 40's no-pay rows): the Q8_0 and Q4_1 targets
    # with the default drafters, from `bench --regimes --limit 4 --repeats 2 -n 128` at acddbb6
    # (docs/bench/regimes-cpu-2026-11-28/grid-head-acddbb6, runs.csv, both prompt sets, medians over
    # the runs of each configuration):
    # - target step: the target alone's verify seconds a round (Q8_0 8.27 ms, Q4_1 9.03)
    # - 3/5/9 rows: fixed K = 2/4/8's verify seconds a round (Q8_0 18.96/24.91/33.19, Q4_1
    #   20.54/30.23/44.27: on 2 cores a quantized verify is compute-bound, ~K + 1 times one row)
    # - draft step b and first-call extra e from fixed K = 2 and 8's draft seconds a token, 2b + e
    #   and 8b + e (Q8_0: 9.72 and 8.94 -> b 8.68, e 2.08; Q4_1: 9.94 and 9.09 -> b 8.80, e 2.28)
    # - our Python: the target alone's a round (0.145 / 0.149 ms), fixed K = 8's over it a draft
    #   (~0.07), the default's over it where it ran the target alone (its runs: 0.07 / 0.09); where it
    #   drafts, 0.25 (not measurable on these rows: few such rounds; scripts/overhead.py's warm 0.13
    #   a round, doubled for cold caches after a decode)
    "epyc-q8_0": {
        "name": "epyc-q8_0", "target_step_ms": 8.27, "verify_ms": {1: 8.27, 3: 18.96, 5: 24.91, 9: 33.19},
        "draft_step_ms": 8.68, "draft_first_extra_ms": 2.08, "python_round_ms": 0.145, "python_draft_ms": 0.07,
        "python_controller_ms": 0.25, "python_controller_none_ms": 0.07,
    },
    "epyc-q4_1": {
        "name": "epyc-q4_1", "target_step_ms": 9.03, "verify_ms": {1: 9.03, 3: 20.54, 5: 30.23, 9: 44.27},
        "draft_step_ms": 8.80, "draft_first_extra_ms": 2.28, "python_round_ms": 0.149, "python_draft_ms": 0.07,
        "python_controller_ms": 0.25, "python_controller_none_ms": 0.09,
    },
    # smollm2-as-1b on this 2-core AMD EPYC (`bench --regimes`' regime e, where a verify of 9 rows
    # costs ~4.5 target steps), as the loop measured it in the grid at 5365ff4
    # (docs/bench/regimes-cpu-2026-11-29/grid-head-5365ff4/as-1b/runs.csv, both prompt sets):
    # - target step 57.8 ms, 3/5/9 rows 120.8/201.6/261.9: the target alone's and fixed K = 2/4/8's
    #   verify seconds a round;
    # - the other row counts: the decodes of n rows timed back to back (docs/bench/regimes-cpu-
    #   2026-11-27e/per-k/verify-rows.txt, medians of 6; llama.cpp's repacked kernels take rows in
    #   blocks of 4, so the curve is no line) scaled by the loop's ratio to them at the nearest
    #   measured counts, interpolated (1.14 at 1-3 rows, 1.31 at 5, 1.27 at 9);
    # - draft step b 9.6 ms and first-call extra e 7.2: fixed K = 2 and 8's draft seconds a round,
    #   2b + e = 26.4 and 8b + e = 84.0 (the draft keeps its own cache beside the stand-in: a
    #   round's first call decodes the 1-2 tokens the last round left);
    # - a token of the draft's prompt prefill or catch-up (a batch decode): 3.5 ms (the Q4_1 draft's
    #   decode of 8-128 tokens after a 100-token prompt, minimum of 4, 3.4-4.0 ms a token);
    # - our Python: the target alone's 0.226 ms a round, 0.1 a drafted token (fixed K = 8's 1.01).
    # The traces to replay with it: `record --target embedded:smollm2:Q8_0 --own-cache` (the
    # stand-in's greedy text is the Q8_0 model's).
    "epyc-as-1b": {
        "name": "epyc-as-1b", "target_step_ms": 57.8,
        "verify_ms": {1: 57.8, 2: 104.4, 3: 120.8, 4: 136.6, 5: 201.6, 6: 211.0, 7: 226.1, 8: 197.3, 9: 261.9,
                      10: 270.0, 11: 278.6, 12: 253.0, 13: 316.5},
        "draft_step_ms": 9.6, "draft_first_extra_ms": 7.2, "draft_batch_ms": 3.5,
        "python_round_ms": 0.226, "python_draft_ms": 0.1,
        "python_controller_ms": 0.25, "python_controller_none_ms": 0.09,
    },
}

# The default pair on the H200 as the fifth run measured it (docs/gpu.md; docs/bench/
# gpu-h200-2026-11-28b, regimes-default runs.csv): the fourth run's costs (h200-135m-run4), and
# - a draft model back after a pause: the four retries' draft seconds (K = 2, 2, 3 and lookup
#   aside: 14.0, 15.9, 17.1 ms, catch-up excluded) against fixed K = 2 / 3's rounds (6.5, 7.6):
#   9 ms more on its first call (the draft's graphs captured again and the GPU cold: a
#   measurement of the sum, not of its parts)
# - our Python where the controller held the target alone: 0.216 ms a round against the target
#   alone's 0.094 (generations that drafted nothing): 0.12 over python_round
PROFILES["h200-135m-run5"] = {**PROFILES["h200-135m-run4"], "name": "h200-135m-run5", "python_round_ms": 0.094,
                              "python_controller_none_ms": 0.12, "pause_extra_ms": 9.0}

# h200-as7b-graphs with a slow start (a hypothesis, not a measurement): the fourth run's first
# generation of the draft model alone under a fresh controller (as-7b chat-01, repeat 0) ran K = 1
# in 59 of 65 rounds at 157 tok/s (294 in the next repeat, K = 8); the replay reproduces that signature
# ({0: 4, 1: 60, 3: 1} at 156 tok/s) when the first 2 rounds with later draft calls cost 20 ms
# more a call (a first use, a busy host): one slow measurement of b held K = 1 (which never
# measures b) or judged the model hopeless for thousands of rounds (rule probe_b).
PROFILES["h200-as7b-slowstart"] = {**PROFILES["h200-as7b-graphs"], "name": "h200-as7b-slowstart",
                                   "slow_start_rounds": 2, "slow_start_ms": 20.0}


def load_profile(text: str) -> dict[str, Any]:
    """A built-in profile's name, or a .json / .toml file of the same keys."""
    if text in PROFILES:
        return PROFILES[text]
    path = Path(text)
    if not path.is_file():
        sys.exit(f"error: no cost profile {text!r}; give one of {', '.join(PROFILES)} or a .json/.toml file")
    if path.suffix == ".toml":
        import tomllib

        data = tomllib.loads(path.read_text())
    else:
        data = json.loads(path.read_text())
    return {"name": path.stem, **data}


@dataclass(frozen=True)
class Policy:
    """A configuration replayed: `kind` default (model + lookup, the controller), model (the model
    alone, controlled), always (the model alone, never K = 0) or fixed (the model, `draft_max`
    every round); `draft_max` the largest K; `p_min` the confidence stop (--draft-p-min);
    `draft_extend` the most tokens of lookup's continuation a full model draft takes (default
    only, as --draft-extend; -1: the engine's default); `control` the controller's `ControlSettings`
    overrides (`default@opening=0,hopeless=0`: a rule off, for an ablation)."""

    kind: str
    draft_max: int = DRAFT_MAX
    p_min: float = 0.0
    draft_extend: int = -1
    control: tuple[tuple[str, Any], ...] = ()

    def settings(self, *, gpu: bool = False) -> ControlSettings:
        """Its `ControlSettings`; `gpu`: a profile with a GPU's graph, where the pair turns rule
        switch_cost on (ggufspec.runtime), unless the policy says otherwise."""
        return ControlSettings(**{"switch_cost": gpu, **dict(self.control)})

    @property
    def extend(self) -> int:
        if self.kind != "default":
            return 0
        return DRAFT_EXTEND if self.draft_extend < 0 else self.draft_extend

    @property
    def label(self) -> str:
        text = f"K{self.draft_max}" if self.kind == "fixed" else f"{self.kind}<={self.draft_max}"
        text += f" p{self.p_min:g}" if self.p_min else ""
        text += f" +{self.extend}" if self.kind == "default" and self.extend != DRAFT_EXTEND else ""
        return text + ("@" + ",".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in self.control)
                       if self.control else "")

    @classmethod
    def parse(cls, text: str) -> Policy:
        """"default", "always:16", "K8", "default:16:0.3", "default:8:0:0" (kind[:draft_max[:p_min[:draft_extend]]]),
        each with "@KEY=VAL,..." of `ControlSettings` ("default@confirm=0")."""
        text, _, over = text.partition("@")
        control = _control(over.split(",")) if over else ()
        if text.startswith("K") and text[1:].isdigit():
            return cls("fixed", int(text[1:]))
        parts = text.split(":")
        if parts[0] not in ("default", "model", "always") or len(parts) > 4:
            sys.exit(f"error: bad policy {text!r}; give default|model|always[:DRAFT_MAX[:P_MIN[:DRAFT_EXTEND]]] or K<N>")
        return cls(parts[0], int(parts[1]) if len(parts) > 1 else DRAFT_MAX, float(parts[2]) if len(parts) > 2 else 0.0,
                   int(parts[3]) if len(parts) > 3 else -1, control)


def _control(items: Sequence[str]) -> tuple[tuple[str, Any], ...]:
    """`ControlSettings` overrides from "KEY=VAL" items, each VAL read as its field's default's type."""
    defaults, out = ControlSettings(), []
    for item in items:
        key, _, val = item.partition("=")
        if not hasattr(defaults, key) or not val:
            sys.exit(f"error: bad control setting {item!r}; give KEY=VAL of ControlSettings")
        kind = type(getattr(defaults, key))
        out.append((key, val.lower() in ("1", "true", "on", "yes") if kind is bool else kind(val)))
    ControlSettings(**dict(out))  # checked now, not mid-replay
    return tuple(out)


DEFAULT_POLICIES = ("default", "model", "always", "K8", "K4")  # the bench's: the controller's at DRAFT_MAX, fixed K


def _drafted(top: list[float], k: int, p_min: float) -> tuple[int, int]:
    """(tokens proposed, decode calls) of a model round asked for k tokens under the confidence stop:
    it stops before the first token whose top probability is under p_min (that call made); past
    the recorded chain (the draft's own continuation after a mismatch) it goes on."""
    if p_min > 0.0:
        for j in range(min(k, len(top))):
            if top[j] < p_min:
                return j, j + 1
    return k, k


class ReplayClock(FakeClock):
    """The replay's `ggufspec.loop.clock.now`: seconds pass only as the fakes below charge them.
    Each target decode draws the next round's noise factor (`jitter`: log-normal, sd `noise`), which
    that round's draft calls and its verify share; `verifies` counts the target's rounds."""

    def __init__(self, rng: random.Random, noise: float) -> None:
        super().__init__()
        self.rng, self.noise = rng, noise
        self.jitter = 1.0
        self.verifies = 0

    def next_round(self) -> None:
        self.jitter = math.exp(self.rng.gauss(0.0, self.noise)) if self.noise else 1.0


class Replayed:
    """One recorded prompt over a compact vocabulary: prompt + reply's distinct ids renumbered
    0..n-1 (`seq`), and `wrong` = n, an id that never matches (the draft's tokens past a mismatch)."""

    def __init__(self, trace: dict[str, Any], max_tokens: int) -> None:
        ids = {t: i for i, t in enumerate(sorted(set(trace["prompt"]) | set(trace["reply"])))}
        self.seq = [ids[t] for t in (*trace["prompt"], *trace["reply"])]
        self.prompt_len = len(trace["prompt"])
        self.end = min(max_tokens, len(trace["reply"]))  # tokens generated, the first from the prefill
        self.wrong = len(ids)
        self.n_vocab = len(ids) + 1
        self.accepted_at: list[int] = trace["model_accepted"]
        self.tops: list[list[float]] | None = trace.get("model_top")


class TraceTarget(FakeModel):
    """The target: greedy rows one-hot on the reply's next token at each position (past the
    recorded text a row follows its position, whatever the batch held: acceptance stops at the
    first mismatch, so only rows after the accepted prefix are read). A verify of K + 1 rows costs
    the profile's verify of K drafts and our Python a round of K, times the round's noise."""

    def __init__(self, r: Replayed, sim: ReplayClock, costs: Costs, *, controlled: bool) -> None:
        eye = np.eye(r.n_vocab, dtype=np.float32)
        eye.flags.writeable = False
        seq = r.seq
        n_ctx = len(seq) + 2  # never the stop: a generation ends at its max_tokens, as the trace's reply
        super().__init__(lm=lambda prefix: eye[seq[len(prefix)]], vocab=FakeVocab([b"x"] * r.n_vocab),
                         n_ctx=n_ctx, n_batch=n_ctx)
        self.sim, self.costs, self.controlled = sim, costs, controlled
        self.graph = (CudaGraph(costs.uncaptured, costs.capture, costs.launch)
                      if costs.uncaptured is not None else None)

    def decode(self, tokens: Sequence[int], *, logits: str = "last", wait: bool = True) -> None:
        super().decode(tokens, logits=logits)
        rows, costs = len(tokens), self.costs
        step = costs.verify_s(rows - 1)
        if self.graph is not None:
            step = self.graph.cost(rows, step)
        if logits == "all":  # a round's verify (the prompt's prefill, "last", is not generation time)
            k = rows - 1
            self.sim.t += (step + costs.python_s(k, controlled=self.controlled)) * self.sim.jitter
            self.sim.verifies += 1
        self.sim.next_round()


class TraceDrafter:
    """The draft model as the trace recorded it (a `Drafter`; its cache the target's, kv_shared):
    from position p it proposes the reply's tokens for as many as `model_accepted[p]` says, then
    the wrong id for the rest (its own continuation past a mismatch is unknown). `draft_p_min`
    stops it at the first recorded top probability below it (`_drafted`). A second call in the same
    round (the engine's check: one token, then the rest where it differs from lookup's) goes on
    along the chain recorded at the round's first position: the draft holds its own cache then,
    not the target's, and the trace at the next position, recorded from the target's, may differ.
    Each call costs a draft step a token: a round's first call `costs.f` (it imports the target's
    cache), a later one `costs.b`. `own` (traces recorded with --own-cache): the draft keeps its
    own cache, as beside a target of another network: not kv_shared, behind by what it has not
    decoded, a prompt prefill and a catch-up `costs.u` a token (a batch), so the controller's
    catch-up pricing, prefill choice and opening act as on the real stand-in."""

    name = MODEL
    free = False
    grades = ()

    def __init__(self, r: Replayed, sim: ReplayClock, costs: Costs, slow: list[int] | None = None, *,
                 own: bool = False) -> None:
        self.r, self.sim, self.costs = r, sim, costs
        self.slow = slow if slow is not None else [0]  # rounds of the slow start left (shared by a policy's generations)
        self._round = -1  # the target's round (`ReplayClock.verifies`) of the last call
        self._start = 0  # the history's length at that round's first call
        # `own`: the draft keeps its own cache (a target of another network: traces recorded with
        # --own-cache), `cache` the tokens it holds: a prompt it was not prefilled with, and the
        # rounds it sat out, it decodes as a batch (a catch-up, `costs.u` a token) before drafting
        self.own = own
        self.cache: list[int] = []

    @property
    def kv_shared(self) -> bool:
        return not self.own

    def prefill(self, prompt: Sequence[int]) -> float:
        if not self.own:
            return 0.0  # the target's cache, imported
        seconds = (len(prompt) - 1 - common_prefix(self.cache, prompt[:-1])) * self.costs.u * self.sim.jitter
        self.cache = list(prompt[:-1])
        self.sim.t += seconds
        return seconds

    def backlog(self, history: Sequence[int]) -> int:
        return len(history) - common_prefix(self.cache, history) if self.own else 0

    def continue_after(self, history: Sequence[int], drafts: Sequence[int], *, draft_len: int) -> Draft:
        return Draft((), ())

    def reset(self) -> None:
        self._round = -1

    def propose(self, history: Sequence[int], *, draft_len: int, draft_p_min: float = 0.0, **_: Any) -> Draft:
        if draft_len <= 0:
            return Draft((), ())
        r, n = self.r, len(history)
        if self.sim.verifies != self._round:  # a round's first call: it imports the target's cache
            paused = self.sim.verifies - max(self._round, 0) > PAUSE_ROUNDS
            self._round, self._start, first = self.sim.verifies, n, self.costs.f
            first += self.costs.pause_extra if paused else 0.0
            behind = self.backlog(history)
        else:  # later in the same round (after a check's first token): its own chain, one more step
            first, behind = self.costs.b, 0
        at, j = self._start - r.prompt_len, n - self._start  # the round's chain, and how far along it
        on_path = list(history[self._start - 1:]) == r.seq[self._start - 1:n]  # else past its own wrong token
        k, calls = _drafted(r.tops[at][j:] if r.tops is not None and on_path else [], draft_len, draft_p_min)
        good = min(k, r.accepted_at[at] - j) if on_path else 0
        tokens = (*r.seq[n:n + good], *[r.wrong] * (k - good))
        jitter = self.sim.jitter
        b = self.costs.b
        if calls > 1 and self.slow[0] > 0:  # the slow start: this round's later calls
            self.slow[0] -= 1
            b += self.costs.slow_b
        seconds = (first + (calls - 1) * b) * jitter
        catchup = behind if behind > SYNCED else 0  # (a full accept leaves 2 tokens: a round's own first call)
        catchup_s = catchup * self.costs.u * jitter
        if self.own:
            self.cache = [*history, *tokens[:-1]]  # what it decoded: the history and all drafts but the last
        self.sim.t += seconds + catchup_s
        return Draft(tokens, (None,) * len(tokens), seconds + catchup_s, catchup_s, calls, catchup,
                     first_s=first * jitter)


def simulate_prompt(trace: dict[str, Any], policy: Policy, ctl: DraftController | None, costs: Costs,
                    rng: random.Random, noise: float, max_tokens: int = MAX_TOKENS,
                    slow: list[int] | None = None) -> RunStats:
    """One generation of the trace's prompt under `policy` through the real loop
    (`ggufspec.loop.engine.generate`) on the fakes above and a simulated clock; its stats' `gen_s`
    is the time it takes (the first token, from the prefill, excluded)."""
    recorded = int(trace.get("k_max", 8))  # traces recorded before --k-max scored 8
    if policy.draft_max > recorded:
        sys.exit(f"error: the traces score {recorded} draft tokens a position; record with --k-max {policy.draft_max}")
    if policy.p_min and trace.get("model_top") is None:
        sys.exit("error: these traces have no draft probabilities; record them again for --draft-p-min")
    r = Replayed(trace, max_tokens)
    sim = ReplayClock(rng, noise)
    fixed = policy.kind == "fixed"
    target = TraceTarget(r, sim, costs, controlled=not fixed)
    drafters: list[Drafter] = [TraceDrafter(r, sim, costs, slow, own=bool(trace.get("own_cache")))]
    if policy.kind == "default":
        drafters.append(LookupDrafter())
    length = DraftLengthSettings(draft_max=policy.draft_max, draft_p_min=policy.p_min, draft_extend=policy.extend,
                                 fixed=fixed, always_draft=policy.kind == "always")
    real_now = clock.now
    clock.now = sim.now
    try:
        gen = engine.generate(target=target, prompt=r.seq[:r.prompt_len], drafters=drafters, max_tokens=r.end,
                              sampling=SamplingSettings(temperature=0.0),
                              speculative=SpeculativeSettings(length=length), controller=ctl, cache_prompt=False)
        gen.run()
    finally:
        clock.now = real_now
    assert gen.stats is not None and gen.tokens == r.seq[r.prompt_len:r.prompt_len + r.end], "the reply replayed"
    return gen.stats


def alone_seconds(trace: dict[str, Any], costs: Costs) -> float:
    """The target alone's simulated generation of the trace's reply (the first token, from the
    prefill, excluded): a step and its Python a token, and on a GPU's graph its first two steps
    without one."""
    alone = (min(MAX_TOKENS, len(trace["reply"])) - 1) * (costs.a + costs.python_s(0))
    if costs.uncaptured is not None:  # its first two steps after the prefill: no graph yet
        alone += 2 * (costs.bare_s(costs.a) - costs.a) + costs.capture
    return alone


def replay(traces: dict[str, Any], costs: Costs, noise: float, seeds: int,
           policies: tuple[Policy, ...], *, traced: Policy | None = None,
           generations: list[tuple[dict[str, Any], float, list[Any]]] | None = None) -> dict[tuple[Policy, str], list[float]]:
    """(policy, prompt id) -> its speedups over the target alone, seed by seed, the bench's two
    repeats each (seed s: items 2s and 2s + 1). `traced`: a controlled policy whose generations
    are appended to `generations` as (trace, seconds, its rounds), in the replay's order. Each
    policy draws its noise from a stream of its own, seeded by the seed: the draws a policy gets do
    not depend on which other policies are replayed beside it (one stream shared in turn moved a
    regime cell by up to a point when a rival was left out), and are those of its replay alone."""
    speedups: dict[tuple[Policy, str], list[float]] = collections.defaultdict(list)
    for seed in range(seeds):
        rngs = {p: random.Random(seed) for p in policies}
        gpu = costs.uncaptured is not None
        ctls = {p: DraftController(settings=p.settings(gpu=gpu)) for p in policies if p.kind != "fixed"}  # one per policy, kept across prompts
        slow = {p: [costs.slow_rounds] for p in policies}  # each policy's slow start, as its controller's
        rounds: list[Any] = []
        if traced is not None and generations is not None:
            ctls[traced] = Watched(settings=traced.settings(gpu=gpu), on_round=rounds.append)
        for _ in range(2):  # the bench's two repeats, in its order
            for pid, t in traces.items():
                alone = alone_seconds(t, costs)
                for policy in policies:
                    seconds = simulate_prompt(t, policy, ctls.get(policy), costs, rngs[policy], noise,
                                              slow=slow[policy]).gen_s
                    speedups[(policy, pid)].append(alone / seconds)
                    if policy == traced and generations is not None:
                        generations.append((t, seconds, rounds[:]))
                        rounds.clear()
    return speedups


def losses(traces: dict[str, Any], costs: Costs, policy: Policy, noise: float, seeds: int) -> dict[str, Any]:
    """`split` of `policy`'s generations replayed alone (`replay`'s order, one controller a seed)."""
    generations: list[tuple[dict[str, Any], float, list[Any]]] = []
    replay(traces, costs, noise, seeds, (policy,), traced=policy, generations=generations)
    return split(generations, costs)


def split(generations: list[tuple[dict[str, Any], float, list[Any]]], costs: Costs) -> dict[str, Any]:
    """Where a policy gains and loses against the target alone, by the kind of round: each round's
    seconds (its catch-up included) minus its emitted tokens at the target alone's round (a step
    and its Python), summed per kind over `generations` (`replay`'s, (trace, seconds, rounds)), and
    over the generations the policy lost. Rounds of the target alone lose only the controller's
    Python (the profile's); a drafting round loses where it emits fewer tokens than its seconds buy
    alone. Noise enters each round's seconds, not the reference: read it at --noise 0.
    Returns {"kinds": {kind: [rounds, lost s, gained s (<= 0), net s in the generations lost]},
    "alone_s", "policy_s", "lost_alone_s", "generations", "lost"}."""
    alone_s = costs.a + costs.python_s(0)
    kinds: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    out: dict[str, Any] = {"kinds": kinds, "alone_s": 0.0, "policy_s": 0.0, "lost_alone_s": 0.0, "generations": 0,
                           "lost": 0, "round_s": alone_s}
    for t, seconds, rounds in generations:
        alone = (min(MAX_TOKENS, len(t["reply"])) - 1) * alone_s
        out["alone_s"] += alone
        out["policy_s"] += seconds
        out["generations"] += 1
        gen: dict[str, float] = collections.defaultdict(float)
        for r in rounds:
            kind, d = round_losses.add(kinds, r, alone_s)
            gen[kind] += d
        if seconds > alone:
            out["lost"] += 1
            out["lost_alone_s"] += alone
            for kind, d in gen.items():
                kinds[kind][3] += d
    return out


def print_losses(result: dict[str, Any], label: str, source: str, noise: float, seeds: int) -> None:
    total, lost_alone, lost, n = result["alone_s"], result["lost_alone_s"], result["lost"], result["generations"]
    print(f"\nWhere {label} gains and loses against the target alone ({source}; noise {noise}, {seeds} seed(s) x 2 "
          f"repeats; a round's seconds minus its tokens at {result['round_s'] * 1e3:.2f} ms; all: "
          f"{(result['policy_s'] - total) / total * 100:+.2f}% of the target alone's time):\n")
    print(f"| round | rounds | lost, s | gained, s | net, % of the target alone's time | net in the {lost} generations "
          f"it lost (of {n}), % of theirs |\n|---|---:|---:|---:|---:|---:|")
    for kind, (rounds, plus, minus, in_lost) in sorted(result["kinds"].items(), key=lambda kv: -(kv[1][1] + kv[1][2])):
        kind += " (the controller's Python)" if kind == round_losses.ALONE else ""
        print(f"| {kind} | {int(rounds)} | {plus:.3f} | {abs(minus):.3f} | {(plus + minus) / total * 100:+.2f} | "
              f"{in_lost / lost_alone * 100 if lost_alone else 0.0:+.2f} |")


def regime_rows(traces: dict[str, Any], speedups: dict[tuple[Policy, str], list[float]],
                policies: tuple[Policy, ...], seeds: int) -> list[dict[str, Any]]:
    """`bench --regimes`' cells per prompt set: the first policy's speedup (median over prompts of
    each prompt's median over seeds and repeats) against the best rival (fixed K or always-draft;
    the target alone, 1.0, where none beats it), default / best; and that ratio's range over the
    seeds (each seed's two repeats alone)."""
    default, rivals = policies[0], [p for p in policies[1:] if p.kind in ("fixed", "always")]
    rows = []
    for name in ("tuned", "heldout"):
        ids = [i for i, t in traces.items() if t["set"] == name]
        if not ids:
            continue

        def speedup(policy: Policy, seed: int | None = None) -> float:
            pick = (lambda v: v) if seed is None else (lambda v: v[2 * seed:2 * seed + 2])
            return st.median(st.median(pick(speedups[(policy, i)])) for i in ids)

        def versus(seed: int | None = None) -> tuple[float, str, float]:
            best, label = max(((speedup(p, seed), p.label) for p in rivals), default=(1.0, "target alone"))
            if best <= 1.0:
                best, label = 1.0, "target alone"
            return speedup(default, seed) / best, label, best
        ratio, best_label, best = versus()
        per_seed = [versus(s)[0] for s in range(seeds)]
        rows.append({"set": name, "prompts": len(ids), "speedup": speedup(default), "best": best_label,
                     "best_speedup": best, "ratio": ratio, "ratio_low": min(per_seed), "ratio_high": max(per_seed),
                     "holds": ratio >= 0.97,
                     **{p.label: speedup(p) for p in policies}})
    return rows


def costs_for(bench: Path | None, *, profile: str | None = None, loop_costs: bool = False) -> Costs:
    """What a replayed round costs: a profile's numbers, or the bench's (`loop_costs`: its runs'
    timings of each fixed K, runs.csv beside it; else its micro block)."""
    if profile is not None:
        return Costs.from_profile(load_profile(profile))
    assert bench is not None
    if not loop_costs:
        return Costs(json.loads(bench.read_text())["micro"])
    runs = bench.parent / "runs.csv"
    if not runs.is_file():
        sys.exit(f"error: {runs} does not exist; --loop-costs reads the bench's runs")
    with runs.open(newline="") as f:
        rows = list(csv.DictReader(f))
    # the draft of the fixed-K configurations ("Q4_1 K=8"): a bench without a micro block
    # (bench --regimes) names it only there
    drafts = sorted({r["config"].rsplit(" K=", 1)[0] for r in rows if " K=" in r["config"]})
    if not drafts:
        sys.exit(f"error: {runs} has no fixed-K runs; --loop-costs prices verify rows from them")
    return Costs.from_runs(rows, drafts[0])


def simulate(path: Path, bench: Path | None, noise: float, seeds: int, policies: tuple[Policy, ...], *,
             loop_costs: bool = False, profile: str | None = None, show_losses: bool = False) -> None:
    traces = json.loads(path.read_text())
    costs = costs_for(bench, profile=profile, loop_costs=loop_costs)
    cell = {pid: f"{'held-out' if t['set'] == 'heldout' else 'tuned'} {t['category']}" for pid, t in traces.items()}
    first = policies[0]
    generations: list[tuple[dict[str, Any], float, list[Any]]] = []
    speedups = replay(traces, costs, noise, seeds, policies, traced=first if show_losses and first.kind != "fixed" else None,
                      generations=generations)
    cells = sorted(set(cell.values()))

    def per_cell(f) -> str:
        return " | ".join(f"{st.median(f(i) for i in cell if cell[i] == c):.3f}" for c in cells)
    print(f"costs ({costs.source}): target step {costs.a * 1e3:.2f} ms, draft step {costs.b * 1e3:.2f} ms "
          f"(first call {costs.f * 1e3:.2f}), verify of 3/5/9 rows {costs.verify_s(2) * 1e3:.2f}/"
          f"{costs.verify_s(4) * 1e3:.2f}/{costs.verify_s(8) * 1e3:.2f} ms, Python {costs.python0 * 1e3:.2f} ms a round "
          f"+ {costs.python1 * 1e3:.2f} a draft + {costs.python_ctl * 1e3:.2f} controlled "
          f"({costs.python_ctl_none * 1e3:.2f} where it ran the target alone); "
          + (f"a change of the target's rows: two steps at max({costs.uncaptured * 1e3:.2f} ms, the step's "
             f"+ {costs.launch * 1e3:.2f}), "
             f"+ {costs.capture * 1e3:.2f} to capture; " if costs.uncaptured is not None else "")
          + f"noise {noise} a round; {seeds} seed(s)\n")
    print("| policy | " + " | ".join(cells) + " |\n|---|" + "---:|" * len(cells))
    for policy in policies:
        print(f"| {policy.label} | " + per_cell(lambda i: st.median(speedups[(policy, i)])) + " |")
    if generations:
        print_losses(split(generations, costs), first.label, costs.source, noise, seeds)
    for other in policies[1:]:
        print(f"| {first.label} / {other.label}, per prompt | "
              + per_cell(lambda i: st.median(speedups[(first, i)]) / st.median(speedups[(other, i)])) + " |")
    if first.kind == "default" and any(p.kind in ("fixed", "always") for p in policies[1:]):
        rows = regime_rows(traces, speedups, policies, seeds)
        print(f"\nAs `bench --regimes` (speedup: median over prompts; vs best: {first.label} / max(1, best fixed K or "
              f"always-draft); [min-max over the {seeds} seed(s)])\n")
        print("| set | prompts | " + " | ".join(p.label for p in policies) + " | best rival | vs best | holds (>= 0.97) |")
        print("|---|---:|" + "---:|" * len(policies) + "---|---|---|")
        for r in rows:
            print(f"| {r['set']} | {r['prompts']} | " + " | ".join(f"{r[p.label]:.2f}" for p in policies)
                  + f" | {r['best']} ({r['best_speedup']:.2f}x) | {r['ratio']:.3f} [{r['ratio_low']:.3f}-"
                  f"{r['ratio_high']:.3f}] | {'yes' if r['holds'] else 'NO'} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record", help="record acceptance traces of the default pair")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--max-tokens", type=int, default=MAX_TOKENS)
    r.add_argument("--k-max", type=int, default=K_MAX, help="the most draft tokens scored from each position")
    r.add_argument("--limit", type=int, default=0,
                   help="the first N prompts of each category of each set only (one of each cell first); 0: all")
    r.add_argument("--first", type=int, default=0, help="the first N prompts of each set only (the bench's --limit); 0: all")
    r.add_argument("--own-cache", action="store_true",
                   help="draft from the draft's own cache of the history, not the target's (a target of another network)")
    r.add_argument("--target", help="a target of the draft's network other than the default pair's (e.g. embedded:smollm2:Q8_0)")
    s = sub.add_parser("simulate", help="replay the traces through the controller")
    s.add_argument("traces", type=Path)
    s.add_argument("--bench", type=Path, default=Path("docs/bench/epyc-first/bench.json"),
                   help="a bench.json whose measured costs price the rounds")
    s.add_argument("--profile", help=f"price the rounds with a cost profile instead: {', '.join(PROFILES)}, or a "
                                     ".json/.toml file of its keys (see PROFILES)")
    s.add_argument("--noise", type=float, default=0.0, help="sd of a round's log-normal time noise (0: none)")
    s.add_argument("--seeds", type=int, default=1)
    s.add_argument("--loop-costs", action="store_true",
                   help="price rounds with the costs the bench's runs measured (runs.csv beside --bench), not its micro block")
    s.add_argument("--losses", action="store_true",
                   help="also break the first policy's gain over the target alone down by the kind of round")
    s.add_argument("--policies", nargs="+", default=list(DEFAULT_POLICIES),
                   help="configurations to replay, the first compared with each of the others: default|model|always[:DRAFT_MAX"
                        "[:P_MIN[:DRAFT_EXTEND]]][@KEY=VAL,...] (ControlSettings overrides, e.g. default@confirm=0) "
                        "or K<N> (default: %(default)s)")
    args = ap.parse_args()
    if args.cmd == "record":
        record(args.out, args.max_tokens, args.k_max, args.limit, target_ref=args.target, first=args.first,
               own_cache=args.own_cache)
    else:
        if args.profile and args.loop_costs:
            sys.exit("error: --loop-costs reads a bench's runs; a --profile gives its own costs")
        for p in (args.traces,) if args.profile else (args.traces, args.bench):
            if not p.is_file():
                sys.exit(f"error: {p} does not exist; record traces first, or pass --bench FILE")
        simulate(args.traces, None if args.profile else args.bench, args.noise, args.seeds,
                 tuple(Policy.parse(p) for p in args.policies), loop_costs=args.loop_costs, profile=args.profile,
                 show_losses=args.losses)


if __name__ == "__main__":
    main()
