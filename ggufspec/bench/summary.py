"""From runs to figures (pure): medians, speedups, accept rates, the expected speedup, the summary dict.

Figures are medians: per prompt over repeats, then over prompts. A configuration's speedup on a
prompt is its median gen tok/s over the target alone's (ours, same temperature) on that prompt.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, replace
from typing import Any, Iterable, Mapping, Sequence

from ggufspec.bench.configs import BASELINE, LOOKUP, BenchPlan, Config
from ggufspec.bench.expected import estimate_alpha
from ggufspec.bench.prompts import set_names
from ggufspec.bench.results import RunRecord
from ggufspec.bench.spread import Samples, ratio_interval
from ggufspec.bench.theory import pooled_decode_step, pooled_step, priced

BaseTps = Mapping[tuple[str, float], float | None]  # (prompt id, temperature) -> target alone's median tok/s


def median(xs: Iterable[float | None]) -> float | None:
    """The median of the values that are not None or NaN; None when none is left."""
    vals = [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return statistics.median(vals) if vals else None


def summarise(plan: BenchPlan, runs: Sequence[RunRecord], *, micro: Mapping | None = None, peers: Mapping | None = None) -> dict:
    """Per-configuration figures and the headline numbers, over all prompts and per prompt set.

    Returns a dict with `speedup` (the default configuration's), `vs_native` (our best K / native's
    best K, same draft; None without the native peer), `vs_llama_bench` (our target alone / llama-bench),
    `configs` (one entry per configuration) and `by_category`: all of them over every prompt of the
    run (both built-in sets by default). `prompt_sets` names the sets in order and `sets[name]` holds
    the same keys over that set's prompts alone, plus `prompts` (their ids).
    """
    summary = _summarise_prompts(plan, runs, micro=micro, peers=peers)
    sets: dict[str, Any] = {}
    for name in set_names(plan.prompts):
        sub = tuple(p for p in plan.prompts if p.prompt_set == name)
        ids = {p.id for p in sub}
        sets[name] = {"prompts": [p.id for p in sub],
                      **_summarise_prompts(replace(plan, prompts=sub), [r for r in runs if r.prompt_id in ids],
                                           micro=micro, peers=peers)}
    return {**summary, "prompt_sets": list(sets), "sets": sets}


def _summarise_prompts(plan: BenchPlan, runs: Sequence[RunRecord], *, micro: Mapping | None = None,
                       peers: Mapping | None = None) -> dict:
    """`summarise` over the prompts of `plan` (the runs on other prompts must be left out)."""
    micro = micro or {}
    peers = peers or {}
    ok = [r for r in runs if r.error is None and r.generated_tokens > 1]
    base_tps = _baseline_tps(ok)
    base_step = pooled_step(ok, temperature=0.0)
    decode_step = pooled_decode_step(ok, temperature=0.0)
    configs = [_config_entry(cfg, runs, ok, base_tps=base_tps, base_step=base_step, micro=micro, decode_step=decode_step)
               for cfg in plan.configs]

    by_name = {c["name"]: c for c in configs}
    default = by_name.get(plan.default_config, {})
    default_draft = plan.drafts[0].label
    ours_greedy = [c for c in configs if c["engine"] == "ggufspec" and c["draft"] == default_draft
                   and c["temperature"] == 0 and c.get("tps")]
    native = [c for c in configs if c["engine"] == "native" and c.get("tps")]
    best_ours = max(ours_greedy, key=lambda c: c["tps"], default=None)
    # the same comparison among configurations that really drafted (the controller may pick the target alone)
    drafting = [c for c in ours_greedy if (c.get("draft_rounds_share") or 0) >= 0.5]
    best_drafting = max(drafting, key=lambda c: c["tps"], default=None)
    best_native = max(native, key=lambda c: c["tps"], default=None)
    base_cfg = by_name.get("target alone", {})
    lb_tps = median(row["gen_tps"] for row in peers.get("llama_bench", []))
    lookup_ours = next((c for c in configs if c["engine"] == "ggufspec" and c["draft"] == LOOKUP and not c["fixed"]), None)
    lcp_lookup = by_name.get("llama-cpp-python lookup", {})
    sampling = [c for c in configs if c["group"] == "sampling"]
    best_any = max((c for c in configs if c["engine"] == "ggufspec" and not c["draft"] == BASELINE
                    and c["temperature"] == 0 and c.get("speedup")), key=lambda c: c["speedup"], default=None)
    chat_ids = {p.id for p in plan.prompts if p.category == "chat"}

    summary: dict[str, Any] = {
        "default_config": plan.default_config,
        "speedup": default.get("speedup"),
        "speedup_min": default.get("speedup_min"),
        "speedup_chat": _median_of(_prompt_ratios(ok, plan.default_config, 0.0, base_tps), chat_ids),
        "accept_rate": default.get("accept_rate"),
        "alpha": default.get("alpha"),
        "expected_speedup": default.get("expected_speedup"),
        "expected_speedup_measured_verify": default.get("expected_speedup_measured_verify"),
        "expected_costs_from": default.get("costs_from"),
        "target_alone_tps": base_cfg.get("tps"),
        "default_tps": default.get("tps"),
        "best_ours": _pick(best_ours, "name", "tps", "speedup"),
        "best_native": _pick(best_native, "name", "tps", "accept_rate"),
        "vs_native": (best_ours["tps"] / best_native["tps"]) if best_ours and best_native else None,
        "best_ours_drafting": _pick(best_drafting, "name", "tps", "speedup"),
        "vs_native_drafting": (best_drafting["tps"] / best_native["tps"]) if best_drafting and best_native else None,
        "default_draft_rounds_share": default.get("draft_rounds_share"),
        "llama_bench_tps": lb_tps,
        "vs_llama_bench": (base_cfg["tps"] / lb_tps) if lb_tps and base_cfg.get("tps") else None,
        "vs_llama_cpp_python_lookup": (lookup_ours["tps"] / lcp_lookup["tps"])
        if lookup_ours and lookup_ours.get("tps") and lcp_lookup.get("tps") else None,
        "best_speedup": _pick(best_any, "name", "speedup", "accept_rate"),
        "sampling": {c["accept"]: _pick(c, "speedup", "accept_rate", "alpha") for c in sampling},
        "transformers_assisted_speedup": _peer_ratio(ok, "transformers"),
        "identical_greedy": median(c["identical"] for c in configs if c.get("identical") is not None),
    }
    by_category = _by_category(plan, ok, base_tps)
    vs_best = default_vs_best(configs, by_category, default=plan.default_config)
    samples = _samples(plan, ok)
    _add_intervals(vs_best, plan, samples, configs)
    summary["default_vs_best"] = vs_best
    # the default's speedup over the target alone, with rivals=[]: default / max(1, nothing) = default
    summary["speedup_interval"] = ratio_interval(samples, default=plan.default_config, rivals=[],
                                                 baseline="target alone", prompts=[p.id for p in plan.prompts],
                                                 paired=plan.lockstep)
    summary["default_vs_best_min"] = min((v["ratio"] for v in vs_best.values() if v["ratio"] is not None), default=None)
    summary["default_vs_drafters"] = default_vs_drafters(plan, ok, configs, by_category, samples=samples, base_tps=base_tps)
    # end to end: prompt and generation seconds together (a draft model's prefill is paid there)
    by_category_e2e = _by_category(plan, ok, base_tps, end_to_end=True)
    summary["speedup_e2e"] = default.get("speedup_e2e")
    vs_best_e2e = default_vs_best(configs, by_category_e2e, default=plan.default_config, key="speedup_e2e")
    _add_intervals(vs_best_e2e, plan, _samples(plan, ok, end_to_end=True), configs)
    summary["default_vs_best_e2e"] = vs_best_e2e
    summary["default_vs_best_e2e_min"] = min((v["ratio"] for v in vs_best_e2e.values() if v["ratio"] is not None),
                                             default=None)
    return {**summary, "configs": configs, "by_category": by_category, "by_category_e2e": by_category_e2e}


def default_vs_best(configs: Sequence[Mapping], by_category: Mapping[str, Mapping[str, float | None]], *,
                    default: str, key: str = "speedup") -> dict[str, dict[str, Any]]:
    """The default configuration against the best fixed-length or always-draft configuration of
    the run (greedy, ours), over all prompts ("all") and per category:

        ratio = default speedup / max(best such speedup, 1.0)

    i.e. against the target alone (1.0) where no such configuration beats it. Issue 12 asks for a
    ratio of at least 0.97 everywhere. `key`: "speedup" (generation tok/s) or "speedup_e2e"
    (prompt and generation seconds), with `by_category` of the same kind.
    """
    others = rivals(configs, default)
    out: dict[str, dict[str, Any]] = {}
    for cat, speedups in _speedup_tables(configs, by_category, key=key).items():
        d = speedups.get(default)
        scored = [(speedups.get(c["name"]), c["name"]) for c in others if speedups.get(c["name"]) is not None]
        best = max(scored, default=None)
        ref, ref_name = (best if best is not None and best[0] > 1.0 else (1.0, "target alone"))
        out[cat] = {"default": d, "reference": ref_name, "reference_speedup": ref,
                    "ratio": d / ref if d is not None else None}
    return out


def _speedup_tables(configs: Sequence[Mapping], by_category: Mapping[str, Mapping[str, float | None]], *,
                    key: str = "speedup") -> dict[str, dict[str, float | None]]:
    """Cell -> configuration name -> speedup: "all" from each configuration's `key`, then one
    table per category of `by_category` (sorted)."""
    tables: dict[str, dict[str, float | None]] = {"all": {c["name"]: c.get(key) for c in configs}}
    for cat in sorted({cat for row in by_category.values() for cat in row}):
        tables[cat] = {name: row.get(cat) for name, row in by_category.items()}
    return tables


def rivals(configs: Sequence[Mapping], default: str) -> list[Mapping]:
    """The default's rivals: our greedy fixed-length and always-draft configurations."""
    return [c for c in configs if c.get("engine") == "ggufspec" and c.get("temperature") == 0
            and c.get("draft") != BASELINE and c.get("name") != default and (c.get("fixed") or c.get("always_draft"))]


