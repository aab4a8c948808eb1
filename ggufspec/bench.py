"""Measure speculative decoding the way a careful reviewer would (DESIGN.md, Measuring).

A bench is a plan of configurations run on the same prompts, target alone and speculative
alternated inside every (repeat, prompt) block, so that a slow minute on a shared machine hits
both sides alike. Figures are medians: per prompt over repeats, then over prompts.

    plan = make_plan(prompts=load_prompts(), k_values=(1, 2, 4, 8), repeats=3)
    result = run_bench(plan)
    write_outputs(result, Path("bench-out"))

Definitions (per configuration, against the target alone at the same temperature):
    speedup        median over prompts of  median gen tok/s (speculative) / median gen tok/s (alone)
    accept rate    accepted / drafted, pooled over runs
    alpha          accepted / (accepted + rejections): the per-token acceptance probability of
                   Leviathan et al. (tokens after a rejection are drafted but never judged)
    c              one draft decode step / one target decode step, timed back to back
    expected       Theorem 3.8 of Leviathan et al. 2023: (1 - a^(K+1)) / ((1 - a)(cK + 1))

Peers on the same model files and prompts: llama.cpp's native `llama-speculative-simple` and
`llama-bench` (built by scripts/build_native.sh), `llama_cpp.Llama` with prompt lookup, and
Hugging Face transformers assisted generation when torch and transformers are importable.
"""

from __future__ import annotations

import csv
import json
import math
import os
import platform
import re
import statistics
import subprocess
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from ggufspec.errors import UserError

CATEGORIES = ("chat", "code", "summarise", "maths", "long")
BASELINE = "none"  # draft label of the target alone
LOOKUP = "lookup"

# ---- prompts ----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class BenchPrompt:
    """One benchmark prompt: chat messages rendered with the target's own template."""

    id: str
    category: str
    messages: tuple[Mapping[str, str], ...]


def builtin_prompts_path() -> Path:
    """The built-in prompt set (chat, code, summarising a pasted text, maths, long answers)."""
    return Path(__file__).parent / "prompts" / "bench.jsonl"


def load_prompts(path: Path | str | None = None) -> list[BenchPrompt]:
    """Read a prompt file: one JSON object a line, {"id", "category", "messages"}.

    `category` is free text (the built-in set uses chat, code, summarise, maths, long);
    `messages` is a non-empty list of {"role", "content"} with roles system/user/assistant.
    Blank lines and lines starting with '#' are skipped.

    Raises:
        UserError: a missing file, bad JSON, a missing or ill-typed field, a duplicate id,
            or no prompts at all; the message names the file and line.
    """
    path = Path(path) if path is not None else builtin_prompts_path()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"prompt file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read prompt file {path}: {exc}") from None
    prompts: list[BenchPrompt] = []
    seen: set[str] = set()
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{path}:{n}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UserError(f"{where}: not valid JSON ({exc.msg}); write one JSON object a line") from None
        if not isinstance(obj, dict):
            raise UserError(f"{where}: expected a JSON object with id, category and messages")
        for key in ("id", "category", "messages"):
            if key not in obj:
                raise UserError(f"{where}: missing {key!r}; each line needs id, category and messages")
        pid, cat, msgs = obj["id"], obj["category"], obj["messages"]
        if not isinstance(pid, str) or not pid.strip():
            raise UserError(f"{where}: 'id' must be a non-empty string")
        if pid in seen:
            raise UserError(f"{where}: duplicate id {pid!r}")
        if not isinstance(cat, str) or not cat.strip():
            raise UserError(f"{where}: 'category' must be a non-empty string")
        if not isinstance(msgs, list) or not msgs:
            raise UserError(f"{where}: 'messages' must be a non-empty list of {{role, content}}")
        for m in msgs:
            if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
                raise UserError(f"{where}: each message needs string 'role' and 'content'")
            if m["role"] not in ("system", "user", "assistant"):
                raise UserError(f"{where}: unknown role {m['role']!r}; use system, user or assistant")
        if msgs[-1]["role"] != "user":
            raise UserError(f"{where}: the last message must be the user's")
        seen.add(pid)
        prompts.append(BenchPrompt(id=pid, category=cat, messages=tuple(dict(m) for m in msgs)))
    if not prompts:
        raise UserError(f"{path} holds no prompts")
    return prompts


def pick_prompts(prompts: Sequence[BenchPrompt], per_category: Mapping[str, int]) -> list[BenchPrompt]:
    """The first n prompts of each named category, in file order (for --quick)."""
    taken: dict[str, int] = {}
    out = []
    for p in prompts:
        if taken.get(p.category, 0) < per_category.get(p.category, 0):
            taken[p.category] = taken.get(p.category, 0) + 1
            out.append(p)
    return out


# ---- the expected speedup -----------------------------------------------------------------------


def expected_tokens_per_round(*, a: float, k: float) -> float:
    """E[tokens emitted per target call] with K drafts each accepted with probability a:
    1 + a + a^2 + ... + a^K = (1 - a^(K+1)) / (1 - a)  (Leviathan et al. 2023, eq. 1)."""
    from ggufspec.pacing import expected_tokens

    if not 0.0 <= a <= 1.0:
        raise ValueError(f"accept rate must be in [0, 1], got {a}")
    return expected_tokens(a, k)


def expected_speedup(*, a: float, k: float, c: float) -> float:
    """Leviathan et al. 2023, Theorem 3.8: the expected walltime improvement factor
    (1 - a^(K+1)) / ((1 - a)(cK + 1)): tokens per round over the cost of a round (K draft steps
    at c target steps each, plus one target call that is assumed to cost one plain step).

    Args:
        a: per-token acceptance probability (alpha), in [0, 1].
        k: draft length K (may be fractional: a mean over rounds).
        c: draft step time / target step time.
    """
    if c < 0 or k < 0:
        raise ValueError("K and c must be >= 0")
    return expected_tokens_per_round(a=a, k=k) / (c * k + 1.0)


def expected_speedup_measured_verify(*, a: float, k: float, c: float, v: float) -> float:
    """Theorem 3.8 with the target call priced as measured: a verify of K+1 rows costs `v`
    plain target steps (v = 1 in the theorem; on a CPU it grows with K)."""
    return expected_tokens_per_round(a=a, k=k) / (c * k + v)


def expected_speedup_partial(*, a: float, k: float, c: float, share: float, v: float = 1.0) -> float:
    """Theorem 3.8 for a drafter that proposes in only a `share` of rounds (prompt lookup finds
    no match in the others: those rounds are plain target steps, one token for one step).
    With share = 1 and v = 1 it is Theorem 3.8."""
    share = min(1.0, max(0.0, share))
    tokens = share * expected_tokens_per_round(a=a, k=k) + (1.0 - share)
    cost = share * (c * k + v) + (1.0 - share)
    return tokens / cost


def estimate_alpha(*, accepted: int, rejections: int) -> float:
    """Per-token acceptance probability: of the draft tokens the target judged (every accepted one
    and the first rejected one of each round), the share it kept."""
    judged = accepted + rejections
    return accepted / judged if judged else 0.0


# ---- the plan -----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class DraftSpec:
    """A drafter to bench: a GGUF path, or prompt lookup."""

    label: str  # short name in tables and plots: "Q4_1", "lookup", a file stem
    ref: str  # a model reference, or "lookup"


@dataclass(frozen=True, kw_only=True)
class Config:
    """One thing measured on every prompt.

    engine: "ggufspec" (ours), "native" (llama-speculative-simple), "llama-cpp-python",
    "transformers". draft == "none" is the target alone.
    """

    name: str
    engine: str = "ggufspec"
    draft: str = BASELINE
    k: int = 0  # draft_max (fixed: every round; adaptive: the cap)
    adaptive: bool = False
    pace: bool = True  # adaptive only: pause drafting while it does not pay (ggufspec.pacing)
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
    seed: int = 1234
    quick: bool = False
    native_bin: Path | None = None
    native_requested: bool = False
    llama_bench: bool = True
    microbench: bool = True
    slow_peer_prompts: int = 3  # transformers (~10x slower) runs on this many prompts, first repeat only


