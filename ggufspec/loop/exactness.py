"""When greedy speculative output equals the target alone bit for bit, and the KV cache type
that keeps it so (pure: GGUF metadata in, a verdict out; no llama_cpp).

Greedy output is identical only if a token's logits do not depend on how many tokens share its
batch (a one-row decode of the target alone against a K+1-row verify):
* weights: llama.cpp's stock CPU backend multiplies 2+ rows with llamafile's tinyBLAS; only
  Q8_0/Q4_0/Q4_1 sum in the same order as the one-row dot products there (measured: max |logit|
  difference 0 for those, 0.038 F32, 0.04 F16, up to 0.7 for K-quants). The exact kernels
  (scripts/build_exact_kernels.sh, ggufspec.llama.kernels: one kernel for every batch size)
  make every type invariant.
* attention: with an f16 KV cache, past 256 tokens a one-row decode sums in per-thread chunks and
  a verify in one pass (up to 1.56 apart at 970 tokens, measured); a q8_0 (or q4_0) cache takes
  the same per-row path for both: 0 difference at any length, for 15-20% slower steps at 1000
  tokens.
* GPUs: their kernels pick different code per batch size; no cache type fixes that. On an H200
  (llama.cpp's CUDA build) 34 of 40 greedy generations of 160-192 tokens left the target alone's,
  at tokens 5-157; a patched dispatch (scripts/device/row_invariant.py) made 0 of 40, at a price
  (docs/gpu.md).
"""

from __future__ import annotations

from ggufspec.ggufinfo import ModelInfo
from ggufspec.settings import CacheType

# weight types llama.cpp's stock CPU kernels compute batch-invariantly (measured, see above)
STOCK_BATCH_INVARIANT_TYPES = frozenset({"Q8_0", "Q4_0", "Q4_1"})
EXACT_CACHE_TYPES = frozenset({"q8_0", "q4_0"})


def auto_cache_type(target: ModelInfo, *, on_gpu: bool) -> CacheType:
    """What `--cache-type auto` picks for the target: q8_0 on the CPU where the head size allows
    it (blocks of 32), else f16 (on a GPU exactness is out of reach and f16 is faster)."""
    if on_gpu:
        return "f16"
    dims = [*target.head_dim_k, *target.head_dim_v]
    return "q8_0" if dims and all(d % 32 == 0 for d in dims) else "f16"


def greedy_exactness(target: ModelInfo, *, on_gpu: bool, cache_type: str, invariant_kernels: bool) -> str | None:
    """Why greedy speculative output may differ from the target alone at near-ties; None: it cannot.

    Args:
        target: the target's metadata and tensor table (ggufinfo.read_model_info).
        on_gpu: target layers are really offloaded to a GPU (or an RPC worker).
        cache_type: the target's KV cache type.
        invariant_kernels: the CPU backend takes one kernel at every batch size
            (llama.lib.batch_invariant_kernels()).
    """
    if on_gpu:
        return ("the target runs on a GPU, whose kernels differ by batch size: greedy output usually drifts "
                "from the target alone's within a few hundred tokens (docs/gpu.md: measured, and a patched build)")
    reasons = []
    if cache_type not in EXACT_CACHE_TYPES:
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
