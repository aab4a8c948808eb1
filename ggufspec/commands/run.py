"""Generate with a target model sped up by a draft model (or prompt lookup).

With no --target/--draft, uses the embedded default pair (SmolLM2-135M-Instruct: an F32 target
where scripts/build_exact_kernels.sh has been run, else Q8_0, its Q4_1 draft and prompt lookup).
With several drafters, a controller picks each round which one proposes and how many tokens,
from the throughput it measures (0: the target alone). Greedy (--temp 0,
the default) output is token-identical to the target alone; sampling keeps the target's
distribution (rejection sampling, Leviathan et al. / Chen et al. 2023).

--compare runs the target alone too, alternated with the speculative run over --repeats pairs
(default 3, ABBA, after an uncounted warm-up of both), and prints the median speedup with its
min-max, each repeat's tok/s, and a NOISY note with the machine's load when a repeat's speedup
lies beyond +-10% of the median.

examples:
  ggufspec run -p "Write a haiku about the sea" --chat --compare --repeats 5
  ggufspec run --target ./big.gguf --draft ./small.gguf -p "def quicksort(xs):" -n 256 -v
  ggufspec run --draft lookup -p "$(cat notes.txt) Summarise the notes above." --json
  ggufspec run --draft embedded:smollm2:Q4_1 --draft lookup -p "Rewrite: $(cat a.py)" -v
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from ggufspec.commands import (
    add_draft_kv_argument,
    add_model_arguments,
    add_remember_argument,
    add_rpc_argument,
    add_sampling_arguments,
    pair_settings,
)
from ggufspec.commands.printing import Printed, stream
from ggufspec.commands.speculation_args import add_speculation_arguments, speculative_settings
from ggufspec.errors import UserError


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_arguments(p.add_argument_group("models"), repeatable_draft=True,
                        draft_help="draft model reference, or 'lookup' for prompt lookup (repeatable: several "
                                   "drafters); 'none' for the target alone")
    g = p.add_argument_group("generation")
    g.add_argument("-p", "--prompt", required=True, help="prompt text")
    g.add_argument("--chat", action="store_true", help="wrap the prompt as a user message with the GGUF chat template")
    g.add_argument("-n", "--max-tokens", type=int, default=128, metavar="N", help="tokens to generate (default 128)")
    g.add_argument("--stop", action="append", default=[], metavar="TEXT", help="stop string (repeatable)")
    add_sampling_arguments(p.add_argument_group("sampling"))
    add_speculation_arguments(p.add_argument_group("speculation"))
    r = p.add_argument_group("runtime")
    r.add_argument("--ngl", default="auto", metavar="N|all|auto", help="target layers on the GPU (default auto: planner)")
    r.add_argument("--ngld", default="auto", metavar="N|all|auto", help="draft layers on the GPU (default auto)")
    add_rpc_argument(r)
    add_draft_kv_argument(r)
    add_remember_argument(r)
    r.add_argument("--ctx", type=int, default=4096, metavar="N", help="context size in tokens (default 4096)")
    r.add_argument(
        "--cache-type", default="auto", choices=("auto", "f16", "q8_0", "q4_0", "f32"), metavar="TYPE",
        help="target KV cache: auto | f16 | q8_0 | q4_0 | f32 (default auto: q8_0 on the CPU, where it keeps "
        "greedy output bit-identical to the target alone at any length; f16 on a GPU)",
    )
    r.add_argument("--threads", type=int, default=None, metavar="N", help="CPU threads (default: physical cores)")
    r.add_argument("--llama-log", action="store_true", help="show llama.cpp's own log")
    o = p.add_argument_group("output")
    o.add_argument("-v", "--verbose", action="store_true", help="colour each token by where it came from")
    o.add_argument("--json", action="store_true", help="print one JSON object instead of streaming text")
    o.add_argument("--compare", action="store_true",
                   help="also run the target alone beside the speculative run, in lockstep (interleaved token "
                        "by token, each on its own context) over --repeats pairs after an uncounted warm-up; "
                        "print the median speedup, its range and the machine's load")
    o.add_argument("--repeats", type=int, default=None, metavar="N",
                   help="with --compare: pairs of runs (default 3); the speedup is their median")
    o.add_argument("--sequential", action="store_true",
                   help="with --compare: run the two sides one after the other (ABBA) on the pair's contexts "
                        "instead of in lockstep on two (no second target context: less memory, noisier figures)")


def run(args: argparse.Namespace) -> int:
    from ggufspec.llama.lib import set_verbose
    from ggufspec.loop.sampling import SamplingSettings
    from ggufspec.models.resolve import resolve_pair_refs
    from ggufspec.runtime import load_pair

    set_verbose(args.llama_log)
    # Validate every setting before loading anything.
    sampling = SamplingSettings(
        temperature=args.temp, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p, seed=args.seed
    )
    speculative = speculative_settings(args)
    speculative.rule_for(sampling)
    if args.max_tokens < 1:
        raise UserError(f"-n must be >= 1, got {args.max_tokens}")
    if args.repeats is not None and not args.compare:
        raise UserError("--repeats counts the runs of --compare; add --compare or drop --repeats")
    if args.sequential and not args.compare:
        raise UserError("--sequential is how --compare runs its two sides; add --compare or drop --sequential")
    repeats = 3 if args.repeats is None else args.repeats
    if repeats < 1:
        raise UserError(f"--repeats must be >= 1, got {repeats}")
    settings = pair_settings(args)
    refs = resolve_pair_refs(target=args.target, draft=args.draft, pair=args.pair)

    with load_pair(target=refs.target, draft=list(refs.drafts) or "none", settings=settings) as pair:
        if pair.drafters and sampling.greedy and pair.inexact_greedy:
            sys.stderr.write(f"note: {pair.inexact_greedy}\n")
        messages = [{"role": "user", "content": args.prompt}] if args.chat else None
        tokens = pair.encode(prompt=None if args.chat else args.prompt, messages=messages)
        if args.compare:
            comparison, gen, baseline = _compare(args, pair, tokens, sampling, speculative, repeats=repeats)
            _report(args, pair, gen, baseline, sampling, comparison)
            return 0
        gen = pair.generate(
            prompt_tokens=tokens, max_tokens=args.max_tokens, sampling=sampling,
            speculative=speculative, stop=args.stop,
        )
        if args.json:
            gen.run()
        else:
            stream(gen, colour=args.verbose, drafters=[d.name for d in pair.drafters])
        _report(args, pair, gen, None, sampling)
    return 0


WARMUP_TOKENS = 16  # per side: pages both models' weights in and fills llama.cpp's buffers


def _compare(args, pair, tokens, sampling, speculative, *, repeats: int):
    """Warm-up, then `repeats` pairs of speculative / target-alone runs (ggufspec.compare): in
    lockstep on two sets of contexts, or with --sequential (or where a second target context
    cannot be made) one after the other, ABBA, on the pair's. The first speculative run streams
    (without --json). Returns (Comparison, first speculative Generation, first target-alone
    Generation)."""
    from ggufspec.bench.lockstep import interleave, own_stats
    from ggufspec.compare import ALONE, SPECULATIVE, compare
    from ggufspec.loop.engine import generate as start

    lanes = [(pair.target_ctx, pair.drafters)]
    if not args.sequential:
        try:  # a second target context and copies of the drafters, on the loaded weights
            lanes.append(pair.fork(pair.drafters))
        except Exception as e:  # (llama.cpp could not allocate it: the device or the memory is full)
            sys.stderr.write(f"note: --compare runs its two sides one after the other: a second target context "
                             f"could not be made ({str(e).splitlines()[0] if str(e) else type(e).__name__})\n")
    alone_controller = pair.new_controller()  # (unused by the target alone; its `begin` leaves the pair's be)
    first: dict[str, object] = {}

    def generate(side: str, n: int, spec=speculative, lane: int = 0):
        target, drafters = lanes[lane]
        return start(
            target=target, prompt=tokens, drafters=() if side == ALONE else drafters, max_tokens=n,
            sampling=sampling, speculative=spec, stop=args.stop,
            controller=alone_controller if side == ALONE else pair.controller,
            cache_prompt=False,  # every run a cold prefill: like against like
        )

    def warmup() -> int:
        # the speculative warm-up drafts a fixed length: it runs both models and a multi-row
        # verify, and the pair's controller (which learns across generations) never sees cold timings
        n = min(WARMUP_TOKENS, args.max_tokens)
        for lane in range(len(lanes)):  # (each context's first use: its buffers paged in)
            generate(SPECULATIVE, n, speculative.with_length(fixed=True, always_draft=False), lane=lane).run()
            generate(ALONE, n, lane=lane).run()
        return n

    def streamed(side: str, gen):
        """`gen`, printing its text as it goes where it is the first speculative run (without --json)."""
        if side == SPECULATIVE and SPECULATIVE not in first and not args.json:
            return Printed(gen, colour=args.verbose, drafters=[d.name for d in pair.drafters])
        return gen

    def run_one(repeat: int, side: str):
        gen = generate(side, args.max_tokens)
        for _ in streamed(side, gen):
            pass
        first.setdefault(side, gen)
        return _measured(gen, side)

    def run_both(repeat: int, sides: tuple[str, str]):
        # the speculative side on lane repeat % 2, the target alone on the other: a context keeps
        # its own speed for the process, a few percent apart from another's (ggufspec.bench.ours)
        lane = {SPECULATIVE: repeat % 2, ALONE: 1 - repeat % 2}
        gens = {side: generate(side, args.max_tokens, lane=lane[side]) for side in sides}
        busy = interleave([streamed(side, gens[side]) for side in sides])
        out = {}
        for side, seconds in zip(sides, busy):
            gen = gens[side]
            gen.stats = own_stats(gen.stats, seconds)  # (its own steps' seconds, not the other side's)
            first.setdefault(side, gen)
            out[side] = _measured(gen, side)
        return out

    if len(lanes) > 1:
        comparison = compare(run_both=run_both, repeats=repeats, greedy=sampling.greedy, warmup=warmup)
    else:
        comparison = compare(run=run_one, repeats=repeats, greedy=sampling.greedy, warmup=warmup)
    return comparison, first[SPECULATIVE], first[ALONE]


def _measured(gen, side: str):
    """One counted run's figures; `side` is speculative or alone (a seam: tests replace it to inject a spread)."""
    from ggufspec.compare import Drafting, Measured

    s = gen.stats
    drafting = Drafting(rounds=s.rounds, drafted=s.drafted, accepted=s.accepted, drafter_rounds=dict(s.drafter_rounds))
    return Measured(gen_tps=s.gen_tps, generated_tokens=s.generated_tokens, tokens=tuple(gen.tokens), drafting=drafting)