def make_plan(
    *,
    prompts: Sequence[BenchPrompt],
    target: str | None = None,
    drafts: Sequence[DraftSpec] | None = None,
    k_values: Sequence[int] = (1, 2, 4, 8),
    default_k: int = 8,
    temperature: float = 0.8,
    repeats: int = 3,
    max_tokens: int = 128,
    n_ctx: int = 2048,
    n_threads: int | None = None,
    sweep_all_drafts: bool = True,
    fixed_vs_adaptive: bool = True,
    native: bool | Path | None = None,
    llama_cpp_peer: bool = True,
    transformers_peer: bool = False,
    native_k: Sequence[int] | None = None,
    llama_bench: bool = True,
    microbench: bool = True,
    quick: bool = False,
    seed: int = 1234,
) -> BenchPlan:
    """Build the configurations to run.

    Args:
        prompts: the prompts (see `load_prompts`).
        target: target reference; None = the embedded default target.
        drafts: drafters; the first is the default. None = the embedded default draft and lookup.
        k_values: the K sweep (fixed draft length) run with the default draft, and with every
            draft when `sweep_all_drafts`.
        default_k: draft_max of the default (adaptive) configuration.
        temperature: the sampling sweep's temperature (rejection vs match); 0 skips it.
        native: the directory of llama.cpp's native binaries, True to look in the cache,
            False/None to skip the native peers.
        native_k: K values for llama-speculative-simple (default: k_values).

    Raises:
        UserError: bad K values, repeats, token counts.
    """
    from ggufspec.embedded import DEFAULT_DRAFT, DEFAULT_TARGET

    if repeats < 1:
        raise UserError(f"--repeats must be >= 1, got {repeats}")
    if max_tokens < 2:
        raise UserError(f"max tokens must be >= 2, got {max_tokens}")
    if not k_values or any(k < 1 for k in k_values):
        raise UserError(f"--sweep-k takes positive integers, got {list(k_values)}")
    if default_k < 1:
        raise UserError(f"the default draft length must be >= 1, got {default_k}")
    if temperature < 0 or not math.isfinite(temperature):
        raise UserError(f"--temp must be >= 0, got {temperature}")
    if not prompts:
        raise UserError("no prompts to run")
    target = target or DEFAULT_TARGET
    if drafts is None:
        drafts = (DraftSpec(label=_label(DEFAULT_DRAFT), ref=DEFAULT_DRAFT), DraftSpec(label=LOOKUP, ref=LOOKUP))
    if not drafts:
        raise UserError("give at least one draft (a model or 'lookup')")
    labels = [d.label for d in drafts]
    if len(set(labels)) != len(labels):
        raise UserError(f"two drafts share a label: {labels}; name them apart")
    k_values = tuple(sorted(set(int(k) for k in k_values)))
    default = drafts[0]

    configs: list[Config] = [Config(name="target alone", group="baseline")]
    default_name = f"{default.label} adaptive K<={default_k}"
    configs.append(Config(name=default_name, draft=default.label, k=default_k, adaptive=True, group="default"))
    if default.ref != LOOKUP:
        configs.append(Config(
            name=f"{default.label} adaptive K<={default_k} always-draft", draft=default.label, k=default_k,
            adaptive=True, pace=False, group="drafts",
        ))
    for d in drafts:
        if d is not default and fixed_vs_adaptive:
            configs.append(Config(name=f"{d.label} adaptive K<={default_k}", draft=d.label, k=default_k, adaptive=True, group="drafts"))
        if d is default or sweep_all_drafts:
            for k in k_values:
                configs.append(Config(name=f"{d.label} K={k}", draft=d.label, k=k, group="k-sweep"))
    if temperature > 0:
        configs.append(Config(name=f"target alone T={temperature:g}", temperature=temperature, group="baseline"))
        for rule in ("rejection", "match"):
            configs.append(Config(
                name=f"{default.label} {rule} T={temperature:g}", draft=default.label, k=default_k,
                adaptive=True, accept=rule, temperature=temperature, group="sampling",
            ))

    native_bin = None
    if native:
        native_bin = native if isinstance(native, Path) else find_native()
        if native_bin is not None and default.ref != LOOKUP:
            for k in native_k or k_values:
                configs.append(Config(name=f"native {default.label} K={k}", engine="native", draft=default.label, k=k, group="peer"))
    if llama_cpp_peer:
        configs.append(Config(name="llama-cpp-python alone", engine="llama-cpp-python", group="peer"))
        configs.append(Config(name="llama-cpp-python lookup", engine="llama-cpp-python", draft=LOOKUP, k=10, group="peer"))
    if transformers_peer and default.ref != LOOKUP:
        configs.append(Config(name="transformers alone", engine="transformers", group="peer"))
        configs.append(Config(name=f"transformers assisted {default.label}", engine="transformers", draft=default.label, k=default_k, adaptive=True, group="peer"))

    names = [c.name for c in configs]
    if len(set(names)) != len(names):
        raise UserError("two configurations share a name; use distinct draft labels")
    return BenchPlan(
        target=target, target_label=_label(target), drafts=tuple(drafts), prompts=tuple(prompts),
        configs=tuple(configs), default_config=default_name, repeats=repeats, max_tokens=max_tokens,
        temperature=temperature, n_ctx=n_ctx, n_threads=n_threads, seed=seed, quick=quick,
        native_bin=native_bin, native_requested=bool(native), llama_bench=llama_bench and native_bin is not None,
        microbench=microbench,
    )


def _label(ref: str) -> str:
    """A short name: embedded:smollm2:Q4_1 -> Q4_1; ./a/b.gguf -> b; lookup -> lookup."""
    if ref == LOOKUP:
        return LOOKUP
    if ref.startswith("embedded:"):
        from ggufspec.embedded import resolve_quant

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
    from ggufspec import backend
    from ggufspec.embedded import cache_dir, parse_embedded

    out = []
    for q in quants:
        q = q.strip().upper()
        if not q:
            continue
        if q not in backend.FTYPES:
            raise UserError(f"unknown quantization {q!r}; choose one of: {', '.join(sorted(backend.FTYPES))}")
        if target.startswith("embedded:"):
            name, _ = parse_embedded(target)
            out.append(DraftSpec(label=q, ref=f"embedded:{name}:{q}"))
            continue
        src = Path(target).expanduser()
        if not src.is_file():
            raise UserError(f"--draft-quants needs a local or embedded target, got {target!r}")
        dst = cache_dir() / "derived" / f"{src.stem}.{q}.gguf"
        if not dst.is_file():
            backend.quantize(src=src, dst=dst, ftype=q)
        out.append(DraftSpec(label=q, ref=str(dst)))
    return out


# ---- one run ------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class RunRecord:
    """One generation of one configuration on one prompt."""

    config: str
    engine: str
    draft: str
    k: int
    adaptive: bool
    accept: str
    temperature: float
    prompt_id: str
    category: str
    repeat: int
    order: int  # position in the whole bench (for drift checks)
    prompt_tokens: int
    generated_tokens: int
    gen_tps: float
    prompt_tps: float = 0.0
    gen_s: float = 0.0
    drafted: int = 0
    accepted: int = 0
    rejections: int = 0
    rounds: int = 0
    paused_rounds: int = 0  # rounds the pacer ran the target alone
    draft_s: float = 0.0
    verify_s: float = 0.0
    overhead_s: float = 0.0
    drafted_at: list[int] = field(default_factory=list)
    accepted_at: list[int] = field(default_factory=list)
    stop_reason: str = ""
    identical: bool | None = None  # greedy: same tokens as the target alone on this prompt
    error: str | None = None


def _seed(plan: BenchPlan, prompt_index: int, repeat: int) -> int:
    return plan.seed + 1009 * prompt_index + repeat


