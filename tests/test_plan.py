"""The memory model and the offload planner, on simulated devices (no GPU needed)."""

from __future__ import annotations

import bisect
import dataclasses
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ggufspec.errors import UserError
from ggufspec.ggufinfo import ModelInfo, TensorInfo, read_model_info
from ggufspec.plan import (
    DEFAULT_MARGIN,
    GpuBudget,
    MemoryEstimate,
    OffloadPlan,
    compute_bytes,
    estimate_memory,
    kv_cells,
    layer_kv_bytes,
    offload_copy_bytes,
    plan_offload,
)
from ggufspec.settings import ContextSettings


def f16_context(**kw: object) -> ContextSettings:
    """A context with an f16 KV cache unless told (the planner's "auto" depends on the device)."""
    kw.setdefault("cache_type_k", "f16")
    kw.setdefault("cache_type_v", "f16")
    return ContextSettings(**kw)  # type: ignore[arg-type]

GiB, MiB = 1 << 30, 1 << 20


def make_info(*, n_layer: int, layer_bytes: int, n_embd: int, n_ff: int, vocab: int, n_head: int = 32,
              n_head_kv: int = 8, head_dim: int = 128, embd_bytes: int | None = None, tied: bool = False,
              swa: tuple[bool, ...] | None = None, n_swa: int = 0, name: str = "fake") -> ModelInfo:
    """A ModelInfo with the shapes of a real model and made-up tensors of the given sizes."""
    embd_bytes = embd_bytes if embd_bytes is not None else vocab * n_embd * 34 // 32  # Q8_0
    tensors = [TensorInfo(name="token_embd.weight", ggml_type="Q8_0", shape=(n_embd, vocab), n_bytes=embd_bytes,
                          layer=None, group="input", shard=0)]
    # each block's bytes over its matrices in proportion to their elements (a llama block: q, k,
    # v, o, then gate, up, down), so its largest tensor is an FFN matrix (offload_copy_bytes)
    kv_w = n_head_kv * head_dim
    parts = {"attn_q": n_embd * n_embd, "attn_k": n_embd * kv_w, "attn_v": n_embd * kv_w, "attn_output": n_embd * n_embd,
             "ffn_gate": n_embd * n_ff, "ffn_up": n_embd * n_ff, "ffn_down": n_embd * n_ff}
    total = sum(parts.values())
    sizes = {k: layer_bytes * v // total for k, v in parts.items()}
    sizes["ffn_down"] += layer_bytes - sum(sizes.values())
    tensors += [TensorInfo(name=f"blk.{i}.{k}.weight", ggml_type="Q4_K", shape=(n,), n_bytes=n, layer=i, group="layer",
                           shard=0) for i in range(n_layer) for k, n in sizes.items()]
    tensors.append(TensorInfo(name="output_norm.weight", ggml_type="F32", shape=(n_embd,), n_bytes=4 * n_embd,
                              layer=None, group="output", shard=0))
    if not tied:
        tensors.append(TensorInfo(name="output.weight", ggml_type="Q6_K", shape=(n_embd, vocab),
                                  n_bytes=vocab * n_embd * 210 // 256, layer=None, group="output", shard=0))
    out_b = sum(t.n_bytes for t in tensors if t.group == "output")
    swa = swa or (False,) * n_layer
    return ModelInfo(
        path=Path(f"/fake/{name}.gguf"), paths=(Path(f"/fake/{name}.gguf"),), file_bytes=0, name=name,
        architecture="llama", file_type="Q4_K_M", n_layer=n_layer, n_embd=n_embd, n_ff=n_ff, n_head=n_head,
        n_head_kv=(n_head_kv,) * n_layer, head_dim_k=(head_dim,) * n_layer, head_dim_v=(head_dim,) * n_layer,
        n_swa=n_swa, swa_layers=swa, context_length=131072, vocab_size=vocab, vocab_type="bpe", bos_id=1, eos_id=2,
        add_bos=True, has_chat_template=True, tensors=tuple(tensors), layer_bytes=(layer_bytes,) * n_layer,
        input_bytes=embd_bytes, output_bytes=out_b, other_bytes=0, tied_embeddings=tied,
    )


# an 8B-like target (Q4_K_M: ~4.6 GiB) and a 1B-like draft (~0.7 GiB), llama 3 shapes
TARGET = make_info(n_layer=32, layer_bytes=120 * MiB, n_embd=4096, n_ff=14336, vocab=128256, name="target")
DRAFT = make_info(n_layer=16, layer_bytes=30 * MiB, n_embd=2048, n_ff=8192, vocab=128256, n_head=32, n_head_kv=8,
                  head_dim=64, tied=True, name="draft")
SPEC = f16_context(n_ctx=8192)


def gpus(*sizes: float) -> tuple[GpuBudget, ...]:
    return tuple(GpuBudget(index=i, name=f"sim{i}", free_bytes=int(s * GiB), total_bytes=int(s * GiB))
                 for i, s in enumerate(sizes))


def llama_cpp_layers(n_layer: int, n_gpu_layers: int, tensor_split: tuple[float, ...] | None) -> list[int | None]:
    """Device of each layer (blocks, then the output layer) as llama.cpp's load_tensors assigns it."""
    start = max(n_layer + 1 - n_gpu_layers, 0)
    act = min(n_gpu_layers, n_layer + 1)
    split = np.asarray(tensor_split if tensor_split else (1.0,), dtype=np.float32)
    bounds = list(np.cumsum(split, dtype=np.float32) / np.float32(split.sum()))
    out: list[int | None] = []
    for il in range(n_layer + 1):
        if il < start or il - start >= act:
            out.append(None)
        else:
            out.append(bisect.bisect_right(bounds, np.float32(il - start) / np.float32(act)))
    return out


def check_invariants(plan: OffloadPlan, target: ModelInfo, draft: ModelInfo | None) -> None:
    for dev in plan.devices:
        if dev.index is not None:
            assert dev.used_bytes <= dev.usable_bytes, f"{dev.name} over budget"
    # llama.cpp, given our load arguments, puts each layer where our plan counted it
    for role, info in (("target", target), ("draft", draft)):
        mp = plan.target if role == "target" else plan.draft
        if mp is None or info is None:
            continue
        layers = llama_cpp_layers(info.n_layer, mp.n_gpu_layers, mp.tensor_split)
        gpu_indices = [g.index for g in plan.devices if g.index is not None]
        counted = {gpu_indices[d] if d is not None and mp.tensor_split else (mp.main_gpu if d is not None else None)
                   for d in layers}
        n_off = sum(d is not None for d in layers)
        assert n_off == mp.n_gpu_layers
        # a split target's copy of its largest CPU-resident weight on the first GPU (llama.cpp runs
        # prompt batches of those blocks there): that GPU's only entry where it holds none of its layers
        split = role == "target" and 0 < n_off <= info.n_layer
        copy_only = {g for g, est in mp.gpu.items() if g not in counted}
        assert copy_only <= ({min(gpu_indices)} if split and gpu_indices else set()), (role, layers, mp.gpu)
        for g in copy_only:
            assert mp.gpu[g] == MemoryEstimate(compute_bytes=offload_copy_bytes(info, info.n_layer + 1 - n_off))
        assert counted - {None} == set(mp.gpu) - copy_only, (role, layers, mp.gpu)
        # bytes per GPU from llama.cpp's assignment equal the plan's weights per GPU
        for g, est in ((g, est) for g, est in mp.gpu.items() if g not in copy_only):
            pos = gpu_indices.index(g) if mp.tensor_split else 0
            w = sum(info.layer_bytes[il] for il in range(info.n_layer) if layers[il] == pos)
            if layers[info.n_layer] == pos:
                w += info.output_layer_bytes
            assert w == est.weights_bytes, (role, g)
    total = estimate_memory(target, plan.context)
    assert plan.target.estimate.weights_bytes >= total.weights_bytes  # tied copies only add
    assert plan.target.estimate.kv_bytes == total.kv_bytes


# ---- memory model --------------------------------------------------------------------------


def test_kv_formula() -> None:
    # 8192 cells x 32 layers x (8 heads x 128) x 2 (K, V) x 2 bytes
    assert sum(layer_kv_bytes(TARGET, SPEC)) == 8192 * 32 * 1024 * 2 * 2 == 1 * GiB
    q8 = sum(layer_kv_bytes(TARGET, f16_context(n_ctx=8192, cache_type_k="q8_0", cache_type_v="q8_0")))
    assert q8 == 8192 * 32 * (1024 // 32 * 34) * 2
    q4 = sum(layer_kv_bytes(TARGET, f16_context(n_ctx=8192, cache_type_k="q4_0", cache_type_v="q4_0")))
    assert q4 == 8192 * 32 * (1024 // 32 * 18) * 2


def test_context_padding_and_trained_context() -> None:
    assert kv_cells(TARGET, f16_context(n_ctx=1000)) == (1024, 1024)
    assert kv_cells(TARGET, f16_context(n_ctx=0)) == (131072, 131072)


def test_sliding_window_layers_capped() -> None:
    swa = tuple(il % 6 != 5 for il in range(18))
    info = make_info(n_layer=18, layer_bytes=MiB, n_embd=640, n_ff=2048, vocab=262144, n_head=4, n_head_kv=1,
                     head_dim=256, swa=swa, n_swa=512)
    full = f16_context(n_ctx=32768)  # swa_full: llama.cpp's default keeps every layer full size
    assert kv_cells(info, full) == (32768, 32768)
    capped = f16_context(n_ctx=32768, swa_full=False)
    assert kv_cells(info, capped) == (32768, 1024)  # pad256(512 + n_ubatch 512)
    per = layer_kv_bytes(info, capped)
    assert per[5] == 32768 * 256 * 2 * 2 and per[0] == 1024 * 256 * 2 * 2
    assert kv_cells(info, f16_context(n_ctx=32768, swa_full=False, n_ubatch=128)) == (32768, 768)


def test_compute_phases() -> None:
    t = 512
    logits = 4 * t * TARGET.vocab_size
    assert compute_bytes(TARGET, SPEC, layers=False, output=True) >= logits
    assert compute_bytes(TARGET, SPEC, layers=True, output=False) < logits
    no_fa = compute_bytes(TARGET, f16_context(n_ctx=32768, flash_attn="off"), layers=True, output=False)
    assert no_fa > 4 * 32768 * t * TARGET.n_head  # the f32 KQ matrix
    small = compute_bytes(TARGET, f16_context(n_ctx=256))  # n_ubatch clamps to the context
    assert small < compute_bytes(TARGET, SPEC) * 0.6


def test_quantized_cache_needs_divisible_head_dim(tiny_target: Path) -> None:
    info = read_model_info(tiny_target)  # head dim 16
    with pytest.raises(UserError, match="divisible by 32"):
        plan_offload(target=info, draft=None, gpus=(), context=f16_context(cache_type_k="q8_0", cache_type_v="q8_0"))


def test_bad_spec() -> None:
    with pytest.raises(UserError):
        f16_context(cache_type_k="q5_1")
    with pytest.raises(UserError):
        f16_context(n_ctx=-5)
    with pytest.raises(UserError, match="margin"):
        plan_offload(target=TARGET, draft=None, gpus=gpus(8), margin_bytes=-1)


# ---- planner: the cases of issue 3 ---------------------------------------------------------


def test_no_gpu() -> None:
    plan = plan_offload(target=TARGET, draft=DRAFT, gpus=(), context=SPEC, ram_available_bytes=64 * GiB)
    assert plan.target.n_gpu_layers == 0 and plan.draft is not None and plan.draft.n_gpu_layers == 0
    assert not plan.fits and plan.ram_ok
    assert plan.ram_bytes == plan.target.ram.total_bytes + plan.draft.ram.total_bytes
    assert plan.target.estimate.weights_bytes == TARGET.weights_bytes
    assert any("no GPU" in a for a in plan.advice)
    assert plan.to_load_kwargs("target") == {"n_gpu_layers": 0, "tensor_split": None, "main_gpu": 0}
    check_invariants(plan, TARGET, DRAFT)


def test_one_4gib_gpu() -> None:
    plan = plan_offload(target=TARGET, draft=DRAFT, gpus=gpus(4), context=SPEC)
    assert plan.draft is not None and plan.draft.whole_on_gpu  # the draft first, whole
    assert 0 < plan.target.n_gpu_layers < TARGET.n_layer + 1
    assert not plan.fits
    gpu = plan.devices[0]
    assert gpu.used_bytes <= gpu.usable_bytes
    assert gpu.used_bytes >= 0.9 * gpu.usable_bytes
    assert plan.target.tensor_split is None and plan.draft.tensor_split is None
    assert plan.advice and any("target layers on GPU" in a for a in plan.advice)
    check_invariants(plan, TARGET, DRAFT)


def test_8gib_plus_4gib() -> None:
    plan = plan_offload(target=TARGET, draft=DRAFT, gpus=gpus(8, 4), context=SPEC)
    assert plan.draft is not None and plan.draft.whole_on_gpu
    assert set(plan.draft.gpu) == {0}  # the larger ("fastest") GPU
    assert plan.draft.tensor_split == (float(DRAFT.n_layer + 1), 0.0)
    assert plan.target.whole_on_gpu and plan.fits and not plan.advice
    assert set(plan.target.gpu) == {0, 1}  # spread over both
    # in proportion to what each GPU has free: both end up about equally full
    f0, f1 = (d.used_bytes / d.usable_bytes for d in plan.devices[:2])
    assert abs(f0 - f1) < 0.1
    check_invariants(plan, TARGET, DRAFT)


def test_budget_smaller_than_the_draft() -> None:
    plan = plan_offload(target=TARGET, draft=DRAFT, gpus=gpus(1.8), context=SPEC)  # 0.8 GiB usable
    assert plan.draft is not None and not plan.draft.whole_on_gpu
    assert plan.draft.n_gpu_layers > 0  # as much of the draft as fits
    assert plan.target.n_gpu_layers == 0
    assert not plan.fits
    assert any("draft does not fit whole" in a and "smaller draft" in a for a in plan.advice)
    gpu = plan.devices[0]
    assert gpu.used_bytes <= gpu.usable_bytes
    check_invariants(plan, TARGET, DRAFT)


def test_budget_that_fits_everything() -> None:
    plan = plan_offload(target=TARGET, draft=DRAFT, gpus=gpus(24), context=SPEC, ram_available_bytes=16 * GiB)
    assert plan.fits and plan.target.whole_on_gpu and plan.draft is not None and plan.draft.whole_on_gpu
    assert plan.advice == ()
    assert plan.to_load_kwargs("draft")["n_gpu_layers"] == DRAFT.n_layer + 1
    assert plan.to_load_kwargs("target") == {"n_gpu_layers": TARGET.n_layer + 1, "tensor_split": None, "main_gpu": 0}
    # RAM keeps only the token embeddings and small buffers
    assert plan.ram_bytes < TARGET.input_bytes + DRAFT.input_bytes + 200 * MiB
    check_invariants(plan, TARGET, DRAFT)


def test_advice_names_numbers() -> None:
    plan = plan_offload(target=TARGET, draft=DRAFT, gpus=gpus(7.5), context=f16_context(n_ctx=32768))
    text = "\n".join(plan.advice)
    assert not plan.fits
    assert "--ctx " in text  # a smaller context that fits
    assert "--cache-type q8_0" in text and "GiB" in text
    smaller = int(text.split("--ctx ")[1].split()[0])
    again = plan_offload(target=TARGET, draft=DRAFT, gpus=gpus(7.5), context=f16_context(n_ctx=smaller))
    assert again.fits
    too_big = plan_offload(target=TARGET, draft=DRAFT, gpus=gpus(7.5), context=f16_context(n_ctx=smaller + 256))
    assert not too_big.fits


def test_ram_shortfall_is_reported() -> None:
    plan = plan_offload(target=TARGET, draft=None, gpus=(), context=SPEC, ram_available_bytes=2 * GiB)
    assert not plan.ram_ok and not plan.fits
    assert any(a.startswith("RAM:") for a in plan.advice)


def test_margin_is_kept() -> None:
    for margin in (0, DEFAULT_MARGIN, 2 * GiB):
        plan = plan_offload(target=TARGET, draft=DRAFT, gpus=gpus(6), context=SPEC, margin_bytes=margin)
        assert plan.devices[0].used_bytes <= 6 * GiB - margin


def test_target_alone() -> None:
    plan = plan_offload(target=TARGET, draft=None, gpus=gpus(8, 4), context=SPEC)
    assert plan.draft is None and plan.fits
    with pytest.raises(ValueError):
        plan.to_load_kwargs("draft")
    check_invariants(plan, TARGET, None)


@pytest.mark.parametrize("sizes", [(2,), (3,), (5,), (6,), (7,), (2, 2), (3, 2), (4, 3), (5, 2), (3, 3, 2), (1.5, 2.5, 2.5)])
def test_partial_plans_use_90_percent(sizes: tuple[float, ...]) -> None:
    plan = plan_offload(target=TARGET, draft=DRAFT, gpus=gpus(*sizes), context=SPEC)
    check_invariants(plan, TARGET, DRAFT)
    assert not plan.target.whole_on_gpu
    usable = sum(d.usable_bytes for d in plan.devices if d.index is not None)
    used = sum(d.used_bytes for d in plan.devices if d.index is not None)
    assert used >= 0.9 * usable


def test_last_gpu_too_small_for_the_output_layer() -> None:
    """llama.cpp puts the output layer on the last GPU that gets layers (device order), so a last
    GPU too small for it (weights + logits buffer) stays empty; the plan says where things went."""
    plan = plan_offload(target=TARGET, draft=DRAFT, gpus=gpus(2.5, 2.5, 1.5), context=SPEC)
    check_invariants(plan, TARGET, DRAFT)
    assert plan.devices[2].used_bytes == 0
    assert plan.target.main_gpu == 1 and plan.target.tensor_split is not None and plan.target.tensor_split[2] == 0


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.floats(min_value=0.0, max_value=20.0), min_size=0, max_size=4),
       n_ctx=st.sampled_from([512, 4096, 8192, 32768]),
       cache=st.sampled_from(["f16", "q8_0", "q4_0"]),
       with_draft=st.booleans())
def test_never_over_budget(sizes: list[float], n_ctx: int, cache: str, with_draft: bool) -> None:
    spec = f16_context(n_ctx=n_ctx, cache_type_k=cache, cache_type_v=cache)
    draft = DRAFT if with_draft else None
    plan = plan_offload(target=TARGET, draft=draft, gpus=gpus(*sizes), context=spec)
    check_invariants(plan, TARGET, draft)
    if plan.fits:
        assert not plan.advice
    else:
        assert plan.advice


# ---- real models ---------------------------------------------------------------------------


def test_smollm2_pair_on_simulated_gpus(smollm2_q4_1: Path) -> None:
    info = read_model_info(smollm2_q4_1)  # tied embeddings: the output layer carries a copy
    for sizes in ((), (1.2,), (1.6,), (2, 1.2)):
        plan = plan_offload(target=info, draft=info, gpus=gpus(*sizes), context=f16_context(n_ctx=4096))
        check_invariants(plan, info, info)


def test_plan_for_load(smollm2_q4_1: Path, tiny_target: Path) -> None:
    """What `run --ngl auto` calls: load arguments from files and detected GPUs."""
    from ggufspec.hardware import budget_gpus
    from ggufspec.plan import plan_for_load

    t, d = plan_for_load(target=smollm2_q4_1, draft=tiny_target, gpus=budget_gpus((8 * GiB, 2 * GiB)), context=f16_context(n_ctx=4096))
    assert t["n_gpu_layers"] == 31 and d["n_gpu_layers"] == 3
    assert d["tensor_split"] == (3.0, 0.0) and d["main_gpu"] == 0
    t, d = plan_for_load(target=smollm2_q4_1, draft=None, gpus=(), context=f16_context(n_ctx=4096))
    assert t == d == {"n_gpu_layers": 0, "tensor_split": None, "main_gpu": 0}


def test_a_split_target_keeps_room_on_the_first_gpu_for_a_weight_copy() -> None:
    # llama.cpp runs a prompt batch's product with a CPU-resident weight on the first GPU, copying
    # the weight into its compute buffer (H200: +40.9 MiB over the estimate without it at three
    # splits of smollm2-as-7b, whose largest block tensor is 36.5 MiB)
    plan = plan_offload(target=TARGET, draft=None, gpus=gpus(3), context=SPEC)
    check_invariants(plan, TARGET, None)
    n_off = plan.target.n_gpu_layers
    assert 0 < n_off <= TARGET.n_layer  # split
    copy = offload_copy_bytes(TARGET, TARGET.n_layer + 1 - n_off)
    assert copy == max(t.n_bytes for t in TARGET.tensors if t.layer is not None) > 0  # an FFN matrix
    assert plan.target.gpu[0].compute_bytes == compute_bytes(TARGET, SPEC, layers=True, output=True) + copy
    assert plan.devices[0].used_bytes <= plan.devices[0].usable_bytes
    # whole on the GPU: no copy; RPC workers only: none either (their backend offloads no op)
    whole = plan_offload(target=TARGET, draft=None, gpus=gpus(12), context=SPEC)
    assert whole.target.whole_on_gpu
    assert whole.target.gpu[0].compute_bytes == compute_bytes(TARGET, SPEC, layers=True, output=True)
    workers = tuple(dataclasses.replace(g, kind="rpc") for g in gpus(3))
    remote = plan_offload(target=TARGET, draft=None, gpus=workers, context=SPEC)
    assert remote.target.gpu[0].compute_bytes == compute_bytes(TARGET, SPEC, layers=True, output=True)