def default_vs_drafters(plan: BenchPlan, ok: Sequence[RunRecord], configs: Sequence[Mapping],
                        by_category: Mapping[str, Mapping[str, float | None]], *, samples: Samples,
                        base_tps: BaseTps) -> dict[str, dict[str, dict[str, Any]]]:
    """The default configuration, several drafters under the controller ("Q4_1+lookup K<=8"),
    against each of its drafters alone under the same controller ("Q4_1 K<=8", "lookup K<=8"):
    what the mix adds (issue 12: lookup in the mix beats the model draft alone on summaries and
    code). Per such configuration, over all prompts ("all") and per category, as
    `default_vs_best`'s cells: ratio = the default's speedup (median over prompts) / the
    configuration's, with `ratio_low` / `ratio_high` its 90% bootstrap interval over repeats (a
    lockstep bench's drawn block by block), and `per_prompt`: the geometric mean over prompts of
    the ratio of the two's median tok/s on each (the pairing the lockstep runs allow; a median
    over 4-12 prompts moves with whichever prompts sit in its middle). No interval where the
    drafter alone is no faster than the target alone: `ratio_interval` bounds default /
    max(1, rival), not this ratio, there."""
    default = next((c for c in configs if c["name"] == plan.default_config), None)
    if default is None or "+" not in str(default.get("draft")):
        return {}
    parts = set(str(default["draft"]).split("+"))
    alone = [c for c in configs if c.get("engine") == "ggufspec" and c.get("temperature") == 0 and not c.get("fixed")
             and c.get("always_draft") == default.get("always_draft") and c.get("draft_max") == default.get("draft_max")
             and c.get("draft") in parts and c.get("speedup")]
    tables = _speedup_tables(configs, by_category)
    mine = _prompt_ratios(ok, default["name"], 0.0, base_tps)
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for c in alone:
        theirs = _prompt_ratios(ok, c["name"], 0.0, base_tps)
        cells: dict[str, dict[str, Any]] = {}
        for cat, speedups in tables.items():
            d, o = speedups.get(default["name"]), speedups.get(c["name"])
            if d is None or not o:
                continue
            ids = [p.id for p in plan.prompts if cat == "all" or p.category == cat]
            got = ratio_interval(samples, default=default["name"], rivals=[c["name"]], baseline="target alone",
                                 prompts=ids, paired=plan.lockstep) if o > 1.0 else None
            logs = [math.log(mine[p] / theirs[p]) for p in ids if p in mine and p in theirs]
            cells[cat] = {"default": d, "speedup": o, "ratio": d / o,
                          "ratio_low": got[0] if got else None, "ratio_high": got[1] if got else None,
                          "per_prompt": math.exp(sum(logs) / len(logs)) if logs else None}
        out[c["name"]] = cells
    return out