class _Ours:
    """Our engine on one loaded target and every draft (contexts loaded once)."""

    def __init__(self, plan: BenchPlan) -> None:
        from ggufspec.backend import Context, Model, ModelSettings
        from ggufspec.drafters import LookupDrafter, ModelDrafter
        from ggufspec.runtime import PairSettings, check_vocab, load_pair, resolve_path

        self.plan = plan
        settings = PairSettings(n_ctx=plan.n_ctx, n_threads=plan.n_threads, n_gpu_layers=0, n_gpu_layers_draft=0)
        self.pair = load_pair(target=plan.target, draft=None, settings=settings)
        self.drafters: dict[str, Any] = {}
        self.paths: dict[str, Path] = {}
        self._owned: list[Any] = []
        # drafts keep an f16 KV cache (the target's "auto" q8_0 is for exactness, see runtime)
        ctx_settings = replace(self.pair.target_ctx.settings, cache_type_k="f16", cache_type_v="f16")
        for d in plan.drafts:
            if d.ref == LOOKUP:
                self.drafters[d.label] = LookupDrafter(ngram_max=settings.lookup_ngram_max, ngram_min=settings.lookup_ngram_min)
                continue
            path = resolve_path(d.ref)
            check_vocab(self.pair.target_path, path)
            model = Model(path, settings=ModelSettings(n_gpu_layers=0))
            ctx = Context(model, settings=ctx_settings)
            ctx.warmup()
            self._owned += [ctx, model]
            self.paths[d.label] = path
            self.drafters[d.label] = ModelDrafter(ctx)
        self.tokens: dict[str, list[int]] = {}
        self.texts: dict[str, str] = {}
        for p in plan.prompts:
            toks = self.pair.encode(messages=p.messages)
            if len(toks) + plan.max_tokens + 16 > plan.n_ctx:
                raise UserError(
                    f"prompt {p.id!r} is {len(toks)} tokens: with {plan.max_tokens} new ones it does not fit "
                    f"a context of {plan.n_ctx}; shorten it"
                )
            self.tokens[p.id] = toks
            self.texts[p.id] = self.prompt_text(p)

    def prompt_text(self, p: BenchPrompt) -> str:
        from ggufspec.chat import render_chat

        m = self.pair.target_model
        return render_chat(
            template=m.chat_template(), messages=p.messages,
            bos_token=m.special_text(m.bos), eos_token=m.special_text(m.eos),
        )

    def run(self, cfg: Config, prompt: BenchPrompt, seed: int):
        from ggufspec.acceptance import AcceptRule
        from ggufspec.drafters import DraftLengthSettings
        from ggufspec.engine import Source, SpeculativeSettings
        from ggufspec.sampling import SamplingSettings

        sampling = SamplingSettings(temperature=cfg.temperature, seed=seed)
        if cfg.is_baseline:
            spec = SpeculativeSettings()
            self.pair.drafter = None
        else:
            spec = SpeculativeSettings(
                accept=None if cfg.accept == "greedy" else AcceptRule.parse(cfg.accept),
                length=DraftLengthSettings(draft_max=cfg.k, adaptive=cfg.adaptive, pace=cfg.pace),
            )
            self.pair.drafter = self.drafters[cfg.draft]
        gen = self.pair.generate(
            prompt_tokens=self.tokens[prompt.id], max_tokens=self.plan.max_tokens, sampling=sampling,
            speculative=spec, use_draft=not cfg.is_baseline,
        ).run()
        # a round that rejected ends with the target's correction token
        rejections = sum(1 for s in gen.sources if s is Source.CORRECTION)
        return gen, rejections

    def close(self) -> None:
        for obj in self._owned:
            obj.close()
        self.pair.close()


# ---- peers --------------------------------------------------------------------------------------


def native_dir() -> Path:
    """Where scripts/build_native.sh puts llama.cpp's binaries."""
    env = os.environ.get("GGUFSPEC_NATIVE_DIR")
    if env:
        return Path(env) / "bin"
    from ggufspec.embedded import cache_dir

    return cache_dir() / "native" / "bin"


def find_native() -> Path | None:
    """The directory holding llama-speculative-simple and llama-bench, or None."""
    d = native_dir()
    if (d / "llama-speculative-simple").is_file() and (d / "llama-bench").is_file():
        return d
    return None


_NATIVE_DECODED = re.compile(r"decoded\s+(\d+)\s+tokens in\s+([\d.]+)\s+seconds, speed:\s+([\d.]+) t/s")
_NATIVE_ENCODED = re.compile(r"encoded\s+(\d+)\s+tokens in\s+([\d.]+)\s+seconds, speed:\s+([\d.]+) t/s")


def parse_native_speculative(output: str) -> dict:
    """Figures from llama-speculative-simple's log: decoded tokens, seconds, t/s, drafted, accepted."""
    m = _NATIVE_DECODED.search(output)
    if not m:
        raise ValueError("no 'decoded N tokens in T seconds' line in llama-speculative-simple's output")
    out = {"generated_tokens": int(m.group(1)), "gen_s": float(m.group(2)), "gen_tps": float(m.group(3))}
    e = _NATIVE_ENCODED.search(output)
    if e:
        out.update(prompt_tokens=int(e.group(1)), prompt_tps=float(e.group(3)))
    for key in ("n_drafted", "n_accept"):
        km = re.search(rf"{key}\s*=\s*(\d+)", output)
        out[key] = int(km.group(1)) if km else 0
    return out


def run_native_speculative(
    *, bin_dir: Path, target: Path, draft: Path, prompt: str, k: int, n_predict: int, n_ctx: int, threads: int,
    cache_type: str = "f16",
) -> dict:
    """One greedy llama-speculative-simple run; its own timing of the decode phase.
    `cache_type`: the target's KV cache type (ours, so both sides do the same work); the draft's is f16."""
    cmd = [
        str(bin_dir / "llama-speculative-simple"), "-m", str(target), "-md", str(draft),
        "-p", prompt, "-n", str(n_predict), "-c", str(n_ctx), "-t", str(threads), "-td", str(threads),
        "--temp", "0", "--top-k", "1", "-fa", "on", "--spec-draft-n-max", str(k), "--spec-draft-n-min", "0",
        "--spec-draft-p-min", "0", "--spec-type", "draft-simple", "-ngl", "0",
        "-ctk", cache_type, "-ctv", cache_type,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, errors="replace")
    text = proc.stdout + proc.stderr
    if proc.returncode != 0:
        tail = " | ".join(text.strip().splitlines()[-3:])
        raise RuntimeError(f"llama-speculative-simple exited {proc.returncode}: {tail}")
    return parse_native_speculative(text)


def run_llama_bench(
    *, bin_dir: Path, model: Path, n_gen: int, depth: int, threads: int, reps: int = 3, cache_type: str = "f16"
) -> dict:
    """llama-bench's generation tokens/s for the target alone (`-o json`), at a KV depth like ours,
    with our KV cache type."""
    cmd = [
        str(bin_dir / "llama-bench"), "-m", str(model), "-p", "0", "-n", str(n_gen), "-d", str(depth),
        "-t", str(threads), "-fa", "1", "-r", str(reps), "-ngl", "0", "-o", "json",
        "-ctk", cache_type, "-ctv", cache_type,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, errors="replace")
    if proc.returncode != 0:
        tail = " | ".join((proc.stdout + proc.stderr).strip().splitlines()[-3:])
        raise RuntimeError(f"llama-bench exited {proc.returncode}: {tail}")
    rows = json.loads(proc.stdout)
    row = next(r for r in rows if r.get("n_gen", 0) > 0)
    return {
        "gen_tps": float(row["avg_ts"]), "stddev_tps": float(row.get("stddev_ts", 0.0)),
        "samples_ts": row.get("samples_ts", []), "n_gen": int(row["n_gen"]), "n_depth": int(row.get("n_depth", depth)),
        "n_threads": int(row.get("n_threads", threads)), "build": row.get("build_commit"), "cpu": row.get("cpu_info"),
    }


