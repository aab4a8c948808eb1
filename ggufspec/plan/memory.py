"""Memory model and offload planner for a target and a draft. Pure: numbers in, a plan out.

Memory of one model on one device = the weights of its layers there + the KV cache of those layers
+ a compute buffer, and each GPU keeps a margin free (1 GiB by default, like llama.cpp's `--fit`;
it also covers the CUDA context itself, which no llama.cpp buffer counts).

How llama.cpp places a model with `n_gpu_layers = n`: of the n_layer blocks plus the output layer
(n_layer + 1 "layers"), the last n go to the GPUs, counted from the output layer back, so n = 1
offloads the output layer only. The token embeddings always stay in RAM; a model with tied
embeddings gets a copy of them with its output layer. Offloaded layers are split over GPUs in
order by the cumulative proportions of `tensor_split`, so GPU 0 holds the lowest offloaded blocks
and the last GPU holds the output layer.

KV cache per layer = cells x (row(K type, head_dim_k x n_head_kv) + row(V type, head_dim_v x
n_head_kv)); cells = n_ctx padded to 256; sliding-window layers keep min(cells, pad256(window +
n_ubatch)) cells unless `swa_full` (llama.cpp's default keeps them full size).

Compute buffer (llama.cpp reserves the graph of one n_ubatch batch, T tokens, with every row
output): the larger of two phases, because the allocator reuses memory between them —
* attention/FFN: the attention mask (f16 with flash attention, f32 plus the f32 KQ matrix
  without), one per KV cache kind, alive through all layers, plus the activations
  4T(2 n_embd + 3 n_ff);
* output: the logits 4T n_vocab plus 4T 2 n_embd.
Checked against llama.cpp's own dry run (tests/test_plan_measure.py). A target split between the
CPU and the GPUs also needs, on the first GPU, room for a copy of its largest CPU-resident weight
(llama.cpp runs prompt batches of those blocks there: ggufspec.plan.placement.offload_copy_bytes).
"""

from __future__ import annotations

from dataclasses import dataclass

from ggufspec.errors import UserError
from ggufspec.ggufinfo import ModelInfo
from ggufspec.settings import CACHE_TYPES, ContextSettings

GiB = 1 << 30
DEFAULT_MARGIN = 1 * GiB
KV_PAD = 256

# bytes per block and elements per block (ggml type traits)
CACHE_BLOCKS: dict[str, tuple[int, int]] = {"f32": (1, 4), "f16": (1, 2), "q8_0": (32, 34), "q4_0": (32, 18)}
assert set(CACHE_BLOCKS) == set(CACHE_TYPES)


def _resolved(context: ContextSettings) -> ContextSettings:
    if not context.resolved:
        raise ValueError("resolve the 'auto' KV cache type first (plan_offload does; see ContextSettings.with_cache_type)")
    return context



@dataclass(frozen=True, kw_only=True)
class MemoryEstimate:
    """Bytes of one model (on one device, or in total)."""

    weights_bytes: int = 0
    kv_bytes: int = 0
    compute_bytes: int = 0

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.kv_bytes + self.compute_bytes

    def __add__(self, other: "MemoryEstimate") -> "MemoryEstimate":
        return MemoryEstimate(
            weights_bytes=self.weights_bytes + other.weights_bytes,
            kv_bytes=self.kv_bytes + other.kv_bytes,
            compute_bytes=self.compute_bytes + other.compute_bytes,
        )

    def as_dict(self) -> dict[str, int]:
        return {"weights_bytes": self.weights_bytes, "kv_bytes": self.kv_bytes, "compute_bytes": self.compute_bytes}


def pad(n: int, to: int) -> int:
    return (n + to - 1) // to * to


def _row_bytes(cache_type: str, n: int) -> int:
    block, size = CACHE_BLOCKS[cache_type]
    return n // block * size