def _samples(plan: BenchPlan, ok: Sequence[RunRecord], *, end_to_end: bool = False) -> Samples:
    """Our greedy runs' tok/s by configuration ("target alone" for the baseline) and prompt: in a
    lockstep bench at index repeat (0: not run), else in run order."""
    samples: dict[str, dict[str, list[float]]] = {}
    for r in ok:
        if r.engine == "ggufspec" and r.temperature == 0:
            name = "target alone" if r.draft == BASELINE else r.config
            runs = samples.setdefault(name, {}).setdefault(r.prompt_id, [])
            tps = _e2e_tps(r) if end_to_end else r.gen_tps
            if plan.lockstep:  # one run per (configuration, prompt, repeat), at index repeat
                runs.extend([0.0] * (r.repeat + 1 - len(runs)))
                runs[r.repeat] = tps
            else:
                runs.append(tps)
    return samples


def _add_intervals(vs_best: dict[str, dict[str, Any]], plan: BenchPlan, samples: Samples,
                   configs: Sequence[Mapping]) -> None:
    """Each cell of `default_vs_best` gets `ratio_low` / `ratio_high`: the 90% bootstrap
    interval of its ratio over the repeats of the cell's runs (ggufspec.bench.spread; `samples`
    of the same kind as the cells: generation or end to end); a lockstep bench's repeats are
    drawn block by block, the same for every configuration."""
    names = [c["name"] for c in rivals(configs, plan.default_config)]
    for cat, cell in vs_best.items():
        ids = [p.id for p in plan.prompts if cat == "all" or p.category == cat]
        got = ratio_interval(samples, default=plan.default_config, rivals=names, baseline="target alone", prompts=ids,
                             paired=plan.lockstep)
        cell["ratio_low"], cell["ratio_high"] = got if got is not None else (None, None)