def _report(args, pair, gen, baseline, sampling, comparison=None) -> None:
    s = gen.stats
    stats = {
        "prompt_tokens": s.prompt_tokens,
        "generated_tokens": s.generated_tokens,
        "prompt_tps": round(s.prompt_tps, 2),
        "gen_tps": round(s.gen_tps, 2),
        "drafted": s.drafted,
        "accepted": s.accepted,
        "accept_rate": round(s.accept_rate, 4),
        "mean_accepted_len": round(s.mean_accepted_len, 3),
        "draft_s": round(s.draft_s, 4),
        "verify_s": round(s.verify_s, 4),
        "overhead_s": round(s.overhead_s, 4),
        "rounds": s.rounds,
        "paused_rounds": s.paused_rounds,
        "k_hist": {str(k): n for k, n in s.k_hist.items()},
        "drafter_rounds": dict(s.drafter_rounds),
        "accept_rate_by_position": [round(x, 3) for x in s.accept_rate_by_position],
        "stop_reason": s.stop_reason,
    }
    draft = "+".join(pair.draft_name(d) for d in pair.drafters) or "none"
    result: dict = {"text": gen.text, "target": str(pair.target_path), "draft": draft, "stats": stats,
                    "devices": [d.as_dict() for d in pair.devices],
                    "remembered_rounds": pair.remembered_rounds}
    bound = _bound(gen, baseline)
    if bound is not None:
        result["bound"] = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(bound).items()}
    load = None
    if comparison is not None:
        import statistics

        from ggufspec.compare import ALONE
        from ggufspec.sysload import load_now

        load = load_now()  # its 1-min load average and 60 s CPU pressure span the runs just done
        sp = comparison.spread
        # stats and text: the first speculative run; baseline: the first target-alone run's text,
        # the median tok/s over repeats; speedup: the median of the per-repeat speedups
        result["baseline"] = {"text": baseline.text, "gen_tps": round(statistics.median(comparison.tps(ALONE)), 2)}
        result["speedup"] = round(sp.median, 3) if sp else None
        result["identical"] = comparison.identical
        result["compare"] = comparison.to_dict(load=load)
    if args.json:
        print(json.dumps(result, ensure_ascii=False))
        return
    if s.stop_reason == "context":  # --json says so in stats.stop_reason
        sys.stderr.write(f"note: stopped after {s.generated_tokens} tokens: the prompt and the reply filled the "
                         f"context of {pair.target_ctx.n_ctx} tokens; raise --ctx for a longer reply\n")
    from rich.table import Table

    from ggufspec.commands.tables import table_console

    table = Table()
    table.add_column("metric")
    first = " (first run)" if comparison is not None and len(comparison.speedups) > 1 else ""
    table.add_column("speculative" + first, justify="right")
    if baseline is not None:
        table.add_column("target alone" + first, justify="right")
    rows = [
        ("prompt tokens/s", f"{s.prompt_tps:.1f}", f"{baseline.stats.prompt_tps:.1f}" if baseline else None),
        ("generation tokens/s", f"{s.gen_tps:.1f}", f"{baseline.stats.gen_tps:.1f}" if baseline else None),
        ("generated tokens", str(s.generated_tokens), str(baseline.stats.generated_tokens) if baseline else None),
        ("accept rate", f"{s.accept_rate:.1%} ({s.accepted}/{s.drafted})", "" if baseline else None),
        ("mean accepted length", f"{s.mean_accepted_len:.2f}", "1.00" if baseline else None),
        ("rounds / paused (drafting did not pay)", f"{s.rounds} / {s.paused_rounds}", str(baseline.stats.rounds) if baseline else None),
        ("rounds per drafter", " ".join(f"{n} {c}" for n, c in s.drafter_rounds.items()) or "-", "" if baseline else None),
        ("rounds per draft length", " ".join(f"K={k}: {c}" for k, c in s.k_hist.items()) or "-", "" if baseline else None),
        ("time: draft / verify / python", f"{s.draft_s:.2f} / {s.verify_s:.2f} / {s.overhead_s:.2f} s",
         f"- / {baseline.stats.verify_s:.2f} / {baseline.stats.overhead_s:.2f} s" if baseline else None),
    ]
    if pair.drafters:  # where the controller started (ggufspec.remember)
        rows.append(("controller learnt before", f"{pair.remembered_rounds} rounds" if pair.remembered_rounds
                     else "nothing (fresh)", "" if baseline else None))
    if bound is not None:
        v = "?" if bound.verify is None else f"{bound.verify:.2f}"
        # what the theory allows at the costs this run measured (--json: "bound"; docs/BENCH.md)
        rows.append(("Theorem 3.8 bound", f"{bound.speedup:.2f}x", ""))  # (a bound needs the target alone's run)
        rows.append(("its alpha K c v share", f"{bound.alpha:.2f} {bound.k:.1f} {bound.c:.2f} {v} {bound.share:.0%}", ""))
    for name, a, b in rows:
        table.add_row(name, a, *([b] if baseline is not None else []))
    err = table_console(stderr=True, highlight=False, fit=[table])
    # (on a line of its own: a table's title wraps at the table's width, and file names are long)
    err.print(f"target {pair.target_path.name}  drafts {pair.draft_names()}", markup=False, soft_wrap=True)
    err.print(table)
    if comparison is not None:
        from ggufspec.compare import report_lines

        for line in report_lines(comparison, load=load):
            err.print(line, markup=False, soft_wrap=True)


def _bound(gen, baseline):
    """Theorem 3.8 at the speculative run's own costs, the target alone's run giving the step
    (ggufspec.bench.expected.measured_bound); None without a target-alone run or a drafting round."""
    if baseline is None or not baseline.stats.rounds:
        return None
    from ggufspec.bench.expected import measured_bound
    from ggufspec.bench.ours import rejections

    s = gen.stats
    return measured_bound(
        accepted=s.accepted, rejections=rejections(gen), drafted=s.drafted,
        drafting_rounds=s.rounds - s.k_hist.get(0, 0), rounds=s.rounds, draft_s=s.draft_s, verify_s=s.verify_s,
        step_s=baseline.stats.verify_s / baseline.stats.rounds)