class _LlamaCppPython:
    """llama-cpp-python's own high-level path: `Llama` alone and with prompt-lookup drafting."""

    def __init__(self, plan: BenchPlan, target: Path, threads: int) -> None:
        import llama_cpp
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        common = dict(
            model_path=str(target), n_ctx=plan.n_ctx, n_batch=512, n_threads=threads, n_threads_batch=threads,
            flash_attn=True, verbose=False, n_gpu_layers=0,
        )
        self.alone = llama_cpp.Llama(**common)
        self.lookup = llama_cpp.Llama(**common, draft_model=LlamaPromptLookupDecoding())
        self.max_tokens = plan.max_tokens

    def run(self, cfg: Config, tokens: list[int], is_eog: Callable[[int], bool]) -> dict:
        llm = self.lookup if cfg.draft == LOOKUP else self.alone
        llm.reset()  # no prompt cache between runs: every run prefills, as ours does
        t0 = time.perf_counter()
        t_first = None
        n = 0
        for tok in llm.generate(tokens, temp=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0):
            n += 1
            if t_first is None:
                t_first = time.perf_counter()
            if is_eog(tok) or n >= self.max_tokens:
                break
        t_end = time.perf_counter()
        gen_s = t_end - (t_first or t_end)
        return {
            "generated_tokens": n, "gen_s": gen_s, "gen_tps": (n - 1) / gen_s if n > 1 and gen_s > 0 else 0.0,
            "prompt_tps": len(tokens) / ((t_first or t_end) - t0),
        }

    def close(self) -> None:
        for llm in (self.alone, self.lookup):
            try:
                llm.close()
            except Exception:
                pass


def transformers_available() -> str | None:
    """None when torch and transformers import; else why not (for the report)."""
    try:
        import accelerate  # noqa: F401  (transformers needs it to load a GGUF file)
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except Exception as exc:  # ImportError, or a broken install
        return (f"transformers assisted generation skipped: {type(exc).__name__}: {exc} "
                "(pip install 'ggufspec[peers]' and a CPU torch)")
    return None


class _Transformers:
    """Hugging Face assisted generation (`assistant_model=`) on the same GGUF files, CPU torch."""

    def __init__(self, plan: BenchPlan, target: Path, draft: Path, threads: int) -> None:
        import torch
        import transformers
        from transformers import AutoModelForCausalLM

        transformers.utils.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()
        torch.set_num_threads(threads)
        self.torch = torch
        self.target = AutoModelForCausalLM.from_pretrained(str(target.parent), gguf_file=target.name, dtype=torch.float32)
        self.draft = AutoModelForCausalLM.from_pretrained(str(draft.parent), gguf_file=draft.name, dtype=torch.float32)
        self.target.eval()
        self.draft.eval()
        self.max_tokens = plan.max_tokens

    def run(self, cfg: Config, tokens: list[int], eos: int) -> dict:
        torch = self.torch
        ids = torch.tensor([tokens])
        kwargs: dict[str, Any] = dict(max_new_tokens=self.max_tokens, do_sample=False, eos_token_id=eos, pad_token_id=eos)
        if not cfg.is_baseline:
            kwargs.update(assistant_model=self.draft)
            self.draft.generation_config.num_assistant_tokens = cfg.k
            self.draft.generation_config.num_assistant_tokens_schedule = "heuristic" if cfg.adaptive else "constant"
        with torch.inference_mode():
            # The first token alone, timed, then the whole generation: gen time = total - first.
            t0 = time.perf_counter()
            self.target.generate(ids, max_new_tokens=1, do_sample=False, pad_token_id=eos)
            t1 = time.perf_counter()
            out = self.target.generate(ids, **kwargs)
            t2 = time.perf_counter()
        n = int(out.shape[1] - ids.shape[1])
        gen_s = max(1e-9, (t2 - t1) - (t1 - t0))
        return {"generated_tokens": n, "gen_s": gen_s, "gen_tps": (n - 1) / gen_s if n > 1 else 0.0,
                "prompt_tps": len(tokens) / (t1 - t0)}


# ---- micro measurements: c and the verify cost ------------------------------------------------------


def step_times(
    contexts: Mapping[str, Any], prompt: Sequence[int], *, batch_sizes: Mapping[str, Sequence[int]] | None = None,
    reps: int = 24,
) -> dict[str, dict[int, float]]:
    """Median seconds of one decode of n tokens (logits for all n rows) after `prompt`, per
    context and n. The contexts take turns sample by sample, so a load change on a shared machine
    hits every figure alike. n = 1 is one plain decode step; n = K+1 is the price of verifying K drafts.
    """
    sizes = {name: list((batch_sizes or {}).get(name, (1,))) for name in contexts}
    samples: dict[str, dict[int, list[float]]] = {name: {n: [] for n in sizes[name]} for name in contexts}
    base: dict[str, int] = {}
    for name, ctx in contexts.items():
        ctx.clear()
        ctx.decode(list(prompt), logits="last")
        base[name] = ctx.n_past
    tok = prompt[-1]
    for _ in range(reps):
        for name, ctx in contexts.items():
            for n in sizes[name]:
                t = time.perf_counter()
                ctx.decode([tok] * n, logits="all")
                samples[name][n].append(time.perf_counter() - t)
                ctx.truncate(base[name])
    for ctx in contexts.values():
        ctx.clear()
    return {name: {n: statistics.median(v) for n, v in per.items()} for name, per in samples.items()}


# ---- running the plan ---------------------------------------------------------------------------


@dataclass(kw_only=True)
class BenchResult:
    plan: BenchPlan
    runs: list[RunRecord]
    machine: dict
    peers: dict  # llama-bench rows, notes on absent peers
    micro: dict  # step times, c per draft, verify cost per K
    summary: dict
    started: str
    wall_s: float

    def to_dict(self) -> dict:
        plan = self.plan
        return {
            "schema": "ggufspec.bench/1",
            "started": self.started,
            "wall_s": round(self.wall_s, 2),
            "machine": self.machine,
            "plan": {
                "target": plan.target,
                "drafts": [asdict(d) for d in plan.drafts],
                "prompts": [p.id for p in plan.prompts],
                "configs": [asdict(c) for c in plan.configs],
                "default_config": plan.default_config,
                "repeats": plan.repeats,
                "max_tokens": plan.max_tokens,
                "temperature": plan.temperature,
                "n_ctx": plan.n_ctx,
                "n_threads": plan.n_threads,
                "quick": plan.quick,
            },
            "summary": self.summary,
            "micro": self.micro,
            "peers": self.peers,
            "runs": [asdict(r) for r in self.runs],
        }


Progress = Callable[[str, int, int], None]  # (what is running, done, total)


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
    n = 0
    slow = 0
    for group in _blocks(plan):
        order = _block_order(group, 0)
        slow += sum(1 for c in order if c.engine == "transformers")
        n += len(order) - sum(1 for c in order if c.engine == "transformers")
    return (n * plan.repeats * len(plan.prompts) + slow * min(plan.slow_peer_prompts, len(plan.prompts))
            + (plan.repeats if plan.llama_bench else 0))


