"""Does a context of N tokens fit this machine? Checked before llama.cpp is asked to make one.

llama.cpp allocates a context's KV cache and compute buffer when it creates the context; one it
cannot allocate fails with a null pointer and no reason, so `llama.context` could only guess
(it said "quantized V cache needs flash attention" for a --ctx of 10 million). The planner's
arithmetic (memory.py) knows the size, so an absurd --ctx is refused with its real cause.

The check is deliberately a floor, not a plan: what the contexts allocate (KV cache + compute
buffer, both growing with --ctx) against all the memory the machine could give them (RAM
available plus the free memory of the devices layers can go to). Weights are left out: they are
memory-mapped (page cache counts as available RAM), and a pair whose weights do not fit is
llama.cpp's to refuse with its own message. A context longer than the model's trained context
that fits is allowed (llama.cpp runs it; quality past the trained length is the user's call).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from ggufspec.errors import UserError
from ggufspec.ggufinfo import ModelInfo
from ggufspec.hardware import format_bytes
from ggufspec.plan.memory import KV_PAD, compute_bytes, layer_kv_bytes
from ggufspec.settings import ContextSettings


@dataclass(frozen=True, kw_only=True)
class ContextNeed:
    """One context a load will create: its model, its (resolved) settings, its sequences."""

    info: ModelInfo
    context: ContextSettings
    n_seq: int = 1  # serve --parallel N: one context of N x n_ctx cells


def _n_ctx(need: ContextNeed) -> int:
    """The context's tokens per sequence (0: the model's trained context, as llama.cpp does)."""
    return need.context.n_ctx or need.info.context_length or 4096


def _bytes(needs: Sequence[ContextNeed], n_ctx: int | None = None) -> tuple[int, int]:
    """(KV cache bytes, KV cache + compute buffer bytes) of every context, at `n_ctx` tokens each
    (None: each its own)."""
    kv = total = 0
    for need in needs:
        ctx = replace(need.context, n_ctx=(n_ctx or _n_ctx(need)) * need.n_seq)
        k = sum(layer_kv_bytes(need.info, ctx))
        kv += k
        total += k + compute_bytes(need.info, ctx)
    return kv, total


def _largest_fitting(needs: Sequence[ContextNeed], available: int) -> int:
    """The largest n_ctx (a multiple of KV_PAD) whose contexts fit `available`; 0 if none does."""
    lo, hi = 0, 1 << 40
    while hi - lo > 1:  # in units of KV_PAD tokens; the need grows with n_ctx
        mid = (lo + hi) // 2
        if _bytes(needs, mid * KV_PAD)[1] <= available:
            lo = mid
        else:
            hi = mid
    return lo * KV_PAD


def check_context_fits(*, needs: Sequence[ContextNeed], available_bytes: int) -> None:
    """Refuse contexts whose KV caches and compute buffers alone exceed `available_bytes`.

    Args:
        needs: the contexts one load creates (target first; the n_ctx they share is the target's).
        available_bytes: RAM available plus the free memory of the offload devices.

    Raises:
        UserError: the contexts cannot fit; names the KV cache's size, the machine's memory, the
            model's trained context when --ctx is beyond it, and a --ctx that fits.
    """
    if not needs:
        return
    first = needs[0]
    n_ctx = _n_ctx(first)
    kv, total = _bytes(needs)
    if total <= available_bytes:
        return
    trained = first.info.context_length
    beyond = f" (the model was trained on {trained:,})" if trained and n_ctx > trained else ""
    fits = _largest_fitting(needs, available_bytes)
    parallel = f" for {first.n_seq} slots" if first.n_seq > 1 else ""
    fix = f"use a smaller --ctx (at most about {fits:,} fits)" if fits >= KV_PAD else "use a smaller model or a machine with more memory"
    raise UserError(
        f"a context of {n_ctx:,} tokens{beyond} needs {format_bytes(kv)} of KV cache{parallel} "
        f"({format_bytes(total)} with compute buffers), more than this machine's "
        f"{format_bytes(available_bytes)} of free memory; {fix}"
    )