def _e2e_tps(r: RunRecord) -> float:
    """Generated tokens per second of prompt and generation together (0: not measured)."""
    seconds = (r.prompt_tokens / r.prompt_tps if r.prompt_tps > 0 else 0.0) + r.gen_s
    return r.generated_tokens / seconds if seconds > 0 and r.prompt_tps > 0 and r.gen_s > 0 else 0.0


def _baseline_tps(ok: Sequence[RunRecord], *, end_to_end: bool = False) -> dict[tuple[str, float], float | None]:
    """Per (prompt, temperature), our target alone's median gen tok/s over repeats (`end_to_end`:
    over prompt and generation seconds)."""
    per: dict[tuple[str, float], list[float]] = {}
    for r in ok:
        if r.engine == "ggufspec" and r.draft == BASELINE:
            per.setdefault((r.prompt_id, r.temperature), []).append(_e2e_tps(r) if end_to_end else r.gen_tps)
    return {key: median(v) for key, v in per.items()}


def _prompt_ratios(ok: Sequence[RunRecord], name: str, temperature: float, base_tps: BaseTps, *,
                   end_to_end: bool = False) -> dict[str, float]:
    """Per prompt: configuration `name`'s median gen tok/s over the target alone's, at `temperature`
    (`end_to_end`: tok/s over prompt and generation seconds, `base_tps` of the same kind)."""
    per: dict[str, list[float]] = {}
    for r in ok:
        if r.config == name:
            per.setdefault(r.prompt_id, []).append(_e2e_tps(r) if end_to_end else r.gen_tps)
    return {pid: median(v) / base_tps[(pid, temperature)] for pid, v in per.items()
            if base_tps.get((pid, temperature)) and median(v)}


def _median_of(ratios: Mapping[str, float], ids: set[str]) -> float | None:
    return median(v for pid, v in ratios.items() if pid in ids)


