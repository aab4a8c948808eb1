"""Measure speedup, accept rate and peers side by side, with plots.

Runs the target alone and speculative configurations alternately on the same prompts, takes
medians over repeats and prompts, and writes bench.json, runs.csv, bench.md and PNG plots into
--out. Prompts: both built-in sets by default (--prompt-set tuned|heldout|both): `tuned`, the chat,
code, summarising, maths and long-answer prompts the defaults were tuned on, and `heldout`, 24
prompts written fresh and never used for tuning; or --prompts FILE.jsonl. Figures are reported
over all prompts and per set.

Sweeps: draft length K (fixed), drafts (the given ones, quantizations of the target made on the
fly with --draft-quants, prompt lookup), fixed vs adaptive length, and at --temp the rejection vs
match acceptance rules. With no --target/--draft: the embedded default pair.

Peers on the same files: llama.cpp's native llama-speculative-simple and llama-bench (build them
once with scripts/build_native.sh; without them the bench says so and vs_native is null),
llama_cpp.Llama with prompt-lookup drafting, and transformers assisted generation when torch and
transformers are importable.

Each JSON summary holds `speedup` (median over prompts of speculative / target-alone generation
tokens/s for the default configuration: every draft, the controller choosing drafter and
length each round) and `vs_native`, over all prompts of the run; `sets` holds the same per prompt
set. Each draft also runs alone (controlled, always-draft, fixed K).

examples:
  ggufspec bench --quick --out bench-out
  ggufspec bench --sweep-k 1,2,4,8 --draft-quants Q8_0,Q4_0,Q2_K --repeats 3
  ggufspec bench --prompt-set heldout --repeats 2 --sweep-k 2,4,8
  ggufspec bench --target ./big.gguf --draft ./small.gguf lookup --prompts mine.jsonl --json
  ggufspec bench --regimes --limit 4 --repeats 2 -n 64     # the cost-regime grid (regimes.md)
  ggufspec bench --regimes default,as-1b,as-7b --out gpu-out
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ggufspec.commands import add_draft_kv_argument, add_pair_argument, add_rpc_argument
from ggufspec.commands.speculation_args import add_speculation_arguments, speculative_settings
from ggufspec.errors import UserError
from ggufspec.settings import Layers, check_threads, parse_layers

QUICK_PROMPTS = {"chat": 3, "code": 1, "summarise": 1}  # per prompt set
FULL_DRAFT_QUANTS = "Q4_0,Q2_K"


def add_arguments(p: argparse.ArgumentParser) -> None:
    m = p.add_argument_group("models")
    m.add_argument("--target", metavar="REF", help="target model (default: the embedded default target)")
    m.add_argument("--draft", metavar="REF", nargs="+", action="extend",
                   help="one or more drafts: model references or 'lookup' (repeatable); the default configuration drafts with all of them (not with --draft-quants, which run alone to compare)")
    add_pair_argument(m)
    m.add_argument("--draft-quants", metavar="Q,Q", default=None,
                   help=f"also draft with these quantizations of the target, made on the fly "
                        f"(default: {FULL_DRAFT_QUANTS} without --quick and --draft)")
    w = p.add_argument_group("workload")
    w.add_argument("--prompt-set", choices=("tuned", "heldout", "both"), default=None,
                   help="built-in prompts: tuned (the set the defaults were tuned on), heldout (written fresh, "
                        "never used for tuning) or both (default)")
    w.add_argument("--prompts", metavar="FILE.jsonl", help="prompt file, one {id, category, messages} a line (instead of the built-in sets)")
    w.add_argument("--category", metavar="NAME", action="append", default=None, help="only prompts of this category (repeatable)")
    w.add_argument("--limit", type=int, default=None, metavar="N", help="at most N prompts of each set")
    w.add_argument("-n", "--max-tokens", type=int, default=128, metavar="N", help="new tokens per run (default 128)")
    w.add_argument("--repeats", type=int, default=None, metavar="N", help="repeats of every run (default 3; 1 with --quick)")
    w.add_argument("--quick", action="store_true",
                   help="5 prompts of each set, 1 repeat, K in 2,4,8, no quantization sweep: under 5 minutes a set on 2 cores")
    g = p.add_argument_group("cost regimes")
    g.add_argument("--regimes", nargs="?", const="standard", default=None, metavar="LIST",
                   help="the cost-regime grid instead of one pair: default,q8_0,q4_1,gemma,as-1b "
                        "('standard', the default), as-7b, or 'all'; one bench each (target alone, fixed K, "
                        "always-draft, the default; lockstep, greedy) and regimes.md over them")
    s = p.add_argument_group("sweeps")
    # --sweep-k keeps its name (K: the fixed draft length of each swept configuration, "Q4_1 K=4");
    # its values are sweep_draft_lens from here on
    s.add_argument("--sweep-k", default=None, metavar="K,K", help="fixed draft lengths to sweep (default 1,2,4,8; 2,4,8 with --quick)")
    s.add_argument("--sweep-ngl", default=None, metavar="N,N|all",
                   help="instead of the usual bench: target alone and speculative at each count of target layers "
                        "offloaded (GPUs, or RPC workers with --rpc), e.g. 0,8,16,24,all")
    s.add_argument("--temp", type=float, default=0.8, metavar="T", help="temperature of the rejection vs match sweep (0 skips it; default 0.8)")
    s.add_argument("--seed", type=int, default=1234, help="base seed of the sampled runs")
    add_speculation_arguments(p.add_argument_group(
        "speculation (the default configuration's; --draft-max caps every controlled one, --draft-min, "
        "--draft-p-min, --draft-extend and --variant hold for all of ours, --accept picks the sampling sweep's rule)"))
    r = p.add_argument_group("peers and runtime")
    r.add_argument("--native-dir", metavar="DIR", help="llama.cpp binaries (default: where scripts/build_native.sh puts them)")
    r.add_argument("--no-native", action="store_true", help="skip llama-speculative-simple and llama-bench")
    r.add_argument("--no-transformers", action="store_true", help="skip the transformers peer (its runs are slow)")
    r.add_argument("--no-peers", action="store_true", help="skip every peer (native, llama-cpp-python, transformers)")
    add_rpc_argument(r)
    add_draft_kv_argument(r)
    r.add_argument("--sequential", action="store_true",
                   help="run our configurations one after the other instead of in lockstep (each on its own "
                        "contexts, a round at a time, so that a slow second on a shared machine costs them alike)")
    r.add_argument("--ctx", type=int, default=2048, metavar="N", help="context size (default 2048)")
    r.add_argument("--threads", type=int, default=None, metavar="N", help="CPU threads (default: physical cores)")
    r.add_argument("--ngl", default="auto", metavar="N|all|auto",
                   help="target layers on the GPU (default auto: the planner, as run does; the peers get the same count)")
    r.add_argument("--ngld", default="auto", metavar="N|all|auto", help="draft layers on the GPU (default auto)")
    o = p.add_argument_group("output")
    o.add_argument("--out", default="bench-out", metavar="DIR", help="output directory (default bench-out)")
    o.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    o.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")


def _ints(text: str, flag: str) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"{flag} takes comma-separated integers like 1,2,4,8, got {text!r}") from None
    if not vals or any(v < 1 for v in vals):
        raise UserError(f"{flag} takes positive integers, got {text!r}")
    return vals


def run(args: argparse.Namespace) -> int:
    from ggufspec import bench
    from ggufspec.loop.sampling import SamplingSettings
    from ggufspec.models.resolve import LOOKUP, resolve_pair_refs

    # ---- validate everything before loading anything ----------------------------------------
    speculative = speculative_settings(args)  # the one draft-max limit and message (settings.DRAFT_MAX_LIMIT)
    if not args.temp >= 0:  # NaN too
        raise UserError(f"--temp must be >= 0, got {args.temp}")
    speculative.rule_for(SamplingSettings(temperature=args.temp))  # --accept greedy and the sampling sweep
    sweep_draft_lens = _ints(args.sweep_k or ("2,4,8" if args.quick else "1,2,4,8"), "--sweep-k")
    for n in sweep_draft_lens:
        speculative.with_length(draft_max=n, draft_min=0)
    if args.max_tokens < 2:
        raise UserError(f"-n must be >= 2, got {args.max_tokens}")
    if args.threads is not None:
        check_threads(args.threads)
    if args.limit is not None and args.limit < 1:
        raise UserError(f"--limit must be >= 1, got {args.limit}")
    repeats = args.repeats if args.repeats is not None else (1 if args.quick else 3)
    if args.prompts and args.prompt_set:
        raise UserError("give --prompts FILE or --prompt-set, not both")
    prompts = bench.load_prompts(args.prompts) if args.prompts else bench.load_prompt_sets(args.prompt_set or "both")
    if args.category:
        prompts = [p for p in prompts if p.category in args.category]
        if not prompts:
            raise UserError(f"no prompts of category {', '.join(args.category)}")
    if args.quick and not args.prompts and not args.category:
        prompts = bench.pick_prompts(prompts, QUICK_PROMPTS)
    if args.limit:
        prompts = bench.limit_per_set(prompts, args.limit)
    native: bool | Path = not (args.no_native or args.no_peers)
    if native and args.native_dir:
        d = Path(args.native_dir).expanduser()
        if not (d / "llama-speculative-simple").is_file():
            raise UserError(f"no llama-speculative-simple in {d}; run scripts/build_native.sh or drop --native-dir")
        native = d

    layers = {"n_gpu_layers": parse_layers(args.ngl, flag="--ngl"),
              "n_gpu_layers_draft": parse_layers(args.ngld, flag="--ngld")}
    if args.sweep_ngl is not None or args.rpc:
        if args.ngl != "auto":
            raise UserError("--sweep-ngl sets the target's layers itself; drop --ngl")
        return _sweep_ngl(args, prompts, repeats, speculative=speculative, draft_layers=layers["n_gpu_layers_draft"])
    if args.regimes is not None:
        if args.target or args.draft or args.pair or args.draft_quants:
            raise UserError("--regimes names its own targets and drafts; drop --target/--draft/--pair/--draft-quants")
        return _regimes(args, prompts, repeats, sweep_draft_lens=_ints(args.sweep_k or "2,4,8", "--sweep-k"),
                        speculative=speculative, layers=layers)

    # nothing named: the default pair's draft and lookup; a target alone: lookup
    refs = resolve_pair_refs(target=args.target, draft=args.draft, pair=args.pair, extra_drafts=True,
                             target_only_drafts=[LOOKUP])
    target = refs.target
    draft_refs = list(refs.drafts)
    if not draft_refs:
        raise UserError("bench compares drafters with the target alone; give a --draft other than none")
    quants = args.draft_quants
    if quants is None and not args.quick and not args.draft:
        quants = FULL_DRAFT_QUANTS
    drafts = [bench.DraftSpec(label=bench.draft_label(ref), ref=ref) for ref in draft_refs]
    seen = {d.label for d in drafts}
    if quants:
        for d in bench.derive_quant_drafts(target, quants.split(",")):
            if d.label not in seen:
                drafts.insert(len(drafts) - (1 if drafts[-1].ref == bench.LOOKUP else 0), d)
                seen.add(d.label)

    plan = bench.make_plan(
        prompts=prompts, target=target, drafts=drafts, sweep_draft_lens=sweep_draft_lens, speculative=speculative,
        temperature=args.temp, repeats=repeats, max_tokens=args.max_tokens, n_ctx=args.ctx,
        n_threads=args.threads, draft_kv=args.draft_kv, sweep_all_drafts=not args.quick, native=native,
        native_draft_lens=None, llama_cpp_peer=not args.no_peers,
        transformers_peer=not (args.no_peers or args.no_transformers or args.quick), quick=args.quick, seed=args.seed,
        lockstep=not args.sequential, **layers,
    )
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} exists and is not a directory")

    # ---- run, with a progress bar on stderr ---------------------------------------------------
    from rich.console import Console

    err = Console(stderr=True, highlight=False)
    if plan.native_bin is None and native:
        err.print(f"[yellow]llama.cpp native peers not found in {bench.native_dir()}: "
                  "run scripts/build_native.sh once to measure against them[/]")
    result = _run_with_bar(plan, console=err)
    files = bench.write_outputs(result, out, plots=not args.no_plots)

    s = result.summary
    if args.json:
        head = {k: v for k, v in s.items() if k not in ("configs", "by_category", "sets")}
        head["sets"] = {name: {k: v for k, v in sub.items() if k not in ("configs", "prompts")}
                        for name, sub in s.get("sets", {}).items()}
        print(json.dumps({"summary": head, "files": {k: [str(x) for x in v] if isinstance(v, list) else str(v)
                                                      for k, v in files.items()}}, indent=1))
        return 0
    _print_table(result)
    sys.stdout.write(f"wrote {out}/bench.json, runs.csv, bench.md" + (", *.png" if files.get("plots") else "") + "\n")
    return 0


def _run_with_bar(plan, *, console, prefix: str = ""):
    """`bench.run_bench(plan)` with a transient progress bar on `console` (stderr)."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from ggufspec import bench

    with Progress(TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), TimeRemainingColumn(), console=console, transient=True) as bar:
        task = bar.add_task("bench", total=bench.count_runs(plan))

        def progress(label: str, done: int, total: int) -> None:
            bar.update(task, description=f"{prefix}{label}"[:60].ljust(60), completed=done, total=total)

        return bench.run_bench(plan, progress=progress)


