"""Settings shared by the planner, the llama.cpp layer and the library: one dataclass per concern.

Pure (no llama_cpp): `plan` estimates memory from the same `ContextSettings` that `llama.Context`
is created with, and `PairSettings` composes them for `load_pair`. One name per concept, from the
command-line flag to the C call:

    flag              field                          llama.cpp
    --ctx             ContextSettings.n_ctx          n_ctx
    --batch           ContextSettings.n_batch        n_batch
    --threads         ContextSettings.n_threads      n_threads
    --cache-type      ContextSettings.cache_type_k/v type_k / type_v
    --ngl / --ngld    PairSettings.n_gpu_layers(_draft)  n_gpu_layers
    --draft-kv        PairSettings.draft_kv          llama_state_seq_get/set_data (target -> draft)
    GGUFSPEC_REPACK   (environment: llama.lib.repack)  use_extra_bufts (--repack / --no-repack)
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal, get_args

from ggufspec.errors import UserError
from ggufspec.hardware import usable_cpus

CacheType = Literal["f32", "f16", "q8_0", "q4_0"]
CACHE_TYPES: tuple[str, ...] = get_args(CacheType)
# "auto": the target's cache is q8_0 on the CPU (batch-invariant attention), f16 on a GPU;
# resolved by `runtime.resolve_cache_type` before a context is made
CacheTypeChoice = CacheType | Literal["auto"]
FlashAttn = Literal["auto", "on", "off"]
# --ngl: a layer count, "all" (every layer, llama.cpp's -1 / 999) or "auto" (the planner's choice)
Layers = int | Literal["auto", "all"]
# --draft-kv: "auto" = a draft model that is the target's network takes the target's KV cache
# (ggufspec.loop.kvshare); "own" = every draft model computes its own
DraftKV = Literal["auto", "own"]


def check_threads(n: int) -> None:
    """Refuse a --threads below 1 or above the CPUs this process can use (`devices.usable_cpus`)."""
    most = usable_cpus()
    if not 1 <= n <= most:
        raise UserError(f"--threads must be between 1 and {most} (the CPUs this machine lets ggufspec use), "
                        f"got {n}")


@dataclass(frozen=True, kw_only=True)
class ContextSettings:
    """One inference context: the knobs that change its KV cache, compute buffer and speed."""

    n_ctx: int = 4096  # tokens; 0 = the model's trained context
    n_batch: int = 512  # most tokens one decode call takes (a verify of K+1 rows must fit)
    n_ubatch: int = 512  # physical batch: the compute buffer is reserved for it
    n_threads: int | None = None  # None = physical cores
    n_threads_batch: int | None = None  # None = n_threads
    # "on": the CPU attention path that keeps logits batch-invariant with a q8_0 cache (measured)
    flash_attn: FlashAttn = "on"
    cache_type_k: CacheTypeChoice = "auto"
    cache_type_v: CacheTypeChoice = "auto"
    swa_full: bool = True  # sliding-window layers keep a full-size cache (llama.cpp's default)
    output_rows: int = 16  # logits rows a decode returns at most (draft length + 1 of a verify)

    def __post_init__(self) -> None:
        if self.n_ctx < 0 or 0 < self.n_ctx < 8:
            raise UserError(f"--ctx (context size) must be 0 (the model's trained context) or at least 8 tokens, got {self.n_ctx}")
        if self.n_batch < 1 or self.n_ubatch < 1:
            raise UserError(f"batch sizes must be positive, got n_batch={self.n_batch}, n_ubatch={self.n_ubatch}")
        for threads in (self.n_threads, self.n_threads_batch):
            if threads is not None:
                check_threads(threads)
        for name in (self.cache_type_k, self.cache_type_v):
            if name != "auto" and name not in CACHE_TYPES:
                raise UserError(f"unknown KV cache type {name!r}; choose one of: auto, {', '.join(CACHE_TYPES)}")
        if self.flash_attn not in get_args(FlashAttn):
            raise UserError(f"flash attention is auto, on or off, got {self.flash_attn!r}")

    @property
    def resolved(self) -> bool:
        """True when no field is left to "auto" resolution (a context can be made from it)."""
        return "auto" not in (self.cache_type_k, self.cache_type_v)

    def with_cache_type(self, cache_type: CacheType) -> "ContextSettings":
        """The same context with "auto" cache types replaced by `cache_type`."""
        return replace(
            self,
            cache_type_k=cache_type if self.cache_type_k == "auto" else self.cache_type_k,
            cache_type_v=cache_type if self.cache_type_v == "auto" else self.cache_type_v,
        )


@dataclass(frozen=True, kw_only=True)
class ModelSettings:
    """Where one model's weights go (what `plan.OffloadPlan.to_load_kwargs` fills in)."""

    n_gpu_layers: int = 0  # -1 = all
    main_gpu: int = 0
    tensor_split: tuple[float, ...] | None = None
    use_mmap: bool = True  # False: read the weights into memory (llama.cpp load_mode NONE)

    def __post_init__(self) -> None:
        if self.n_gpu_layers < -1:
            raise UserError(f"a layer count must be >= 0 (or 'all'), got {self.n_gpu_layers}")


