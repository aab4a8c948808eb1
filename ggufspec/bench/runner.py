"""Running a plan: every configuration on every prompt, `repeats` times, alternated.

By default (`plan.lockstep`) our configurations of a (repeat, prompt) block run in lockstep,
each on its own contexts, a round at a time (ggufspec.bench.lockstep): a slow second on a shared
machine costs all of them alike. The peers (other programs and libraries) run after them, one
at a time. Sequential (`--sequential`): inside every block the target alone runs first (and again
halfway in a long block) and the other configurations rotate from block to block, so that no
configuration always follows the same neighbour.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ggufspec.bench.configs import BenchPlan, Config
from ggufspec.bench.lockstep import interleave, own_stats
from ggufspec.bench.machine import load_now, machine_info
from ggufspec.bench.ours import Ours, rejections
from ggufspec.bench.native import native_dir, run_llama_bench, run_native_speculative
from ggufspec.bench.peers import LlamaCppPython, Transformers, transformers_available
from ggufspec.bench.prompts import BenchPrompt
from ggufspec.bench.results import BenchResult, RunRecord
from ggufspec.bench.summary import summarise
from ggufspec.errors import UserError
from ggufspec.hardware import physical_cores

Progress = Callable[[str, int, int], None]  # (what is running, done, total)


def _seed(plan: BenchPlan, prompt_index: int, repeat: int) -> int:
    return plan.seed + 1009 * prompt_index + repeat


def _blocks(plan: BenchPlan) -> list[list[Config]]:
    """Per temperature, the configs of one (repeat, prompt) block; the baseline leads its group."""
    greedy = [c for c in plan.configs if c.temperature == 0]
    sampled = [c for c in plan.configs if c.temperature > 0]
    return [g for g in (greedy, sampled) if g]


def _block_order(configs: list[Config], shift: int) -> list[Config]:
    """Target alone first and again halfway; the other configs rotate from block to block so
    that no configuration always follows the same neighbour."""
    base = [c for c in configs if c.is_baseline and c.engine == "ggufspec"]
    rest = [c for c in configs if not (c.is_baseline and c.engine == "ggufspec")]
    if rest:
        s = shift % len(rest)
        rest = rest[s:] + rest[:s]
    if not base:
        return rest
    if len(rest) > 6:
        half = len(rest) // 2
        return [base[0], *rest[:half], base[0], *rest[half:]]
    return [base[0], *rest]


def count_runs(plan: BenchPlan) -> int:
    """How many progress steps `run_bench` takes: the runs, plus one llama-bench call per repeat.
    transformers (slow) runs only on the first `slow_peer_prompts` prompts of the first repeat."""
    n = 0
    slow = 0
    for group in _blocks(plan):
        order = _block_order(group, 0)
        slow += sum(1 for c in order if c.engine == "transformers")
        n += len(order) - sum(1 for c in order if c.engine == "transformers")
    return (n * plan.repeats * len(plan.prompts) + slow * min(plan.slow_peer_prompts, len(plan.prompts))
            + (plan.repeats if plan.llama_bench else 0))


def _repack() -> bool:
    """The weight repacking ours uses (ggufspec.llama.lib.repack), for the native peers: imported
    here, not at the top, so that importing the bench does not load llama_cpp."""
    from ggufspec.llama.lib import repack

    return repack()


@dataclass(kw_only=True)
class _Engines:
    """What one run needs besides its configuration and prompt."""

    plan: BenchPlan
    ours: Ours
    threads: int
    lcp: LlamaCppPython | None = None
    trf: Transformers | None = None
    # greedy tokens of the target alone per prompt: the reference of RunRecord.identical
    baseline_tokens: dict[str, list[int]] = field(default_factory=dict)


def run_bench(plan: BenchPlan, *, progress: Progress | None = None) -> BenchResult:
    """Run every configuration on every prompt, `plan.repeats` times, alternating.

    Args:
        plan: see `make_plan`.
        progress: called before each run with (label, done, total).

    Returns:
        Every run, the machine, the peers, and the summary (see `summarise`).
    """
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    t_start = time.perf_counter()
    load_start = load_now()
    threads = plan.n_threads or physical_cores()
    total = count_runs(plan)
    done = 0

    def tick(label: str) -> None:
        if progress is not None:
            progress(label, done, total)

    tick("loading models")
    eng = _Engines(plan=plan, ours=Ours(plan), threads=threads)
    ours = eng.ours
    peers: dict[str, Any] = {"notes": [], "llama_bench": []}
    needs = {c.engine for c in plan.configs}
    engines_ok = set(needs)
    try:
        if "llama-cpp-python" in needs:
            eng.lcp = LlamaCppPython(plan, ours.pair.target_path, threads, n_gpu_layers=ours.pair.gpu_layers())
        if "transformers" in needs:
            why = transformers_available()
            if why is None:
                try:
                    eng.trf = Transformers(plan, ours.pair.target_path, ours.paths[plan.drafts[0].label], threads)
                except Exception as exc:  # GGUF type not supported by transformers, etc.
                    why = f"transformers assisted generation skipped: {type(exc).__name__}: {exc}"
            if why is not None:
                peers["notes"].append(why)
                engines_ok.discard("transformers")
        if plan.native_bin is None and plan.native_requested:
            peers["notes"].append(
                f"llama.cpp native peers absent (no binaries in {native_dir()}): run scripts/build_native.sh once"
            )
        else:
            peers["native_bin"] = str(plan.native_bin)

        micro = ours.micro() if plan.microbench else {}
        depth = int(statistics.median(len(t) for t in ours.tokens.values()))

        runs: list[RunRecord] = []
        order = 0
        for r in range(plan.repeats):
            if plan.llama_bench and plan.native_bin is not None:
                tick("llama-bench (target alone)")
                try:
                    row = run_llama_bench(bin_dir=plan.native_bin, model=ours.pair.target_path,
                                          n_gen=plan.max_tokens, depth=depth, threads=threads, reps=3,
                                          ngl=ours.pair.gpu_layers(),
                                          cache_type=ours.pair.target_ctx.settings.cache_type_k, repack=_repack())
                    row["repeat"] = r
                    peers["llama_bench"].append(row)
                except Exception as exc:
                    peers["notes"].append(f"llama-bench failed: {exc}")
                done += 1
            for pi, prompt in enumerate(plan.prompts):
                for group in _blocks(plan):
                    block = _block_order(group, r * len(plan.prompts) + pi)
                    if plan.lockstep:
                        ours_cfgs = list({c.name: c for c in block if c.engine == "ggufspec"}.values())
                        tick(f"{len(ours_cfgs)} configurations in lockstep · {prompt.id} · repeat {r + 1}/{plan.repeats}")
                        runs.extend(_run_lockstep(eng, ours_cfgs, prompt, repeat=r, prompt_index=pi, order=order))
                        n_ours = sum(1 for c in block if c.engine == "ggufspec")  # count_runs counts a repeated baseline
                        done += n_ours
                        order += n_ours
                        block = [c for c in block if c.engine != "ggufspec"]
                    for cfg in block:
                        tick(f"{cfg.name} · {prompt.id} · repeat {r + 1}/{plan.repeats}")
                        if cfg.engine == "transformers" and (r > 0 or pi >= plan.slow_peer_prompts):
                            continue  # count_runs leaves these out too
                        if cfg.engine in engines_ok:
                            runs.append(_run_one(eng, cfg, prompt, repeat=r, prompt_index=pi, order=order))
                        done += 1
                        order += 1
        tick("summarising")
        summary = summarise(plan, runs, micro=micro, peers=peers)
        machine = machine_info(n_threads=threads)
        machine["load_start"] = load_start
        machine["offload"] = ours.offload()
        return BenchResult(
            plan=plan, runs=runs, machine=machine, peers=peers, micro=micro,
            summary=summary, started=started, wall_s=time.perf_counter() - t_start,
        )
    finally:
        if eng.lcp is not None:
            eng.lcp.close()
        ours.close()


def _base(eng: _Engines, cfg: Config, prompt: BenchPrompt, *, repeat: int, order: int) -> dict:
    """The fields of a run's record that the configuration and prompt decide."""
    return dict(
        config=cfg.name, engine=cfg.engine, draft=cfg.draft, k=cfg.draft_max, adaptive=(not cfg.fixed), accept=cfg.accept,
        temperature=cfg.temperature, prompt_id=prompt.id, category=prompt.category, repeat=repeat, order=order,
        prompt_tokens=len(eng.ours.tokens[prompt.id]),
    )