def _regimes(args: argparse.Namespace, prompts: list, repeats: int, *, sweep_draft_lens: list[int],
             speculative, layers: dict) -> int:
    """`--regimes`: one lockstep bench per cost regime into --out/REGIME, then regimes.md/json."""
    from rich.console import Console

    from ggufspec import bench
    from ggufspec.bench.machine import machine_info
    from ggufspec.bench.regimes import parse_regimes, regime_plan, regime_rows, regimes_markdown, unavailable
    from ggufspec.atomic import write_atomic

    regimes = parse_regimes(args.regimes)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} exists and is not a directory")
    err = Console(stderr=True, highlight=False)
    rows: list[dict] = []
    for regime in regimes:
        why = unavailable(regime)
        if why:
            err.print(f"[yellow]regime {regime.name} skipped: {why}[/]")
            rows += regime_rows(regime, None, note=why)
            continue
        plan = regime_plan(regime, prompts=prompts, sweep_draft_lens=sweep_draft_lens, speculative=speculative,
                           repeats=repeats,
                           max_tokens=args.max_tokens, n_ctx=args.ctx, n_threads=args.threads, seed=args.seed,
                           **layers)
        result = _run_with_bar(plan, console=err, prefix=f"{regime.name}: ")
        bench.write_outputs(result, out / regime.name, plots=not args.no_plots)
        rows += regime_rows(regime, result.summary)
        err.print(f"regime {regime.name}: speedup {result.summary.get('speedup') or 0:.2f}x "
                  f"(wrote {out / regime.name}/bench.md)")
    m = machine_info(n_threads=args.threads)
    gpus = ", ".join(g["name"] for g in m.get("gpus", []))
    machine = f"{m['cpu']}, {m['physical_cores']} cores" + (f", {gpus}" if gpus else "")
    command = "ggufspec " + " ".join(sys.argv[1:])
    write_atomic(out / "regimes.json", json.dumps({"machine": m, "command": command, "rows": rows}, indent=1))
    text = regimes_markdown(rows, machine=machine, command=command)
    write_atomic(out / "regimes.md", text)
    if args.json:
        print(json.dumps({"rows": rows, "files": [str(out / "regimes.md"), str(out / "regimes.json")]}, indent=1))
    else:
        sys.stdout.write(text + f"wrote {out}/regimes.md, regimes.json and one folder per regime\n")
    return 0


