"""What a bench runs: the drafts, the configurations measured on every prompt, and the plan (pure
at import: llama_cpp only when --draft-quants quantizes a file)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ggufspec.bench.native import find_native
from ggufspec.bench.prompts import BenchPrompt
from ggufspec.errors import UserError
from ggufspec.loop.sampling import SamplingSettings
from ggufspec.loop.speculation import SpeculativeSettings
from ggufspec.models.embedded import DEFAULT_DRAFT, DEFAULT_TARGET, cache_dir, parse_embedded, resolve_quant
from ggufspec.settings import Layers

BASELINE = "none"  # draft label of the target alone
LOOKUP = "lookup"


@dataclass(frozen=True, kw_only=True)
class DraftSpec:
    """A drafter to bench: a GGUF path, or prompt lookup."""

    label: str  # short name in tables and plots: "Q4_1", "lookup", a file stem
    ref: str  # a model reference, or "lookup"
    # True: run alone only, to compare (`--draft-quants`); not one of the default configuration's
    # drafters, which are what `ggufspec run` would draft with.
    compared: bool = False


@dataclass(frozen=True, kw_only=True)
class Config:
    """One thing measured on every prompt.

    engine: "ggufspec" (ours), "native" (llama-speculative-simple), "llama-cpp-python",
    "transformers". draft == "none" is the target alone; labels joined by "+" ("Q4_1+lookup")
    are several drafters under the controller (ggufspec.loop.control).
    """

    name: str
    engine: str = "ggufspec"
    draft: str = BASELINE
    draft_max: int = 0  # --draft-max (fixed: every round; controlled: the largest K)
    fixed: bool = True  # --fixed; False: the controller chooses drafter and draft length each round
    always_draft: bool = False  # --always-draft: the controller never runs the target alone
    accept: str = "greedy"  # greedy | rejection | match
    temperature: float = 0.0
    group: str = "baseline"  # baseline | k-sweep | default | drafts | sampling | peer

    @property
    def is_baseline(self) -> bool:
        return self.draft == BASELINE


@dataclass(frozen=True, kw_only=True)
class BenchPlan:
    """Everything a bench run needs; `configs` lists what runs on each prompt."""

    target: str
    target_label: str
    drafts: tuple[DraftSpec, ...]
    prompts: tuple[BenchPrompt, ...]
    configs: tuple[Config, ...]
    default_config: str  # name of the configuration `summary.speedup` is about
    repeats: int = 3
    max_tokens: int = 128
    temperature: float = 0.8  # of the sampling sweep (0: no sampling sweep)
    n_ctx: int = 2048
    n_threads: int | None = None
    draft_kv: str = "auto"  # --draft-kv: draft models take the target's KV cache where they can
    # --ngl / --ngld: where the target's and the drafts' layers go ("auto": the offload planner, as
    # `run` does: every layer on a GPU that holds them, none on a machine without one); the peers
    # get the counts ours were loaded with
    n_gpu_layers: Layers = "auto"
    n_gpu_layers_draft: Layers = "auto"
    seed: int = 1234
    quick: bool = False
    native_bin: Path | None = None
    native_requested: bool = False
    llama_bench: bool = True
    microbench: bool = True
    slow_peer_prompts: int = 3  # transformers (~10x slower) runs on this many prompts, first repeat only
    # our configurations of a (repeat, prompt) block run in lockstep, each on its own contexts
    # (ggufspec.bench.lockstep); False (--sequential): one after the other on the pair's contexts
    lockstep: bool = True
    # the speculation flags (--draft-min, --draft-p-min, --draft-extend, --variant) every one of our
    # configurations runs with; each Config sets its own draft_max, fixed, always_draft and accept
    speculative: SpeculativeSettings | None = None  # None: the defaults


def make_plan(
    *,
    prompts: Sequence[BenchPrompt],
    target: str | None = None,
    drafts: Sequence[DraftSpec] | None = None,
    sweep_draft_lens: Sequence[int] = (1, 2, 4, 8),
    speculative: SpeculativeSettings | None = None,
    temperature: float = 0.8,
    repeats: int = 3,
    max_tokens: int = 128,
    n_ctx: int = 2048,
    n_threads: int | None = None,
    draft_kv: str = "auto",
    n_gpu_layers: Layers = "auto",
    n_gpu_layers_draft: Layers = "auto",
    sweep_all_drafts: bool = True,
    fixed_vs_adaptive: bool = True,
    native: bool | Path | None = None,
    llama_cpp_peer: bool = True,
    transformers_peer: bool = False,
    native_draft_lens: Sequence[int] | None = None,
    llama_bench: bool = True,
    microbench: bool = True,
    quick: bool = False,
    seed: int = 1234,
    lockstep: bool = True,
) -> BenchPlan:
    """Build the configurations to run.

    Args:
        prompts: the prompts (see `load_prompts`).
        target: target reference; None = the embedded default target.
        drafts: drafters. None = the embedded default draft and lookup. The default configuration
            drafts with all of them but the `compared` ones under the controller, as `ggufspec run`
            would; each is also run alone (controlled, always-draft) and at fixed K.
        sweep_draft_lens: the fixed draft lengths swept (--sweep-k), with the first draft, and
            with every draft when `sweep_all_drafts`.
        speculative: the speculation flags (ggufspec.commands.speculation_args; None: their
            defaults). They are the default configuration's settings: its draft_max (every
            controlled configuration's cap), fixed and always_draft; accept picks the sampling
            sweep's rule (default: rejection and match, side by side); draft_min, draft_p_min,
            draft_extend and variant hold for every configuration of ours.
        temperature: the sampling sweep's temperature (rejection vs match); 0 skips it.
        native: the directory of llama.cpp's native binaries, True to look in the cache,
            False/None to skip the native peers.
        native_draft_lens: fixed draft lengths for llama-speculative-simple (default: sweep_draft_lens).
        lockstep: run our configurations of each (repeat, prompt) block in lockstep (see
            ggufspec.bench.lockstep); False: one after the other.

    Raises:
        UserError: bad K values, repeats, token counts.
    """
    if repeats < 1:
        raise UserError(f"--repeats must be >= 1, got {repeats}")
    if max_tokens < 2:
        raise UserError(f"max tokens must be >= 2, got {max_tokens}")
    if not sweep_draft_lens or any(n < 1 for n in sweep_draft_lens):
        raise UserError(f"--sweep-k takes positive integers, got {list(sweep_draft_lens)}")
    speculative = speculative or SpeculativeSettings()
    for n in sweep_draft_lens:  # the one draft-max limit (settings.DRAFT_MAX_LIMIT)
        speculative.with_length(draft_max=n, draft_min=0)
    draft_max = speculative.length.draft_max
    rules = ("rejection", "match") if speculative.accept is None else (speculative.accept.value,)
    if temperature < 0 or not math.isfinite(temperature):
        raise UserError(f"--temp must be >= 0, got {temperature}")
    speculative.rule_for(SamplingSettings(temperature=temperature))  # --accept greedy with the sampling sweep: refused
    if not prompts:
        raise UserError("no prompts to run")
    target = target or DEFAULT_TARGET
    if drafts is None:
        drafts = (DraftSpec(label=draft_label(DEFAULT_DRAFT), ref=DEFAULT_DRAFT), DraftSpec(label=LOOKUP, ref=LOOKUP))
    if not drafts:
        raise UserError("give at least one draft (a model or 'lookup')")
    labels = [d.label for d in drafts]
    if len(set(labels)) != len(labels):
        raise UserError(f"two drafts share a label: {labels}; name them apart")
    sweep_draft_lens = tuple(sorted(set(int(n) for n in sweep_draft_lens)))
    own = [d for d in drafts if not d.compared]
    if not own:
        raise UserError("every draft is a compared one; give at least one --draft")
    default = own[0]
    # the default configuration: the user's drafters (not the compared quants), the controller choosing
    together = "+".join(d.label for d in own)

    configs: list[Config] = [Config(name="target alone", group="baseline")]
    # the default configuration: the flags' (--fixed: the first drafter, draft_max every round)
    fixed, always = speculative.length.fixed, speculative.length.always_draft and not speculative.length.fixed
    default_name = f"{together} K{'=' if fixed else '<='}{draft_max}" + (" always-draft" if always else "")
    configs.append(Config(name=default_name, draft=together, draft_max=draft_max, fixed=fixed, always_draft=always,
                          group="default"))
    plain_default = not (fixed or always)
    for d in drafts:
        if fixed_vs_adaptive:
            if own != [d] or not plain_default:  # this drafter alone under the controller ("lookup K<=8"), unless that is the default
                configs.append(Config(name=f"{d.label} K<={draft_max}", draft=d.label, draft_max=draft_max,
                                      fixed=False, group="drafts"))
            if own != [d] or not always:
                configs.append(Config(name=f"{d.label} K<={draft_max} always-draft", draft=d.label,
                                      draft_max=draft_max, fixed=False, always_draft=True, group="drafts"))
        if d is default or sweep_all_drafts:
            for n in sweep_draft_lens:
                configs.append(Config(name=f"{d.label} K={n}", draft=d.label, draft_max=n, group="k-sweep"))
    if temperature > 0:
        configs.append(Config(name=f"target alone T={temperature:g}", temperature=temperature, group="baseline"))
        for rule in rules:
            configs.append(Config(
                name=f"{together} {rule} T={temperature:g}", draft=together, draft_max=draft_max,
                fixed=False, accept=rule, temperature=temperature, group="sampling",
            ))

    native_bin = None
    if native:
        native_bin = native if isinstance(native, Path) else find_native()
        if native_bin is not None and default.ref != LOOKUP:
            for n in native_draft_lens or sweep_draft_lens:
                configs.append(Config(name=f"native {default.label} K={n}", engine="native", draft=default.label, draft_max=n, group="peer"))
    if llama_cpp_peer:
        configs.append(Config(name="llama-cpp-python alone", engine="llama-cpp-python", group="peer"))
        configs.append(Config(name="llama-cpp-python lookup", engine="llama-cpp-python", draft=LOOKUP, draft_max=10, group="peer"))
    if transformers_peer and default.ref != LOOKUP:
        configs.append(Config(name="transformers alone", engine="transformers", group="peer"))
        configs.append(Config(name=f"transformers assisted {default.label}", engine="transformers", draft=default.label, draft_max=draft_max, fixed=False, group="peer"))

    names = [c.name for c in configs]
    if len(set(names)) != len(names):
        raise UserError("two configurations share a name; use distinct draft labels")
    return BenchPlan(
        target=target, target_label=draft_label(target), drafts=tuple(drafts), prompts=tuple(prompts),
        configs=tuple(configs), default_config=default_name, repeats=repeats, max_tokens=max_tokens,
        temperature=temperature, n_ctx=n_ctx, n_threads=n_threads, draft_kv=draft_kv, seed=seed, quick=quick,
        speculative=speculative, n_gpu_layers=n_gpu_layers, n_gpu_layers_draft=n_gpu_layers_draft,
        native_bin=native_bin, native_requested=bool(native), llama_bench=llama_bench and native_bin is not None,
        microbench=microbench, lockstep=lockstep,
    )


def draft_label(ref: str) -> str:
    """A model reference's short name in tables and plots:
    embedded:smollm2:Q4_1 -> Q4_1; ./a/b.gguf -> b; org/repo -> repo; lookup -> lookup."""
    if ref == LOOKUP:
        return LOOKUP
    if ref.startswith("embedded:"):
        return resolve_quant(ref.rsplit(":", 1)[-1])
    if ref.endswith(".gguf"):
        return Path(ref).stem
    return ref.rsplit("/", 1)[-1]


def derive_quant_drafts(target: str, quants: Sequence[str]) -> list[DraftSpec]:
    """Drafts made on the fly from the target: the same model re-encoded by llama.cpp's quantizer.

    An embedded target derives embedded:NAME:QUANT; a GGUF file is quantized into the cache
    (the first time only).

    Raises:
        UserError: an unknown quant, or a target that is not a local file or embedded model.
    """
    from ggufspec.llama.quantize import FTYPES, quantize
    out = []
    for q in quants:
        q = q.strip().upper()
        if not q:
            continue
        if q not in FTYPES:
            raise UserError(f"unknown quantization {q!r}; choose one of: {', '.join(sorted(FTYPES))}")
        if target.startswith("embedded:"):
            name, _ = parse_embedded(target)
            out.append(DraftSpec(label=q, ref=f"embedded:{name}:{q}", compared=True))
            continue
        src = Path(target).expanduser()
        if not src.is_file():
            raise UserError(f"--draft-quants needs a local or embedded target, got {target!r}")
        dst = cache_dir() / "derived" / f"{src.stem}.{q}.gguf"
        if not dst.is_file():
            quantize(src=src, dst=dst, ftype=q)
        out.append(DraftSpec(label=q, ref=str(dst), compared=True))
    return out