def _config_entry(
    cfg: Config, runs: Sequence[RunRecord], ok: Sequence[RunRecord], *, base_tps: BaseTps,
    base_step: float | None, micro: Mapping, decode_step: float | None = None,
) -> dict[str, Any]:
    """One configuration's figures (the rows of bench.md's table)."""
    rs = [r for r in ok if r.config == cfg.name]
    errors = [r.error for r in runs if r.config == cfg.name and r.error]
    entry: dict[str, Any] = {**asdict(cfg), "runs": len(rs), "errors": len(errors)}
    if errors:
        entry["first_error"] = errors[0]
    if not rs:
        return entry
    per_prompt: dict[str, list[RunRecord]] = {}
    for r in rs:
        per_prompt.setdefault(r.prompt_id, []).append(r)
    ratios = _prompt_ratios(rs, cfg.name, cfg.temperature, base_tps)
    ratios_e2e = _prompt_ratios(rs, cfg.name, cfg.temperature, _baseline_tps(ok, end_to_end=True), end_to_end=True)
    drafted = sum(r.drafted for r in rs)
    accepted = sum(r.accepted for r in rs)
    rejections = sum(r.rejections for r in rs)
    gen_tokens = sum(max(0, r.generated_tokens - 1) for r in rs)
    rounds = sum(r.rounds for r in rs)
    draft_rounds = sum(r.drafted_at[0] for r in rs if r.drafted_at)
    entry.update(
        tps=median(median(r.gen_tps for r in v) for v in per_prompt.values()),
        speedup=median(ratios.values()) if not cfg.is_baseline or cfg.engine != "ggufspec" else 1.0,
        speedup_min=min(ratios.values()) if ratios else None,
        speedup_max=max(ratios.values()) if ratios else None,
        speedup_e2e=median(ratios_e2e.values()) if not cfg.is_baseline or cfg.engine != "ggufspec" else 1.0,
        worst_prompt=min(ratios, key=ratios.get) if ratios else None,
        prompt_tps=median(r.prompt_tps for r in rs),
        generated_tokens=median(r.generated_tokens for r in rs),
    )
    if cfg.engine == "ggufspec":
        identical = [r.identical for r in rs if r.identical is not None]
        entry.update(
            identical=(sum(identical) / len(identical)) if identical and cfg.temperature == 0 else None,
            ms_per_token={
                "draft": 1e3 * sum(r.draft_s for r in rs) / gen_tokens if gen_tokens else None,
                "verify": 1e3 * sum(r.verify_s for r in rs) / gen_tokens if gen_tokens else None,
                "python": 1e3 * sum(r.overhead_s for r in rs) / gen_tokens if gen_tokens else None,
            },
            mean_accepted_len=gen_tokens / rounds if rounds else None,
        )
    if cfg.is_baseline:
        return entry
    k_eff = drafted / draft_rounds if draft_rounds else float(cfg.draft_max)
    alpha = estimate_alpha(accepted=accepted, rejections=rejections)
    entry.update(
        accept_rate=accepted / drafted if drafted else None,
        drafted=drafted, accepted=accepted,
        accept_rate_by_position=_by_position(rs),
        draft_rounds_share=draft_rounds / rounds if rounds else None,
    )
    if cfg.engine != "ggufspec":
        return entry
    entry.update(alpha=alpha, k_eff=k_eff)
    entry.update(priced(cfg, rs, alpha=alpha, k_eff=k_eff, drafted=drafted, draft_rounds=draft_rounds, rounds=rounds,
                        micro=micro, base_step=base_step, decode_step=decode_step))
    return entry


def _peer_ratio(ok: Sequence[RunRecord], engine: str) -> float | None:
    """A peer's own speedup: its speculative tok/s over its target alone, per prompt, median."""
    alone = {r.prompt_id: r.gen_tps for r in ok if r.engine == engine and r.draft == BASELINE}
    ratios = [r.gen_tps / alone[r.prompt_id] for r in ok
              if r.engine == engine and r.draft != BASELINE and alone.get(r.prompt_id)]
    return median(ratios)


def _pick(c: Mapping | None, *keys: str) -> dict | None:
    return {k: c.get(k) for k in keys} if c else None


def _by_position(rs: Sequence[RunRecord]) -> list[float | None]:
    """Accept rate at draft position i: accepted there / drafted there, pooled over runs."""
    n = max((len(r.drafted_at) for r in rs), default=0)
    d = [sum(r.drafted_at[i] for r in rs if i < len(r.drafted_at)) for i in range(n)]
    a = [sum(r.accepted_at[i] for r in rs if i < len(r.accepted_at)) for i in range(n)]
    return [ai / di if di else None for ai, di in zip(a, d)]


def _by_category(plan: BenchPlan, ok: Sequence[RunRecord], base_tps: BaseTps, *, end_to_end: bool = False) -> dict:
    """Speedup per prompt category for each greedy configuration of ours (`end_to_end`: over
    prompt and generation seconds)."""
    cats = sorted({p.category for p in plan.prompts})
    out: dict[str, dict[str, float | None]] = {}
    if end_to_end:
        base_tps = _baseline_tps(ok, end_to_end=True)
    for cfg in plan.configs:
        if cfg.is_baseline or cfg.temperature != 0:
            continue
        ratios = _prompt_ratios(ok, cfg.name, 0.0, base_tps, end_to_end=end_to_end)
        out[cfg.name] = {cat: _median_of(ratios, {p.id for p in plan.prompts if p.category == cat}) for cat in cats}
    return out