def run_bench(plan: BenchPlan, *, progress: Progress | None = None) -> BenchResult:
    """Run every configuration on every prompt, `plan.repeats` times, alternating.

    Args:
        plan: see `make_plan`.
        progress: called before each run with (label, done, total).

    Returns:
        Every run, the machine, the peers, and the summary (see `summarise`).
    """
    from ggufspec.backend import physical_cores

    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    t_start = time.perf_counter()
    load_start = _load()
    threads = plan.n_threads or physical_cores()
    total = count_runs(plan)
    done = 0

    def tick(label: str) -> None:
        if progress is not None:
            progress(label, done, total)

    tick("loading models")
    ours = _Ours(plan)
    peers: dict[str, Any] = {"notes": [], "llama_bench": []}
    lcp = trf = None
    needs = {c.engine for c in plan.configs}
    engines_ok = set(needs)
    try:
        if "llama-cpp-python" in needs:
            lcp = _LlamaCppPython(plan, ours.pair.target_path, threads)
        if "transformers" in needs:
            why = transformers_available()
            if why is None:
                try:
                    trf = _Transformers(plan, ours.pair.target_path, ours.paths[plan.drafts[0].label], threads)
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

        micro = _micro(plan, ours) if plan.microbench else {}
        depth = int(statistics.median(len(t) for t in ours.tokens.values()))

        runs: list[RunRecord] = []
        baseline_tokens: dict[tuple[str, float, int], list[int]] = {}
        order = 0
        for r in range(plan.repeats):
            if plan.llama_bench and plan.native_bin is not None:
                tick("llama-bench (target alone)")
                try:
                    row = run_llama_bench(bin_dir=plan.native_bin, model=ours.pair.target_path,
                                          n_gen=plan.max_tokens, depth=depth, threads=threads, reps=3,
                                          cache_type=ours.pair.target_ctx.settings.cache_type_k)
                    row["repeat"] = r
                    peers["llama_bench"].append(row)
                except Exception as exc:
                    peers["notes"].append(f"llama-bench failed: {exc}")
                done += 1
            for pi, prompt in enumerate(plan.prompts):
                for group in _blocks(plan):
                    for cfg in _block_order(group, r * len(plan.prompts) + pi):
                        tick(f"{cfg.name} · {prompt.id} · repeat {r + 1}/{plan.repeats}")
                        if cfg.engine == "transformers" and (r > 0 or pi >= plan.slow_peer_prompts):
                            continue  # count_runs leaves these out too
                        if cfg.engine in engines_ok:
                            rec = _run_one(plan, cfg, prompt, r, pi, ours, lcp, trf, baseline_tokens, order)
                            runs.append(rec)
                        done += 1
                        order += 1
        tick("summarising")
        summary = summarise(plan, runs, micro=micro, peers=peers)
        machine = machine_info(n_threads=threads)
        machine["load_start"] = load_start
        return BenchResult(
            plan=plan, runs=runs, machine=machine, peers=peers, micro=micro,
            summary=summary, started=started, wall_s=time.perf_counter() - t_start,
        )
    finally:
        if lcp is not None:
            lcp.close()
        ours.close()


def _run_one(plan, cfg, prompt, r, pi, ours, lcp, trf, baseline_tokens, order) -> RunRecord:
    from ggufspec.backend import physical_cores

    seed = _seed(plan, pi, r)
    base = dict(
        config=cfg.name, engine=cfg.engine, draft=cfg.draft, k=cfg.k, adaptive=cfg.adaptive, accept=cfg.accept,
        temperature=cfg.temperature, prompt_id=prompt.id, category=prompt.category, repeat=r, order=order,
        prompt_tokens=len(ours.tokens[prompt.id]),
    )
    try:
        if cfg.engine == "ggufspec":
            gen, rejections = ours.run(cfg, prompt, seed)
            s = gen.stats
            identical = None
            if cfg.temperature == 0:
                key = (prompt.id, 0.0, 0)
                if cfg.is_baseline:
                    baseline_tokens.setdefault(key, list(gen.tokens))
                ref = baseline_tokens.get(key)
                identical = ref == list(gen.tokens) if ref is not None else None
            return RunRecord(
                **base, generated_tokens=s.generated_tokens, gen_tps=s.gen_tps, prompt_tps=s.prompt_tps,
                gen_s=s.gen_s, drafted=s.drafted, accepted=s.accepted, rejections=rejections, rounds=s.rounds,
                paused_rounds=s.paused_rounds,
                draft_s=s.draft_s, verify_s=s.verify_s, overhead_s=s.overhead_s, drafted_at=list(s.drafted_at),
                accepted_at=list(s.accepted_at), stop_reason=s.stop_reason, identical=identical,
            )
        if cfg.engine == "native":
            threads = plan.n_threads or physical_cores()
            out = run_native_speculative(
                bin_dir=plan.native_bin, target=ours.pair.target_path, draft=ours.paths[cfg.draft],
                prompt=ours.texts[prompt.id], k=cfg.k, n_predict=plan.max_tokens, n_ctx=plan.n_ctx, threads=threads,
                cache_type=ours.pair.target_ctx.settings.cache_type_k,
            )
            base["prompt_tokens"] = out.get("prompt_tokens", base["prompt_tokens"])
            return RunRecord(
                **base, generated_tokens=out["generated_tokens"], gen_tps=out["gen_tps"], gen_s=out["gen_s"],
                prompt_tps=out.get("prompt_tps", 0.0), drafted=out["n_drafted"], accepted=out["n_accept"],
            )
        if cfg.engine == "llama-cpp-python":
            out = lcp.run(cfg, ours.tokens[prompt.id], ours.pair.target_model.is_eog)
            return RunRecord(**base, generated_tokens=out["generated_tokens"], gen_tps=out["gen_tps"],
                             gen_s=out["gen_s"], prompt_tps=out["prompt_tps"])
        if cfg.engine == "transformers":
            out = trf.run(cfg, ours.tokens[prompt.id], ours.pair.target_model.eos)
            return RunRecord(**base, generated_tokens=out["generated_tokens"], gen_tps=out["gen_tps"],
                             gen_s=out["gen_s"], prompt_tps=out["prompt_tps"])
        raise ValueError(f"unknown engine {cfg.engine}")
    except UserError:
        raise
    except Exception as exc:  # a peer failing must not lose the rest of the bench
        return RunRecord(**base, generated_tokens=0, gen_tps=0.0, error=f"{type(exc).__name__}: {exc}")


def _micro(plan: BenchPlan, ours: _Ours) -> dict:
    """c per draft model and the verify cost of K+1 rows, timed turn about on one prompt."""
    prompt = ours.tokens[plan.prompts[0].id]
    ks = sorted({c.k for c in plan.configs if c.engine == "ggufspec" and c.k > 0} | {1})
    sizes = sorted({1} | {k + 1 for k in ks})
    contexts: dict[str, Any] = {"__target__": ours.pair.target_ctx}
    contexts.update({label: d.ctx for label, d in ours.drafters.items() if label != LOOKUP})
    times = step_times(contexts, prompt, batch_sizes={"__target__": sizes})
    for label, d in ours.drafters.items():
        if label != LOOKUP:
            d.reset()
    target = times["__target__"]
    out: dict[str, Any] = {
        "target_step_s": target[1],
        "verify_s": {str(n - 1): target[n] for n in sizes},  # key K: decode of K+1 rows
        "verify_cost": {str(n - 1): target[n] / target[1] for n in sizes},
        "draft_step_s": {},
        "c": {},
    }
    for label in ours.drafters:
        d = 0.0 if label == LOOKUP else times[label][1]
        out["draft_step_s"][label] = d
        out["c"][label] = d / target[1]
    return out


# ---- summarising ----------------------------------------------------------------------------------