def _sweep_ngl(args: argparse.Namespace, prompts: list, repeats: int, *, speculative, draft_layers: Layers) -> int:
    """`--sweep-ngl`: ggufspec.bench.sweep (layers offloaded against tokens/s and speedup)."""
    from rich.console import Console

    from ggufspec.bench.sweep import parse_ngl_list, run_sweep, write_sweep
    from ggufspec.models.resolve import LOOKUP, resolve_pair_refs

    if args.sweep_ngl is None:
        raise UserError("bench --rpc runs the partial-offload sweep; add --sweep-ngl, like --sweep-ngl 0,8,16,all")
    ngl_values = parse_ngl_list(args.sweep_ngl)
    refs = resolve_pair_refs(target=args.target, draft=args.draft, pair=args.pair)
    draft = refs.draft if refs.draft not in (None, LOOKUP) else None
    if draft is None:
        raise UserError("--sweep-ngl needs a draft model (--draft REF or --pair NAME)")
    err = Console(stderr=True, highlight=False)
    points = run_sweep(target=refs.target, draft=draft, prompts=prompts, ngl_values=ngl_values,
                       max_tokens=args.max_tokens, repeats=repeats, n_ctx=args.ctx, n_threads=args.threads,
                       rpc=args.rpc, draft_layers=draft_layers, speculative=speculative,
                       progress=lambda msg: err.print(f"[dim]{msg}[/]"))
    meta = {"target": str(refs.target), "draft": str(draft), "rpc": args.rpc, "ngld": args.ngld,
            "prompts": len(prompts), "repeats": repeats, "max_tokens": args.max_tokens,
            "title": f"tokens/s against target layers offloaded{' (RPC ' + args.rpc + ')' if args.rpc else ''}"}
    files = write_sweep(points, Path(args.out), meta=meta, plot=not args.no_plots)
    if args.json:
        print(json.dumps({"points": [p.__dict__ for p in points], "files": [str(f) for f in files]}, indent=1))
        return 0
    sys.stdout.write((Path(args.out) / "sweep_ngl.md").read_text())
    sys.stdout.write(f"wrote {', '.join(str(f) for f in files)}\n")
    return 0


