"""The library API: load a target and a draft once, then generate many times.

    pair = load_pair(target="embedded:smollm2:auto", draft="embedded:smollm2:Q4_1")
    out = pair.generate(prompt="Once upon a time", max_tokens=64).run()
    print(out.text, out.stats.gen_tps, out.stats.accept_rate)

`draft` is a model reference, "lookup" (prompt lookup, no second model) or None (target alone).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Mapping, Sequence

from ggufspec.backend import Context, ContextSettings, Model, ModelSettings, batch_invariant_kernels
from ggufspec.chat import render_chat
from ggufspec.drafters import Drafter, LookupDrafter, ModelDrafter
from ggufspec.engine import Generation, SpeculativeSettings, generate
from ggufspec.errors import UserError
from ggufspec.pacing import DraftPacer
from ggufspec.sampling import SamplingSettings

if TYPE_CHECKING:
    from ggufspec.ggufinfo import ModelInfo

LOOKUP = "lookup"
Layers = int | Literal["auto"]


@dataclass(frozen=True, kw_only=True)
class PairSettings:
    """How to load a target/draft pair."""

    n_ctx: int = 4096
    n_batch: int = 512
    n_threads: int | None = None
    flash_attn: Literal["auto", "on", "off"] = "on"
    # "auto": q8_0 for a target run on the CPU (see exact_cache_type), f16 otherwise
    cache_type_k: str = "auto"
    cache_type_v: str = "auto"
    n_gpu_layers: Layers = "auto"  # target; "auto" = the offload planner's choice
    n_gpu_layers_draft: Layers = "auto"
    offline: bool = False
    lookup_ngram_max: int = 3
    lookup_ngram_min: int = 1


def resolve_path(ref: str | Path, *, offline: bool = False) -> Path:
    """A model reference (local path, hub ref, embedded:NAME:QUANT) -> local GGUF path."""
    from ggufspec.refs import resolve_model

    return resolve_model(str(ref), offline=offline).path


def check_vocab(target: Path, draft: Path) -> None:
    """Refuse an incompatible pair before loading anything (llama.cpp's rule)."""
    from ggufspec.ggufinfo import read_vocab
    from ggufspec.vocab import compare_vocab

    verdict = compare_vocab(target=read_vocab(target), draft=read_vocab(draft))
    if verdict.status == "incompatible":
        raise UserError(verdict.message)


def exact_cache_type(target: Path, *, n_gpu_layers: int) -> str:
    """The KV cache type "auto" picks for the target.

    On the CPU, llama.cpp's flash attention sums a one-row decode (the target alone) in KV
    chunks per thread once the f16 cache holds 256+ tokens, but a multi-row verify in one pass:
    logits then differ (max 1.56 at 970 tokens, measured) and greedy speculative output can
    drift from the target alone. A q8_0 cache takes the same per-row path for both: logits
    bit-identical at any length (measured), for 15-20% slower steps at 1000 tokens. So: q8_0 when
    the target runs on the CPU and its head size allows it; f16 on a GPU (its kernels are not
    batch-invariant either way) or when it does not.
    """
    if n_gpu_layers != 0:
        return "f16"
    from ggufspec.ggufinfo import read_model_info

    info = read_model_info(target)
    dims = [*info.head_dim_k, *info.head_dim_v]
    return "q8_0" if dims and all(d % 32 == 0 for d in dims) else "f16"


# Weight types whose products llama.cpp's stock CPU kernels compute the same way for a one-row
# decode and inside a verify batch (measured: max |logit| difference 0 for Q8_0, Q4_0, Q4_1;
# 0.038 for F32, 0.04 for F16, up to 0.7 for K-quants, where llamafile's tinyBLAS takes batches).
STOCK_BATCH_INVARIANT_TYPES = frozenset({"Q8_0", "Q4_0", "Q4_1"})


def greedy_exactness(
    target: ModelInfo, *, n_gpu_layers: int, cache_type: str, invariant_kernels: bool
) -> str | None:
    """Why greedy speculative output may differ from the target alone at near-ties; None: it cannot.

    Args:
        target: the target's metadata and tensor table (ggufinfo.read_model_info).
        n_gpu_layers: target layers offloaded (GPU kernels pick different code per batch size).
        cache_type: the target's KV cache type (f16 attention is batch-dependent past 256 tokens).
        invariant_kernels: the CPU backend has no llamafile (backend.batch_invariant_kernels()).
    """
    if n_gpu_layers != 0:
        return "the target runs on a GPU, whose kernels differ by batch size: rare near-tie flips are possible"
    reasons = []
    if cache_type not in ("q8_0", "q4_0"):
        reasons.append(f"an {cache_type} KV cache makes attention depend on the batch past 256 tokens "
                       "(--cache-type q8_0 avoids it where the head size allows)")
    if not invariant_kernels:
        # the matmul weights: every matrix but a token embedding that is only looked up
        types = {t.ggml_type for t in target.tensors
                 if len(t.shape) >= 2 and (t.name != "token_embd.weight" or target.tied_embeddings)}
        odd = sorted(types - STOCK_BATCH_INVARIANT_TYPES)
        if odd:
            reasons.append(f"{'/'.join(odd)} weights are not batch-invariant on llama.cpp's stock CPU kernels "
                           "(run scripts/build_exact_kernels.sh)")
    return "; ".join(reasons) or None


def _model_settings(target: Path, draft: Path | None, settings: PairSettings) -> tuple[ModelSettings, ModelSettings]:
    """Offload of target and draft: explicit layer counts, or the planner's for "auto"
    (the draft whole on one GPU first, then target layers); all on the CPU with no GPU."""
    tl, dl = settings.n_gpu_layers, settings.n_gpu_layers_draft
    t_kw: dict = {"n_gpu_layers": 0 if tl == "auto" else int(tl)}
    d_kw: dict = {"n_gpu_layers": 0 if dl == "auto" else int(dl)}
    if "auto" in (tl, dl):
        from ggufspec.devices import detect_gpus

        gpus = detect_gpus()
        if gpus:
            from ggufspec.plan import plan_for_load

            t_plan, d_plan = plan_for_load(
                target=target, draft=draft, gpus=gpus, n_ctx=settings.n_ctx,
                cache_type="f16" if settings.cache_type_k == "auto" else settings.cache_type_k, n_batch=settings.n_batch, flash_attn=settings.flash_attn,
            )
            if tl == "auto":
                t_kw = dict(t_plan)
            if dl == "auto":
                d_kw = dict(d_plan)
    def build(kw: dict) -> ModelSettings:
        split = kw.get("tensor_split")
        return ModelSettings(
            n_gpu_layers=int(kw["n_gpu_layers"]),
            tensor_split=tuple(split) if split else None,
            main_gpu=int(kw.get("main_gpu") or 0),
        )
    return build(t_kw), build(d_kw)


@dataclass
class SpeculativePair:
    """A loaded target, an optional drafter, and their contexts (one generation at a time)."""

    target_path: Path
    target_model: Model
    target_ctx: Context
    drafter: Drafter | None
    draft_path: Path | None = None
    draft_model: Model | None = None
    draft_ctx: Context | None = None
    settings: PairSettings = field(default_factory=PairSettings)
    # the pacer's cost estimates per drafter, kept across generations (learned once per pair)
    pacers: dict[int, DraftPacer] = field(default_factory=dict, repr=False)
    # why greedy output may differ from the target alone on this build (None: it cannot)
    inexact_greedy: str | None = None

    def pacer_for(self, drafter: Drafter) -> DraftPacer:
        return self.pacers.setdefault(id(drafter), DraftPacer())

    @property
    def draft_name(self) -> str:
        if self.drafter is None:
            return "none"
        return LOOKUP if isinstance(self.drafter, LookupDrafter) else str(self.draft_path)

    def encode(
        self,
        *,
        prompt: str | None = None,
        messages: Sequence[Mapping[str, str]] | None = None,
    ) -> list[int]:
        """Prompt text (raw) or chat messages (rendered with the GGUF template) -> token ids."""
        model = self.target_model
        if messages is not None:
            text = render_chat(
                template=model.chat_template(),
                messages=messages,
                bos_token=model.special_text(model.bos),
                eos_token=model.special_text(model.eos),
            )
            bos = model.special_text(model.bos)
            # The template may write BOS itself; never add a second one.
            add = model.add_bos and not (bos and text.startswith(bos))
            return model.tokenize(text, add_special=add, parse_special=True)
        if prompt is None:
            raise UserError("give a prompt (-p TEXT) or chat messages")
        return model.tokenize(prompt, add_special=True, parse_special=False)

    def generate(
        self,
        *,
        prompt: str | None = None,
        messages: Sequence[Mapping[str, str]] | None = None,
        prompt_tokens: Sequence[int] | None = None,
        max_tokens: int = 128,
        sampling: SamplingSettings = SamplingSettings(),
        speculative: SpeculativeSettings = SpeculativeSettings(),
        stop: Sequence[str] = (),
        use_draft: bool = True,
    ) -> Generation:
        """Start a generation (iterate it for steps, or `.run()` it).

        Args:
            prompt / messages / prompt_tokens: exactly one of them.
            use_draft: False runs the target alone through the same loop (the baseline).
        """
        tokens = list(prompt_tokens) if prompt_tokens is not None else self.encode(prompt=prompt, messages=messages)
        drafter = self.drafter if use_draft else None
        if isinstance(drafter, ModelDrafter) and sampling.greedy is False:
            # match keeps deterministic (argmax) drafts, as llama.cpp does; rejection needs q
            drafter.greedy_draft = speculative.accept is not None and speculative.accept.value == "match"
        return generate(
            target=self.target_ctx,
            prompt=tokens,
            drafter=drafter,
            max_tokens=max_tokens,
            sampling=sampling,
            speculative=speculative,
            stop=stop,
            pacer=self.pacer_for(drafter) if drafter is not None else None,
        )

    def close(self) -> None:
        for obj in (self.draft_ctx, self.draft_model, self.target_ctx, self.target_model):
            if obj is not None:
                obj.close()

    def __enter__(self) -> "SpeculativePair":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def load_pair(
    *,
    target: str | Path | None = None,
    draft: str | Path | None = None,
    settings: PairSettings = PairSettings(),
    p_min: float = 0.0,
) -> SpeculativePair:
    """Resolve, check and load a target and its drafter.

    Args:
        target: model reference; None = the embedded default target.
        draft: model reference, "lookup", or None (target alone). With target None too,
            the embedded default draft.
        settings: context and offload settings shared by both models.
        p_min: the draft model's confidence stop (--draft-p-min).

    Raises:
        UserError: missing/invalid files, an incompatible vocabulary, a context that cannot be made.
    """
    from ggufspec.embedded import DEFAULT_DRAFT, DEFAULT_TARGET

    if target is None:
        target = DEFAULT_TARGET
        if draft is None:
            draft = DEFAULT_DRAFT
    target_path = resolve_path(target, offline=settings.offline)
    draft_path = None
    if draft is not None and str(draft) != LOOKUP:
        draft_path = resolve_path(draft, offline=settings.offline)
    # Validate both files before loading either: clear errors for non-GGUF / truncated / vocab.
    from ggufspec.ggufinfo import read_model_info

    target_info = read_model_info(target_path)
    if draft_path is not None:
        read_model_info(draft_path)
        check_vocab(target_path, draft_path)

    target_load, draft_load = _model_settings(target_path, draft_path, settings)

    def context_settings(cache_k: str, cache_v: str) -> ContextSettings:
        return ContextSettings(
            n_ctx=settings.n_ctx,
            n_batch=settings.n_batch,
            n_threads=settings.n_threads,
            flash_attn=settings.flash_attn,
            cache_type_k=cache_k,  # type: ignore[arg-type]
            cache_type_v=cache_v,  # type: ignore[arg-type]
        )

    auto = exact_cache_type(target_path, n_gpu_layers=target_load.n_gpu_layers) if "auto" in (
        settings.cache_type_k, settings.cache_type_v) else "f16"
    ctx_settings = context_settings(
        auto if settings.cache_type_k == "auto" else settings.cache_type_k,
        auto if settings.cache_type_v == "auto" else settings.cache_type_v,
    )
    # the draft's numerics do not touch the output: "auto" keeps its faster f16 cache
    draft_ctx_settings = context_settings(
        "f16" if settings.cache_type_k == "auto" else settings.cache_type_k,
        "f16" if settings.cache_type_v == "auto" else settings.cache_type_v,
    )
    target_model = Model(target_path, settings=target_load)
    target_ctx = Context(target_model, settings=ctx_settings)
    target_ctx.warmup()
    pair = SpeculativePair(
        target_path=target_path, target_model=target_model, target_ctx=target_ctx, drafter=None, settings=settings,
        inexact_greedy=greedy_exactness(target_info, n_gpu_layers=target_load.n_gpu_layers,
                                        cache_type=ctx_settings.cache_type_k,
                                        invariant_kernels=batch_invariant_kernels()),
    )
    if draft is not None and str(draft) == LOOKUP:
        pair.drafter = LookupDrafter(ngram_max=settings.lookup_ngram_max, ngram_min=settings.lookup_ngram_min)
    elif draft_path is not None:
        draft_model = Model(draft_path, settings=draft_load)
        # The draft never runs past the target's context: same n_ctx.
        draft_ctx = Context(draft_model, settings=draft_ctx_settings)
        draft_ctx.warmup()
        pair.draft_path, pair.draft_model, pair.draft_ctx = draft_path, draft_model, draft_ctx
        pair.drafter = ModelDrafter(draft_ctx, p_min=p_min)
    return pair