def _median(xs: Iterable[float]) -> float | None:
    xs = [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return statistics.median(xs) if xs else None


def summarise(plan: BenchPlan, runs: Sequence[RunRecord], *, micro: Mapping | None = None, peers: Mapping | None = None) -> dict:
    """Per-configuration figures and the headline numbers.

    Returns a dict with `speedup` (the default configuration's), `vs_native` (our best K / native's
    best K, same draft; None without the native peer), `vs_llama_bench` (our target alone / llama-bench),
    `configs` (one entry per configuration) and `by_category`.
    """
    micro = micro or {}
    peers = peers or {}
    ok = [r for r in runs if r.error is None and r.generated_tokens > 1]
    # per prompt, the target alone's median tok/s, per temperature (ours)
    base_tps: dict[tuple[str, float], float] = {}
    for key in {(r.prompt_id, r.temperature) for r in ok if r.engine == "ggufspec" and r.draft == BASELINE}:
        base_tps[key] = _median(r.gen_tps for r in ok if r.engine == "ggufspec" and r.draft == BASELINE
                                and (r.prompt_id, r.temperature) == key)
    base_step = _pooled_step(ok, temperature=0.0)

    configs = []
    for cfg in plan.configs:
        rs = [r for r in ok if r.config == cfg.name]
        errors = [r.error for r in runs if r.config == cfg.name and r.error]
        entry: dict[str, Any] = {**asdict(cfg), "runs": len(rs), "errors": len(errors)}
        if errors:
            entry["first_error"] = errors[0]
        if not rs:
            configs.append(entry)
            continue
        per_prompt: dict[str, list[RunRecord]] = {}
        for r in rs:
            per_prompt.setdefault(r.prompt_id, []).append(r)
        tps = {pid: _median(r.gen_tps for r in v) for pid, v in per_prompt.items()}
        ratios = {pid: t / base_tps[(pid, cfg.temperature)] for pid, t in tps.items()
                  if base_tps.get((pid, cfg.temperature))}
        drafted = sum(r.drafted for r in rs)
        accepted = sum(r.accepted for r in rs)
        rejections = sum(r.rejections for r in rs)
        gen_tokens = sum(max(0, r.generated_tokens - 1) for r in rs)
        rounds = sum(r.rounds for r in rs)
        draft_rounds = sum(r.drafted_at[0] for r in rs if r.drafted_at)
        entry.update(
            tps=_median(tps.values()),
            speedup=_median(ratios.values()) if not cfg.is_baseline or cfg.engine != "ggufspec" else 1.0,
            speedup_min=min(ratios.values()) if ratios else None,
            speedup_max=max(ratios.values()) if ratios else None,
            worst_prompt=min(ratios, key=ratios.get) if ratios else None,
            prompt_tps=_median(r.prompt_tps for r in rs),
            generated_tokens=_median(r.generated_tokens for r in rs),
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
        if not cfg.is_baseline:
            k_eff = drafted / draft_rounds if draft_rounds else float(cfg.k)
            alpha = estimate_alpha(accepted=accepted, rejections=rejections)
            entry.update(
                accept_rate=accepted / drafted if drafted else None,
                drafted=drafted, accepted=accepted,
                accept_rate_by_position=_by_position(rs),
                draft_rounds_share=draft_rounds / rounds if rounds else None,
            )
            if cfg.engine == "ggufspec":
                c = micro.get("c", {}).get(cfg.draft)
                # c as it happened in the runs: draft decode time per drafted token / plain target step
                c_runs = (sum(r.draft_s for r in rs) / drafted) / base_step if drafted and base_step else None
                v = _verify_cost(micro, k_eff)
                entry.update(alpha=alpha, k_eff=k_eff, c=c, c_runs=c_runs, verify_cost=v)
                if c is not None and draft_rounds:
                    if cfg.draft == LOOKUP:  # lookup drafts only where it finds a match
                        share = draft_rounds / rounds if rounds else 1.0
                        entry["expected_speedup"] = expected_speedup_partial(a=alpha, k=k_eff, c=c, share=share)
                        if v is not None:
                            entry["expected_speedup_measured_verify"] = expected_speedup_partial(
                                a=alpha, k=k_eff, c=c, share=share, v=v)
                    else:
                        entry["expected_speedup"] = expected_speedup(a=alpha, k=k_eff, c=c)
                        if v is not None:
                            entry["expected_speedup_measured_verify"] = expected_speedup_measured_verify(a=alpha, k=k_eff, c=c, v=v)
                    best = max(range(1, 17), key=lambda kk: expected_speedup(a=alpha, k=kk, c=c))
                    entry["best_k_expected"] = {"k": best, "speedup": expected_speedup(a=alpha, k=best, c=c)}
        configs.append(entry)

    by_name = {c["name"]: c for c in configs}
    default = by_name.get(plan.default_config, {})
    default_draft = plan.drafts[0].label
    ours_greedy = [c for c in configs if c["engine"] == "ggufspec" and c["draft"] == default_draft
                   and c["temperature"] == 0 and c.get("tps")]
    native = [c for c in configs if c["engine"] == "native" and c.get("tps")]
    best_ours = max(ours_greedy, key=lambda c: c["tps"], default=None)
    # the same comparison among configurations that really drafted (the pacer may pick the target alone)
    drafting = [c for c in ours_greedy if (c.get("draft_rounds_share") or 0) >= 0.5]
    best_drafting = max(drafting, key=lambda c: c["tps"], default=None)
    best_native = max(native, key=lambda c: c["tps"], default=None)
    base_cfg = by_name.get("target alone", {})
    lb = [row["gen_tps"] for row in peers.get("llama_bench", [])]
    lb_tps = _median(lb)
    lookup_ours = next((c for c in configs if c["engine"] == "ggufspec" and c["draft"] == LOOKUP and c["adaptive"]), None)
    lcp_lookup = by_name.get("llama-cpp-python lookup", {})
    sampling = [c for c in configs if c["group"] == "sampling"]
    best_any = max((c for c in configs if c["engine"] == "ggufspec" and not c["draft"] == BASELINE
                    and c["temperature"] == 0 and c.get("speedup")), key=lambda c: c["speedup"], default=None)
    chat_ids = {p.id for p in plan.prompts if p.category == "chat"}

    summary: dict[str, Any] = {
        "default_config": plan.default_config,
        "speedup": default.get("speedup"),
        "speedup_min": default.get("speedup_min"),
        "speedup_chat": _median_ratio(ok, plan.default_config, base_tps, chat_ids),
        "accept_rate": default.get("accept_rate"),
        "alpha": default.get("alpha"),
        "expected_speedup": default.get("expected_speedup"),
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
        "identical_greedy": _median(c["identical"] for c in configs if c.get("identical") is not None),
    }
    return {**summary, "configs": configs, "by_category": _by_category(plan, ok, base_tps)}


def _peer_ratio(ok: Sequence[RunRecord], engine: str) -> float | None:
    """A peer's own speedup: its speculative tok/s over its target alone, per prompt, median."""
    alone = {r.prompt_id: r.gen_tps for r in ok if r.engine == engine and r.draft == BASELINE}
    ratios = [r.gen_tps / alone[r.prompt_id] for r in ok
              if r.engine == engine and r.draft != BASELINE and alone.get(r.prompt_id)]
    return _median(ratios)


def _pick(c: Mapping | None, *keys: str) -> dict | None:
    return {k: c.get(k) for k in keys} if c else None


def _pooled_step(runs: Sequence[RunRecord], *, temperature: float) -> float | None:
    rs = [r for r in runs if r.engine == "ggufspec" and r.draft == BASELINE and r.temperature == temperature]
    n = sum(r.generated_tokens - 1 for r in rs)
    return sum(r.gen_s for r in rs) / n if n else None


def _verify_cost(micro: Mapping, k_eff: float) -> float | None:
    """Verify cost of K+1 rows in plain steps, interpolated at a fractional K."""
    vc = {int(k): v for k, v in micro.get("verify_cost", {}).items()}
    if not vc:
        return None
    ks = sorted(vc)
    if k_eff <= ks[0]:
        return vc[ks[0]] if k_eff >= ks[0] else 1.0 + (vc[ks[0]] - 1.0) * (k_eff / ks[0] if ks[0] else 0)
    for lo, hi in zip(ks, ks[1:]):
        if lo <= k_eff <= hi:
            w = (k_eff - lo) / (hi - lo)
            return vc[lo] * (1 - w) + vc[hi] * w
    return vc[ks[-1]]


def _by_position(rs: Sequence[RunRecord]) -> list[float]:
    n = max((len(r.drafted_at) for r in rs), default=0)
    d = [sum(r.drafted_at[i] for r in rs if i < len(r.drafted_at)) for i in range(n)]
    a = [sum(r.accepted_at[i] for r in rs if i < len(r.accepted_at)) for i in range(n)]
    return [ai / di if di else None for ai, di in zip(a, d)]


def _median_ratio(ok, name, base_tps, ids) -> float | None:
    per: dict[str, list[float]] = {}
    for r in ok:
        if r.config == name and r.prompt_id in ids:
            per.setdefault(r.prompt_id, []).append(r.gen_tps)
    ratios = [_median(v) / base_tps[(pid, 0.0)] for pid, v in per.items() if base_tps.get((pid, 0.0))]
    return _median(ratios)


def _by_category(plan: BenchPlan, ok: Sequence[RunRecord], base_tps) -> dict:
    """Speedup per prompt category for each greedy configuration of ours."""
    cats = sorted({p.category for p in plan.prompts})
    out: dict[str, dict[str, float | None]] = {}
    for cfg in plan.configs:
        if cfg.is_baseline or cfg.temperature != 0:
            continue
        row = {}
        for cat in cats:
            ids = {p.id for p in plan.prompts if p.category == cat}
            row[cat] = _median_ratio(ok, cfg.name, base_tps, ids)
        out[cfg.name] = row
    return out


# ---- the machine ----------------------------------------------------------------------------------


def machine_info(*, n_threads: int | None = None) -> dict:
    """CPU model, cores, RAM, GPUs, OS and the versions that matter."""
    import psutil

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    gpus: list[dict] = []
    try:
        from ggufspec.devices import detect_gpus

        gpus = [{"name": g.name, "total_bytes": g.total_bytes} for g in detect_gpus()]
    except Exception:
        pass
    versions = {"python": platform.python_version()}
    for mod in ("ggufspec", "llama_cpp", "numpy", "matplotlib", "torch", "transformers"):
        try:
            versions[mod] = __import__(mod).__version__
        except Exception:
            pass
    native = find_native()
    if native is not None and (native / "VERSION").is_file():
        versions["native_llama_cpp_from"] = "llama-cpp-python " + (native / "VERSION").read_text().strip()
    return {
        "cpu": cpu,
        "physical_cores": psutil.cpu_count(logical=False),
        "logical_cores": psutil.cpu_count(logical=True),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "ram_bytes": int(psutil.virtual_memory().total),
        "gpus": gpus,
        "os": platform.platform(),
        "threads": n_threads,
        "batch_invariant_kernels": _batch_invariant_kernels(),
        "load_end": _load(),
        "versions": versions,
    }


def _batch_invariant_kernels() -> bool | None:
    try:
        from ggufspec.backend import batch_invariant_kernels

        return batch_invariant_kernels()
    except Exception:
        return None


def _load() -> dict:
    """Load average and CPU pressure (PSI): a busy shared machine slows every figure."""
    out: dict[str, Any] = {}
    try:
        out["loadavg"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        pass
    try:
        some = Path("/proc/pressure/cpu").read_text().splitlines()[0].split()
        out["cpu_pressure_avg10"] = float(some[1].split("=")[1])
        out["cpu_pressure_avg60"] = float(some[2].split("=")[1])
    except (OSError, IndexError, ValueError):
        pass
    return out


# ---- writers --------------------------------------------------------------------------------------

CSV_FIELDS = [
    "config", "engine", "draft", "k", "adaptive", "accept", "temperature", "prompt_id", "category", "repeat",
    "order", "prompt_tokens", "generated_tokens", "gen_tps", "prompt_tps", "gen_s", "drafted", "accepted",
    "rejections", "rounds", "paused_rounds", "draft_s", "verify_s", "overhead_s", "stop_reason", "identical", "error",
]


def write_json(result: BenchResult, path: Path) -> Path:
    path.write_text(json.dumps(result.to_dict(), indent=1, default=_json_default) + "\n")
    return path


def _json_default(o: Any) -> Any:
    if isinstance(o, Path):
        return str(o)
    raise TypeError(type(o).__name__)


def write_csv(result: BenchResult, path: Path) -> Path:
    """One row per run."""
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        w.writeheader()
        for r in result.runs:
            w.writerow({k: (round(v, 6) if isinstance(v, float) else v) for k, v in asdict(r).items()})
    return path


def _f(x: Any, fmt: str = "{:.2f}", none: str = "–") -> str:
    return none if x is None else fmt.format(x)


def markdown(result: BenchResult) -> str:
    """The results as Markdown: headline, one row per configuration, peers, machine."""
    s, plan, m = result.summary, result.plan, result.machine
    lines = [
        f"# ggufspec bench: {plan.target_label} target",
        "",
        f"Target `{plan.target}`; drafts: {', '.join(f'`{d.label}`' for d in plan.drafts)}. "
        f"{len(plan.prompts)} prompts ({', '.join(sorted({p.category for p in plan.prompts}))}), "
        f"{plan.max_tokens} new tokens, {plan.repeats} repeat(s), target alone and speculative alternated; "
        "medians per prompt over repeats, then over prompts.",
        "",
        f"**Machine**: {m['cpu']}, {m['physical_cores']} cores ({m['logical_cores']} logical), "
        f"{m['ram_bytes'] / 2**30:.0f} GiB RAM, {'GPUs: ' + ', '.join(g['name'] for g in m['gpus']) if m['gpus'] else 'no GPU'}; "
        f"{m['threads']} threads; llama-cpp-python {m['versions'].get('llama_cpp')}"
        f"{' (CPU backend without llamafile: batch-invariant kernels)' if m.get('batch_invariant_kernels') else ''}, "
        f"Python {m['versions']['python']}; "
        f"load average at start / end {_loadtext(m.get('load_start'))} / {_loadtext(m.get('load_end'))}.",
        "",
        "## Headline",
        "",
        f"- speedup of the default configuration (`{s['default_config']}`): **{_f(s['speedup'])}x** "
        f"(worst prompt {_f(s['speedup_min'])}x; chat prompts {_f(s['speedup_chat'])}x), "
        f"accept rate {_f(s['accept_rate'], '{:.1%}')}, expected by Theorem 3.8 {_f(s['expected_speedup'])}x",
        f"- target alone: {_f(s['target_alone_tps'], '{:.1f}')} tok/s; llama-bench: {_f(s['llama_bench_tps'], '{:.1f}')} tok/s "
        f"(ours / llama-bench = {_f(s['vs_llama_bench'], '{:.3f}')})",
        "- vs llama.cpp native `llama-speculative-simple` at each one's best K: "
        + (f"**{_f(s['vs_native'], '{:.2f}')}x** (ours {s['best_ours']['name']} {_f(s['best_ours']['tps'], '{:.1f}')} tok/s, "
           f"native {s['best_native']['name']} {_f(s['best_native']['tps'], '{:.1f}')} tok/s)" if s.get("vs_native") else "not measured (peer absent)"),
    ]
    share = s.get("default_draft_rounds_share")
    if share is not None and share < 0.5:
        lines.insert(-2, f"- the default configuration drafted in {share:.0%} of rounds: its pacer measured that drafting "
                         "loses to the target alone here and ran the target alone (see `always-draft` for the forced loop)")
    if s.get("vs_native_drafting") and s["best_ours_drafting"]["name"] != s["best_ours"]["name"]:
        lines.append(f"- among configurations that draft in most rounds: **{_f(s['vs_native_drafting'], '{:.2f}')}x** native "
                     f"(ours {s['best_ours_drafting']['name']} {_f(s['best_ours_drafting']['tps'], '{:.1f}')} tok/s)")
    if s.get("best_speedup"):
        b = s["best_speedup"]
        lines.append(f"- best speedup of any greedy configuration: {b['name']} {_f(b['speedup'])}x")
    if s.get("sampling"):
        parts = [f"{rule}: speedup {_f(v['speedup'])}x, accept rate {_f(v['accept_rate'], '{:.1%}')}"
                 for rule, v in s["sampling"].items()]
        lines.append(f"- at temperature {plan.temperature:g}: " + "; ".join(parts))
    if s.get("transformers_assisted_speedup") is not None:
        lines.append(f"- transformers assisted generation (same GGUF files dequantized to float32 torch, CPU): "
                     f"{_f(s['transformers_assisted_speedup'])}x its own target alone, on {plan.slow_peer_prompts} prompts")
    if s.get("identical_greedy") is not None:
        lines.append(f"- greedy runs token-identical to the target alone: {s['identical_greedy']:.0%} (median over configurations)")
    lines += ["", "## Configurations", "",
              "| configuration | engine | tok/s | speedup | worst | accept | alpha | K eff | c | expected (Thm 3.8) | expected, verify measured | rounds drafting | draft / verify / python ms/tok | identical |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|"]
    for c in s["configs"]:
        mpt = c.get("ms_per_token") or {}
        split = " / ".join(_f(mpt.get(k), "{:.1f}") for k in ("draft", "verify", "python")) if mpt else "–"
        lines.append(
            f"| {c['name']} | {c['engine']} | {_f(c.get('tps'), '{:.1f}')} | {_f(c.get('speedup'))} | "
            f"{_f(c.get('speedup_min'))} | {_f(c.get('accept_rate'), '{:.1%}')} | {_f(c.get('alpha'), '{:.3f}')} | "
            f"{_f(c.get('k_eff'), '{:.1f}')} | {_f(c.get('c'), '{:.2f}')} | {_f(c.get('expected_speedup'))} | "
            f"{_f(c.get('expected_speedup_measured_verify'))} | {_f(c.get('draft_rounds_share'), '{:.0%}')} | {split} | "
            f"{_f(c.get('identical'), '{:.0%}')} |"
        )
    micro = result.micro
    if micro:
        lines += ["", "## Cost model (timed back to back)", "",
                  f"- one target step: {micro['target_step_s'] * 1e3:.2f} ms; one draft step: "
                  + ", ".join(f"{k} {v * 1e3:.2f} ms (c = {micro['c'][k]:.2f})" for k, v in micro["draft_step_s"].items()),
                  "- verifying K drafts (one decode of K+1 rows), in plain target steps: "
                  + ", ".join(f"K={k}: {v:.2f}" for k, v in micro["verify_cost"].items()),
                  ]
    cats = result.summary.get("by_category") or {}
    if cats:
        names = sorted({c for row in cats.values() for c in row})
        lines += ["", "## Speedup by prompt category", "", "| configuration | " + " | ".join(names) + " |",
                  "|---|" + "---:|" * len(names)]
        for cfg, row in cats.items():
            lines.append(f"| {cfg} | " + " | ".join(_f(row.get(n)) for n in names) + " |")
    notes = list(result.peers.get("notes") or [])
    differ = sorted({r.prompt_id for r in result.runs if r.identical is False})
    if differ:
        longest = max(r.prompt_tokens + r.generated_tokens for r in result.runs if r.prompt_id in differ)
        notes.append(
            f"greedy speculative output differed from the target alone on {len(differ)} prompt(s) "
            f"({', '.join(differ)}; up to {longest} tokens of context). Known causes on the CPU: an f16 KV "
            "cache (llama.cpp's flash attention sums a one-row decode in per-thread KV chunks once it holds "
            "256+ tokens, a multi-row verify in one pass; the default q8_0 cache avoids it), and F32/F16/"
            "K-quant weights, whose matrix products differ by batch shape at any length."
        )
    if notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    lines += ["", f"Bench wall time {result.wall_s / 60:.1f} min; started {result.started}.", ""]
    return "\n".join(lines)


def _loadtext(load: Mapping | None) -> str:
    if not load or "loadavg" not in load:
        return "?"
    text = f"{load['loadavg'][0]:.1f}"
    if "cpu_pressure_avg60" in load:
        text += f" (CPU pressure {load['cpu_pressure_avg60']:.0f}%)"
    return text


def write_markdown(result: BenchResult, path: Path) -> Path:
    path.write_text(markdown(result))
    return path


def write_plots(result: BenchResult, out: Path) -> list[Path]:
    """PNG plots (matplotlib, Agg): tok/s vs K per draft, accept rate by position, the time
    split per configuration, measured vs expected speedup. Returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s, plan = result.summary, result.plan
    cfgs = [c for c in s["configs"] if c.get("tps")]
    written: list[Path] = []
    title = f"{plan.target_label} target, {plan.max_tokens} tokens, {len(plan.prompts)} prompts"

    # 1. tokens/s against K per draft, with the target-alone line
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=100)
    drafts = sorted({c["draft"] for c in cfgs if c["group"] == "k-sweep"}, key=lambda d: [x.label for x in plan.drafts].index(d) if d in [x.label for x in plan.drafts] else 99)
    for d in drafts:
        pts = sorted((c["k"], c["tps"]) for c in cfgs if c["group"] == "k-sweep" and c["draft"] == d and c["engine"] == "ggufspec")
        if pts:
            ax.plot(*zip(*pts), marker="o", label=f"ggufspec, draft {d}")
    nat = sorted((c["k"], c["tps"]) for c in cfgs if c["engine"] == "native")
    if nat:
        ax.plot(*zip(*nat), marker="s", linestyle="--", color="black", label="llama.cpp speculative-simple")
    base = next((c for c in cfgs if c["name"] == "target alone"), None)
    if base:
        ax.axhline(base["tps"], color="grey", linestyle=":", label=f"target alone {base['tps']:.1f}")
    if s.get("llama_bench_tps"):
        ax.axhline(s["llama_bench_tps"], color="brown", linestyle="-.", linewidth=1, label=f"llama-bench {s['llama_bench_tps']:.1f}")
    ax.set_xlabel("draft length K (fixed)")
    ax.set_ylabel("generation tokens/s (median)")
    ax.set_xscale("log", base=2)
    ks = sorted({c["k"] for c in cfgs if c["group"] == "k-sweep"})
    if ks:
        ax.set_xticks(ks, [str(k) for k in ks])
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    written.append(_save(fig, out / "tps_vs_k.png"))

    # 2. accept rate by draft position
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=100)
    for c in cfgs:
        if c["engine"] != "ggufspec" or c["draft"] == BASELINE:
            continue
        if c["group"] == "k-sweep" and c["k"] != max(k for k in ks):
            continue
        pos = [(i + 1, v) for i, v in enumerate(c.get("accept_rate_by_position") or []) if v is not None]
        if pos:
            ax.plot(*zip(*pos), marker=".", label=c["name"])
    ax.set_xlabel("draft position")
    ax.set_ylabel("share of rounds whose draft was accepted up to here")
    ax.set_ylim(0, 1.02)
    ax.set_title("accept rate by draft position", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    written.append(_save(fig, out / "accept_by_position.png"))

    # 3. the time split per configuration (ms per generated token)
    ours = [c for c in cfgs if c["engine"] == "ggufspec" and c.get("ms_per_token")]
    fig, ax = plt.subplots(figsize=(7.5, 0.32 * len(ours) + 1.4), dpi=100)
    y = range(len(ours))
    left = [0.0] * len(ours)
    for part, colour in (("draft", "#4c9f70"), ("verify", "#3b6ea8"), ("python", "#d08c3a")):
        vals = [c["ms_per_token"][part] or 0.0 for c in ours]
        ax.barh(list(y), vals, left=left, color=colour, label=part)
        left = [a + b for a, b in zip(left, vals)]
    ax.set_yticks(list(y), [c["name"] for c in ours], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("ms per generated token")
    ax.set_title("where the time goes: draft decode, target verify, our Python", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(axis="x", alpha=0.3)
    written.append(_save(fig, out / "time_split.png"))

    # 4. measured vs expected speedup
    spec = [c for c in cfgs if c.get("expected_speedup") is not None and c.get("speedup") is not None]
    fig, ax = plt.subplots(figsize=(7.5, 0.42 * len(spec) + 1.6), dpi=100)
    y = list(range(len(spec)))
    h = 0.27
    ax.barh([i - h for i in y], [c["speedup"] for c in spec], height=h, label="measured", color="#3b6ea8")
    ax.barh(y, [c["expected_speedup"] for c in spec], height=h, label="Theorem 3.8 (verify = 1 step)", color="#bbbbbb")
    ax.barh([i + h for i in y], [c.get("expected_speedup_measured_verify") or 0.0 for c in spec], height=h,
            label="Theorem 3.8 with the verify cost measured", color="#d08c3a")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_yticks(y, [c["name"] for c in spec], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("speedup over the target alone")
    ax.set_title("measured vs expected speedup, (1 - a^(K+1)) / ((1 - a)(cK + 1))", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(axis="x", alpha=0.3)
    written.append(_save(fig, out / "speedup_expected.png"))
    return written


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def write_outputs(result: BenchResult, out: Path, *, plots: bool = True) -> dict[str, Path | list[Path]]:
    """bench.json, runs.csv, bench.md and the PNGs into `out` (created)."""
    out.mkdir(parents=True, exist_ok=True)
    files: dict[str, Any] = {
        "json": write_json(result, out / "bench.json"),
        "csv": write_csv(result, out / "runs.csv"),
        "markdown": write_markdown(result, out / "bench.md"),
    }
    if plots:
        try:
            files["plots"] = write_plots(result, out)
        except ImportError:
            result.peers.setdefault("notes", []).append("plots skipped: pip install matplotlib")
            files["plots"] = []
    return files
