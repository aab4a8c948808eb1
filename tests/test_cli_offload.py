"""--ngl/--ngld as users type them, on a machine whose llama.cpp has no GPU backend."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ggufspec.errors import UserError
from ggufspec.settings import PairSettings, parse_layers
from test_cli_run import assert_one_line_error, ggufspec


def test_layer_counts_parse_and_refuse_negatives() -> None:
    assert parse_layers("auto", flag="--ngl") == "auto"
    assert parse_layers("ALL", flag="--ngl") == "all"
    assert parse_layers("-1", flag="--ngl") == "all"  # llama.cpp's spelling of every layer
    assert parse_layers("12", flag="--ngl") == 12
    for bad in ("-7", "x", "1.5"):
        with pytest.raises(UserError, match="--ngl takes a layer count"):
            parse_layers(bad, flag="--ngl")
    with pytest.raises(UserError, match="--ngld takes a layer count"):
        PairSettings(n_gpu_layers_draft=-3)


def test_negative_ngl_is_a_one_line_error(tiny_target_q8: Path) -> None:
    proc = ggufspec("run", "--target", str(tiny_target_q8), "-p", "hi", "-n", "2", "--ngl", "-7")
    assert_one_line_error(proc, "--ngl", "-7")


def test_ngl_without_a_gpu_backend_runs_on_the_cpu_unchanged(tiny_target_q8: Path, tiny_draft_q8: Path) -> None:
    import llama_cpp

    if llama_cpp.llama_supports_gpu_offload():
        pytest.skip("this llama.cpp has a GPU backend: --ngl does offload here")
    common = ["run", "--target", str(tiny_target_q8), "--draft", str(tiny_draft_q8), "-p", "Once upon a time",
              "-n", "24", "--threads", "1", "--ctx", "256", "--json"]
    cpu = ggufspec(*common, "--ngl", "0")
    asked = ggufspec(*common, "--ngl", "8", "--ngld", "all")
    assert cpu.returncode == asked.returncode == 0, asked.stderr
    assert "--ngl 8 and --ngld all ignored: this llama.cpp build has no GPU backend" in asked.stderr
    assert asked.stderr.count("ignored") == 1  # once, not again for the draft
    assert "GPU" not in cpu.stderr and "runs on a GPU" not in asked.stderr  # no false exactness note
    assert json.loads(asked.stdout)["text"] == json.loads(cpu.stdout)["text"]