def _ours_record(eng: _Engines, cfg: Config, gen: Any, s: Any, base: dict) -> RunRecord:
    """The record of one of our generations, finished, with its stats `s`."""
    identical = None
    if cfg.temperature == 0:
        if cfg.is_baseline:
            eng.baseline_tokens.setdefault(base["prompt_id"], list(gen.tokens))
        ref = eng.baseline_tokens.get(base["prompt_id"])
        identical = ref == list(gen.tokens) if ref is not None else None
    return RunRecord(
        **base, generated_tokens=s.generated_tokens, gen_tps=s.gen_tps, prompt_tps=s.prompt_tps,
        gen_s=s.gen_s, drafted=s.drafted, accepted=s.accepted, rejections=rejections(gen), rounds=s.rounds,
        paused_rounds=s.paused_rounds, k_hist=dict(s.k_hist), drafter_rounds=dict(s.drafter_rounds),
        checks=s.checks, checks_failed=s.checks_failed, extended=s.extended, extended_accepted=s.extended_accepted,
        draft_s=s.draft_s, verify_s=s.verify_s, overhead_s=s.overhead_s, drafted_at=list(s.drafted_at),
        accepted_at=list(s.accepted_at), stop_reason=s.stop_reason, identical=identical,
    )


def _run_lockstep(eng: _Engines, cfgs: list[Config], prompt: BenchPrompt, *, repeat: int, prompt_index: int,
                  order: int) -> list[RunRecord]:
    """Our configurations `cfgs` on `prompt` in lockstep, each on its own contexts: the i-th by
    name runs on lane i + b of block b = repeat x prompts + prompt, modulo the lanes, so every
    configuration moves to the next lane from block to block (`Ours.start`). A generation's time
    after its first token is the time inside its own steps less its prefill."""
    seed = _seed(eng.plan, prompt_index, repeat)
    shift = repeat * len(eng.plan.prompts) + prompt_index
    rank = {name: i for i, name in enumerate(sorted(c.name for c in cfgs))}  # (the block's order rotates too)
    lanes = [(rank[cfg.name] + shift) % len(cfgs) for cfg in cfgs]
    gens = [eng.ours.start(cfg, prompt, seed, lane=lane) for cfg, lane in zip(cfgs, lanes)]
    busy = interleave(gens)
    records: dict[str, RunRecord] = {}
    # the target alone first: the others' `identical` compares with its tokens
    for i in sorted(range(len(cfgs)), key=lambda i: not cfgs[i].is_baseline):
        cfg, gen = cfgs[i], gens[i]
        stats = own_stats(gen.stats, busy[i])
        base = _base(eng, cfg, prompt, repeat=repeat, order=order + i) | {"lane": lanes[i]}
        records[cfg.name] = _ours_record(eng, cfg, gen, stats, base)
    return [records[c.name] for c in cfgs]