def kv_cells(info: ModelInfo, context: ContextSettings) -> tuple[int, int]:
    """KV cells of full-attention layers and of sliding-window layers."""
    _resolved(context)
    n_ctx = context.n_ctx or info.context_length or 4096
    cells = pad(n_ctx, KV_PAD)
    if context.swa_full or not info.n_swa:
        return cells, cells
    return cells, min(cells, pad(info.n_swa + _ubatch(info, context), KV_PAD))


def _ubatch(info: ModelInfo, context: ContextSettings) -> int:
    n_ctx = pad(context.n_ctx or info.context_length or 4096, KV_PAD)
    return min(context.n_ubatch, context.n_batch, n_ctx)


def check_cache_types(info: ModelInfo, context: ContextSettings) -> None:
    """Refuse quantized KV caches llama.cpp would refuse for this model.

    Raises:
        UserError: a quantized cache whose block does not divide the model's head dimension.
    """
    _resolved(context)
    for label, t, dims in (("K", context.cache_type_k, info.head_dim_k), ("V", context.cache_type_v, info.head_dim_v)):
        block = CACHE_BLOCKS[t][0]
        bad = sorted({d for d in dims if d % block})
        if bad:
            raise UserError(
                f"{label} cache type {t} needs a head dimension divisible by {block}, but "
                f"{info.path.name} has {bad[0]}; use --cache-type f16"
            )


def layer_kv_bytes(info: ModelInfo, context: ContextSettings) -> tuple[int, ...]:
    """KV cache bytes of each layer."""
    full, swa = kv_cells(info, context)
    out = []
    for il in range(info.n_layer):
        nkv = info.n_head_kv[il]
        cells = swa if info.swa_layers[il] else full
        k = _row_bytes(context.cache_type_k, info.head_dim_k[il] * nkv)
        v = _row_bytes(context.cache_type_v, info.head_dim_v[il] * nkv)
        out.append(cells * (k + v) if nkv else 0)
    return tuple(out)


def compute_bytes(info: ModelInfo, context: ContextSettings, *, layers: bool = True, output: bool = True) -> int:
    """Compute buffer of one device that runs some of the model's layers and/or its output layer.

    Args:
        info: the model.
        context: the context.
        layers: the device runs at least one block (attention and FFN).
        output: the device runs the output layer (logits for every row of a batch).

    Returns:
        Bytes of the compute buffer (the larger of the layer phase and the output phase).
    """
    t = _ubatch(info, context)
    full, swa = kv_cells(info, context)
    t_pad = pad(t, 64)
    inputs = t * 32  # token ids, positions, KV indices
    base = 4 * t * 2 * info.n_embd  # embeddings in, normed hidden state
    if not layers and not output:
        return inputs + base
    phase_layers = 0
    if layers:
        kinds = {full} | ({swa} if any(info.swa_layers) else set())
        act = 4 * t * (2 * info.n_embd + 3 * info.n_ff)
        if context.flash_attn == "off":
            masks = sum(4 * n_kv * t_pad for n_kv in kinds)
            kq = max(4 * n_kv * t * info.n_head for n_kv in kinds) + base
            phase_layers = masks + max(act, kq)
        else:
            masks = sum(2 * n_kv * t_pad for n_kv in kinds)
            phase_layers = masks + act
    phase_output = 4 * t * info.vocab_size + base if output else 0
    return inputs + max(phase_layers, phase_output)


def estimate_memory(info: ModelInfo, context: ContextSettings) -> MemoryEstimate:
    """The whole model on one device (what a CPU-only llama.cpp allocates).

    Args:
        info: the model (`ggufinfo.read_model_info`).
        context: the context.

    Returns:
        Weights (all tensors), KV cache and compute buffer in bytes.
    """
    return MemoryEstimate(
        weights_bytes=info.weights_bytes,
        kv_bytes=sum(layer_kv_bytes(info, context)),
        compute_bytes=compute_bytes(info, context),
    )

