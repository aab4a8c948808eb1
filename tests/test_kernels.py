"""Batch-invariant kernels: the overlay is picked up, refused when stale or switched off, and the
target `auto` picks is exact on whatever build is loaded (one-row and batch logits bit-identical)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ggufspec.llama import kernels
from ggufspec.llama.context import Context
from ggufspec.llama.lib import batch_invariant_kernels
from ggufspec.llama.model import Model
from ggufspec.models.embedded import exact_target_quant, resolve_embedded
from ggufspec.settings import ContextSettings

INSTALLED_LIB = kernels.installed_lib_dir()


def _probe(env: dict[str, str]) -> dict:
    """In a fresh interpreter (llama_cpp not yet imported): what activate() did and what loaded."""
    code = (
        "import json, os; from ggufspec.llama import kernels; lib = kernels.activate(); "
        "from ggufspec.llama.lib import batch_invariant_kernels; "
        "print(json.dumps({'lib': str(lib) if lib else None, 'env': os.environ.get('LLAMA_CPP_LIB_PATH'), "
        "'invariant': batch_invariant_kernels()}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _fake_overlay(cache: Path) -> Path:
    """An overlay made of copies of the installed libraries (cp -a keeps size and mtime)."""
    lib = cache / "kernels" / f"llama-cpp-python-{kernels.installed_version()}" / "lib"
    shutil.copytree(INSTALLED_LIB, lib, copy_function=shutil.copy2)
    return lib


def _env(cache: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("LLAMA_CPP_LIB_PATH", "GGUFSPEC_KERNELS")}
    return env | {"GGUFSPEC_CACHE": str(cache)} | extra


def test_no_overlay_keeps_the_installed_libraries(tmp_path: Path) -> None:
    got = _probe(_env(tmp_path))
    assert got["lib"] is None and got["env"] is None


def test_an_overlay_for_the_installed_build_is_activated(tmp_path: Path) -> None:
    lib = _fake_overlay(tmp_path)
    got = _probe(_env(tmp_path))
    assert got["lib"] == str(lib) and got["env"] == str(lib)


def test_the_overlay_names_its_variant(tmp_path: Path) -> None:
    lib = _fake_overlay(tmp_path)
    assert kernels.overlay_variant(lib) == "ggml"  # built before variants existed: no llamafile
    assert kernels.overlay_revision(lib) == 1
    (lib / kernels.VARIANT_FILE).write_text("tinyblas\n")  # revision 1 wrote the variant alone
    assert kernels.overlay_variant(lib) == "tinyblas" and kernels.overlay_revision(lib) == 1
    kernels.write_marker(lib, "tinyblas")
    assert kernels.overlay_variant(lib) == "tinyblas"
    assert kernels.overlay_revision(lib) == kernels.OVERLAY_REVISION > 1
    assert kernels.overlay_variant(tmp_path) is None  # not an overlay
    # copies of the stock libraries (llamafile with its one-row gate) are not invariant, whatever
    # the marker claims, unless they are the overlay really loaded
    (lib / kernels.VARIANT_FILE).unlink()
    assert _probe(_env(tmp_path))["invariant"] is (b"LLAMAFILE = 1" not in _system_info())


def _system_info() -> bytes:
    return subprocess.run([sys.executable, "-c", "import llama_cpp, sys; sys.stdout.buffer.write(llama_cpp.llama_print_system_info())"],
                          capture_output=True, env=_env(Path("/nonexistent")), check=True, timeout=120).stdout


def test_stale_overlay_stock_switch_and_user_path_are_respected(tmp_path: Path) -> None:
    lib = _fake_overlay(tmp_path)
    # GGUFSPEC_KERNELS=stock: not used, and an inherited pointer to it is dropped
    got = _probe(_env(tmp_path, GGUFSPEC_KERNELS="stock", LLAMA_CPP_LIB_PATH=str(lib)))
    assert got["lib"] is None and got["env"] is None
    # the user's own LLAMA_CPP_LIB_PATH wins
    got = _probe(_env(tmp_path, LLAMA_CPP_LIB_PATH=str(INSTALLED_LIB)))
    assert got["lib"] is None and got["env"] == str(INSTALLED_LIB)
    # the same bytes installed anew (a new venv from pip's wheel cache): still the overlay's
    os.utime(lib / "libllama.so", (0, 0))
    assert _probe(_env(tmp_path))["lib"] == str(lib)
    # a llama-cpp-python built differently (another libllama of the same version): the overlay is stale
    with (lib / "libllama.so").open("r+b") as f:
        f.seek(-1, os.SEEK_END)
        last = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last[0] ^ 0xFF]))
    assert _probe(_env(tmp_path))["lib"] is None


def _one_row_equals_batch(quant: str) -> None:
    model = Model(resolve_embedded("smollm2", quant))
    settings = ContextSettings(n_ctx=512, cache_type_k="q8_0", cache_type_v="q8_0")
    one, batch = Context(model, settings=settings), Context(model, settings=settings)
    try:
        tokens = model.tokenize("The printing press spread across Europe within decades. " * 8)[:80]
        one.decode(tokens[:70])
        batch.decode(tokens[:70])
        rows = []
        for tok in tokens[70:75]:
            one.decode([tok])
            rows.append(one.logits(-1).copy())
        batch.decode(tokens[70:75], logits="all")
        for j, row in enumerate(rows):
            assert np.array_equal(batch.logits(j), row), (quant, j, float(np.abs(batch.logits(j) - row).max()))
    finally:
        one.close(), batch.close(), model.close()


def test_the_auto_target_is_batch_invariant_on_this_build() -> None:
    # F32 with the overlay, Q8_0 without: either way one-row and batch logits are bit-identical
    quant = exact_target_quant()
    assert quant == ("F32" if batch_invariant_kernels() else "Q8_0")
    _one_row_equals_batch("auto")


@pytest.mark.parametrize("quant", ["F16", "Q8_0", "Q4_0"])
def test_every_weight_type_the_overlay_claims_is_batch_invariant(quant: str) -> None:
    # F16 through tinyBLAS at every batch size; Q8_0 and Q4_0 through ggml's dot at one row and
    # tinyBLAS at more (the overlay keeps llama.cpp's gate for them: the same order, faster)
    if not batch_invariant_kernels():
        pytest.skip("no exact kernels loaded (scripts/build_exact_kernels.sh)")
    _one_row_equals_batch(quant)


def test_greedy_exactness_names_what_breaks_it(tiny_target: Path, tiny_target_q8: Path) -> None:
    from ggufspec.ggufinfo import read_model_info
    from ggufspec.loop.exactness import greedy_exactness

    f32, q8 = read_model_info(tiny_target), read_model_info(tiny_target_q8)
    assert f32.file_type in ("F32", "F16")
    kw = dict(on_gpu=False, cache_type="q8_0")
    assert greedy_exactness(q8, invariant_kernels=False, **kw) is None
    assert greedy_exactness(f32, invariant_kernels=True, **kw) is None
    reason = greedy_exactness(f32, invariant_kernels=False, **kw)
    assert reason is not None and "build_exact_kernels.sh" in reason
    assert "f16 KV cache" in greedy_exactness(q8, invariant_kernels=True, on_gpu=False, cache_type="f16")
    assert "GPU" in greedy_exactness(q8, invariant_kernels=True, on_gpu=True, cache_type="q8_0")


def test_run_notes_an_inexact_pair_on_stderr(tiny_target: Path, tiny_draft: Path) -> None:
    common = [sys.executable, "-m", "ggufspec.cli", "run", "--target", str(tiny_target), "--draft", str(tiny_draft),
              "-p", "hello", "-n", "4", "--threads", "1", "--ctx", "256", "--json"]
    stock = subprocess.run(common, capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, GGUFSPEC_KERNELS="stock"))
    assert stock.returncode == 0, stock.stderr
    json.loads(stock.stdout)  # stdout stays one JSON object
    if "LLAMAFILE = 1" in subprocess.run(
        [sys.executable, "-c", "import llama_cpp; print(llama_cpp.llama_print_system_info().decode())"],
        capture_output=True, text=True, env=_env(Path("/nonexistent")), check=True,
    ).stdout:
        assert stock.stderr.startswith("note: ") and "not batch-invariant" in stock.stderr
    assert "f16 KV cache" in stock.stderr  # the tiny model's head size rules out a q8_0 cache
    f16 = subprocess.run([*common, "--cache-type", "f16"], capture_output=True, text=True, timeout=120)
    assert f16.returncode == 0 and "note: an f16 KV cache" in f16.stderr


def test_built_kernels_are_in_use_in_this_process() -> None:
    # .ci/run builds them: a fresh venv (same wheel, new files) must still pick them up
    lib = kernels.overlay_dir()
    if lib is None or not (lib / "libggml-cpu.so").is_file():
        pytest.skip("no exact kernels built here (scripts/build_exact_kernels.sh)")
    assert os.environ.get("LLAMA_CPP_LIB_PATH") == str(lib)
    assert batch_invariant_kernels() and exact_target_quant() == "F32"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the preload is for Linux's libstdc++")
def test_cxx_runtime_is_global_before_llama_cpp_loads() -> None:
    """`preload_cxx_runtime` puts the system's libstdc++ in the global symbol scope (where the
    libraries llama_cpp loads look first) without importing llama_cpp; a module that merely links
    libstdc++ (numpy does) leaves it out of that scope. docs/gpu.md: the crash it prevents."""
    code = """
import ctypes, sys, numpy
scope = ctypes.CDLL(None)
before = hasattr(scope, "_ZNSt6locale7classicEv")
from ggufspec.llama import kernels
print(before, kernels.preload_cxx_runtime(), hasattr(scope, "_ZNSt6locale7classicEv"), "llama_cpp" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "libstdc++.so.6", "True", "False"]