def _print_table(result) -> None:
    """The bench's table and summary lines, on stderr."""
    from rich.table import Table

    from ggufspec.bench.writers import fmt_figure as f
    from ggufspec.bench.writers import lowest_vs_best
    from ggufspec.commands.tables import table_console

    s = result.summary

    t = Table(title=f"ggufspec bench · {result.plan.target_label} target · {len(result.plan.prompts)} prompts "
                    f"× {result.plan.repeats}", title_justify="left")
    for col, just in (("configuration", "left"), ("tok/s", "right"), ("speedup", "right"), ("worst", "right"),
                      ("accept", "right"), ("expected", "right"), ("draft/verify/py ms", "right")):
        t.add_column(col, justify=just)
    for c in s["configs"]:
        mpt = c.get("ms_per_token") or {}
        split = "/".join(f(mpt.get(k), "{:.1f}") for k in ("draft", "verify", "python")) if mpt else "–"
        t.add_row(c["name"], f(c.get("tps"), "{:.1f}"), f(c.get("speedup")), f(c.get("speedup_min")),
                  f(c.get("accept_rate"), "{:.0%}"), f(c.get("expected_speedup")), split)
    console = table_console(stderr=True, highlight=False, fit=[t])
    console.print(t)
    line = f"speedup {f(s['speedup'])}x ({s['default_config']})"
    line += f"; vs native {f(s['vs_native'])}x" if s.get("vs_native") else "; vs native: peer absent"
    if s.get("vs_llama_bench"):
        line += f"; target alone / llama-bench {f(s['vs_llama_bench'], '{:.3f}')}"
    console.print(line)
    sets = s.get("sets") or {}
    if len(sets) > 1:
        console.print("; ".join(f"{name} set ({len(sub['prompts'])} prompts): speedup {f(sub.get('speedup'))}x, "
                                f"worst {f(sub.get('speedup_min'))}x" for name, sub in sets.items()), soft_wrap=True)
    lowest = {name: lowest_vs_best(sub) for name, sub in (sets if len(sets) > 1 else {"all": s}).items()}
    if any(lowest.values()):
        console.print("default / best fixed or always-draft, lowest category (90% interval over repeats): "
                      + "; ".join(f"{name} {cell}" for name, cell in lowest.items() if cell), soft_wrap=True)
    for note in result.peers.get("notes", []):
        console.print(f"[dim]note: {note}[/]")