def _run_one(eng: _Engines, cfg: Config, prompt: BenchPrompt, *, repeat: int, prompt_index: int, order: int) -> RunRecord:
    """One run of `cfg` on `prompt`; a peer's failure becomes the record's `error`, not an exception."""
    plan, ours = eng.plan, eng.ours
    base = _base(eng, cfg, prompt, repeat=repeat, order=order)
    try:
        if cfg.engine == "ggufspec":
            gen = ours.run(cfg, prompt, _seed(plan, prompt_index, repeat))
            return _ours_record(eng, cfg, gen, gen.stats, base)
        if cfg.engine == "native":
            out = run_native_speculative(
                bin_dir=plan.native_bin, target=ours.pair.target_path, draft=ours.paths[cfg.draft],
                prompt=ours.texts[prompt.id], k=cfg.draft_max, n_predict=plan.max_tokens, n_ctx=plan.n_ctx, threads=eng.threads,
                ngl=ours.pair.gpu_layers(), ngld=ours.pair.gpu_layers(ours.drafters[cfg.draft]),
                cache_type=ours.pair.target_ctx.settings.cache_type_k, repack=_repack(),
            )
            base["prompt_tokens"] = out.get("prompt_tokens", base["prompt_tokens"])
            return RunRecord(
                **base, generated_tokens=out["generated_tokens"], gen_tps=out["gen_tps"], gen_s=out["gen_s"],
                prompt_tps=out.get("prompt_tps", 0.0), drafted=out["n_drafted"], accepted=out["n_accept"],
            )
        if cfg.engine == "llama-cpp-python":
            out = eng.lcp.run(cfg, ours.tokens[prompt.id], ours.pair.target_model.is_eog)
        elif cfg.engine == "transformers":
            out = eng.trf.run(cfg, ours.tokens[prompt.id], ours.pair.target_model.eos)
        else:
            raise ValueError(f"unknown engine {cfg.engine}")
        return RunRecord(**base, generated_tokens=out["generated_tokens"], gen_tps=out["gen_tps"],
                         gen_s=out["gen_s"], prompt_tps=out["prompt_tps"])
    except UserError:
        raise
    except Exception as exc:  # a peer failing must not lose the rest of the bench
        return RunRecord(**base, generated_tokens=0, gen_tps=0.0, error=f"{type(exc).__name__}: {exc}")