# The default draft_max (--draft-max): the controller's largest K, and the fixed K of --fixed.
# Measured against 12 on the default pair (a Q4_1 copy of the target: 67% of positions keep all of
# the draft's next 16 tokens), 2-core EPYC: replayed (scripts/trace_sim.py, the loop's own costs)
# a cap of 12 gained 2.9% per prompt on the tuned set and lost 0.5% on the held-out one (geometric
# means); a paired real A/B over both sets (116 pairs) read 1.001 [0.978-1.024], with 18% fewer
# rounds: longer rounds cost about what they save.
DRAFT_MAX = 8
# The most --draft-max may be, everywhere (run, bench, chat's /k, a server request's draft_max): a
# verify batch is draft_max + 1 rows (plus --draft-extend), far past where drafting pays.
DRAFT_MAX_LIMIT = 64
DRAFT_EXTEND = 4  # most tokens of lookup's continuation appended to a model's draft (--draft-extend)


@dataclass(frozen=True, kw_only=True)
class LookupSettings:
    """Prompt lookup (n-gram) drafting: the n-gram sizes tried, longest first."""

    ngram_max: int = 3
    ngram_min: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.ngram_min <= self.ngram_max:
            raise UserError(f"lookup n-gram sizes must satisfy 1 <= min <= max, got {self.ngram_min}..{self.ngram_max}")


@dataclass(frozen=True, kw_only=True)
class PairSettings:
    """How to load a target and its drafter: one context setting for both, offload per model."""

    context: ContextSettings = field(default_factory=ContextSettings)
    n_gpu_layers: Layers = "auto"  # target (--ngl); "auto" = the offload planner's choice
    n_gpu_layers_draft: Layers = "auto"  # draft model (--ngld)
    offline: bool = False  # Hugging Face cache only (--offline)
    lookup: LookupSettings = field(default_factory=LookupSettings)
    rpc: tuple[str, ...] = ()  # RPC workers "HOST:PORT" (--rpc), llama.cpp devices before the GPUs
    # sequences per context (serve --parallel): N KV caches of context.n_ctx tokens, one per slot
    parallel: int = 1
    draft_kv: DraftKV = "auto"  # --draft-kv
    # the draft controller read from what earlier runs on this pair and machine learnt, and written
    # back when the pair closes (ggufspec.remember; the CLI's --remember, its default)
    remember: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.parallel, int) or self.parallel < 1:
            raise UserError(f"--parallel takes a slot count >= 1, got {self.parallel!r}")
        if self.draft_kv not in get_args(DraftKV):
            raise UserError(f"--draft-kv takes auto or own, got {self.draft_kv!r}")
        for flag, value in (("--ngl", self.n_gpu_layers), ("--ngld", self.n_gpu_layers_draft)):
            if value not in ("auto", "all") and (not isinstance(value, int) or value < 0):
                raise UserError(f"{flag} takes a layer count >= 0, 'all' or 'auto', got {value!r}")


def parse_layers(text: str, *, flag: str) -> Layers:
    """A --ngl/--ngld value: "auto", "all" or a count >= 0 (-1 is llama.cpp's spelling of all)."""
    text = text.strip().lower()
    if text in ("auto", "all"):
        return text  # type: ignore[return-value]
    try:
        n = int(text)
    except ValueError:
        raise UserError(f"{flag} takes a layer count, 'all' or 'auto', got {text!r}") from None
    if n == -1:
        return "all"
    if n < 0:
        raise UserError(f"{flag} takes a layer count >= 0, 'all' or 'auto', got {n}")
    return n
