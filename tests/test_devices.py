"""devices: sizes as users write them, GPU detection (NVML, nvidia-smi, AMD sysfs), budgets."""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path

import pytest

from ggufspec import hardware
from ggufspec.errors import UserError
from ggufspec.hardware import GiB, MiB, format_bytes, parse_size, parse_sizes


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("8GiB", 8 * GiB), ("8gib", 8 * GiB), ("8 GiB", 8 * GiB), ("1.5GiB", int(1.5 * GiB)),
        ("512MiB", 512 * MiB), ("512mb", 512 * 10**6), ("12GB", 12 * 10**9), ("2KiB", 2048),
        ("2kb", 2000), ("1TiB", 1 << 40), ("1tb", 10**12), ("100", 100), ("100B", 100), ("0", 0),
        ("4G", 4 * GiB), ("256m", 256 * MiB),
    ],
)
def test_parse_size(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["abc", "", "GiB", "8 GiB GiB", "1,5GiB", "8XB", "--1GiB", "nan", "inf"])
def test_parse_size_rejects(text: str) -> None:
    with pytest.raises(UserError) as e:
        parse_size(text)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("text", ["-1GiB", "-0.5MiB", "-3"])
def test_negative_sizes(text: str) -> None:
    with pytest.raises(UserError, match="negative"):
        parse_size(text)


def test_parse_sizes() -> None:
    assert parse_sizes("12GiB,8GiB") == (12 * GiB, 8 * GiB)
    assert parse_sizes(" 4GiB ") == (4 * GiB,)
    for bad in ("", "4GiB,", ",4GiB", "4GiB,,2GiB", "abc", "4GiB,-2GiB"):
        with pytest.raises(UserError):
            parse_sizes(bad)


def test_format_bytes() -> None:
    assert format_bytes(512) == "512 B"
    assert format_bytes(1536) == "1.50 KiB"
    assert format_bytes(int(1.5 * GiB)) == "1.50 GiB"
    assert format_bytes(300 * MiB) == "300.0 MiB"
    assert format_bytes(-2 * GiB) == "-2.00 GiB"


# ---- detection ---------------------------------------------------------------------------------


def _fake_pynvml(gpus: list[tuple[str, int, int]], *, fail_init: bool = False) -> types.ModuleType:
    mod = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    def init() -> None:
        if fail_init:
            raise NVMLError("Driver Not Loaded")

    mod.NVMLError = NVMLError  # type: ignore[attr-defined]
    mod.nvmlInit = init  # type: ignore[attr-defined]
    mod.nvmlShutdown = lambda: None  # type: ignore[attr-defined]
    mod.nvmlDeviceGetCount = lambda: len(gpus)  # type: ignore[attr-defined]
    mod.nvmlDeviceGetHandleByIndex = lambda i: i  # type: ignore[attr-defined]
    mod.nvmlDeviceGetName = lambda h: gpus[h][0].encode()  # type: ignore[attr-defined]
    mod.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(  # type: ignore[attr-defined]
        total=gpus[h][1], free=gpus[h][2], used=gpus[h][1] - gpus[h][2])
    return mod


@pytest.fixture
def no_smi(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An empty PATH (no nvidia-smi) and an empty sysfs."""
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    (tmp_path / "bin").mkdir()
    (tmp_path / "sys").mkdir()
    return tmp_path / "sys"


def test_nvml(monkeypatch: pytest.MonkeyPatch, no_smi: Path) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml([("RTX 3090", 24 * GiB, 23 * GiB), ("RTX 3060", 12 * GiB, 11 * GiB)]))
    gpus = hardware.detect_gpus(sysfs=no_smi)
    assert [(g.index, g.name, g.total_bytes, g.free_bytes, g.source) for g in gpus] == [
        (0, "RTX 3090", 24 * GiB, 23 * GiB, "nvml"), (1, "RTX 3060", 12 * GiB, 11 * GiB, "nvml")]


def test_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch, no_smi: Path) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml([("A", 8 * GiB, 8 * GiB), ("B", 4 * GiB, 4 * GiB)]))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert [(g.index, g.name) for g in hardware.detect_gpus(sysfs=no_smi)] == [(0, "B")]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert hardware.detect_gpus(sysfs=no_smi) == ()


def test_no_nvml_library_or_driver_means_no_gpu(monkeypatch: pytest.MonkeyPatch, no_smi: Path) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    assert hardware.detect_gpus(sysfs=no_smi) == ()
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml([], fail_init=True))
    assert hardware.detect_gpus(sysfs=no_smi) == ()


def test_nvidia_smi_fallback(monkeypatch: pytest.MonkeyPatch, no_smi: Path, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml([], fail_init=True))
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho '0, NVIDIA GeForce RTX 4090, 24564, 23000'\necho '1, Tesla T4, 15360, 15000'\n")
    smi.chmod(0o755)
    gpus = hardware.detect_gpus(sysfs=no_smi)
    assert [(g.name, g.total_bytes, g.free_bytes, g.source) for g in gpus] == [
        ("NVIDIA GeForce RTX 4090", 24564 * MiB, 23000 * MiB, "nvidia-smi"),
        ("Tesla T4", 15360 * MiB, 15000 * MiB, "nvidia-smi")]


def test_nvidia_smi_failing(monkeypatch: pytest.MonkeyPatch, no_smi: Path, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    smi.chmod(0o755)
    assert hardware.detect_gpus(sysfs=no_smi) == ()


def test_amd_sysfs(monkeypatch: pytest.MonkeyPatch, no_smi: Path) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    for card, total, used, name in (("card1", 16 * GiB, 2 * GiB, "AMD Radeon RX 7800 XT"), ("card0", 8 * GiB, GiB, "")):
        dev = no_smi / "class" / "drm" / card / "device"
        dev.mkdir(parents=True)
        (dev / "mem_info_vram_total").write_text(f"{total}\n")
        (dev / "mem_info_vram_used").write_text(f"{used}\n")
        if name:
            (dev / "product_name").write_text(name + "\n")
    (no_smi / "class" / "drm" / "card2" / "device").mkdir(parents=True)  # an Intel card: no VRAM files
    gpus = hardware.detect_gpus(sysfs=no_smi)
    assert [(g.index, g.name, g.total_bytes, g.free_bytes, g.vendor) for g in gpus] == [
        (0, "AMD GPU (card0)", 8 * GiB, 7 * GiB, "amd"), (1, "AMD Radeon RX 7800 XT", 16 * GiB, 14 * GiB, "amd")]


def test_budget_replaces_detection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml([("real", 80 * GiB, 80 * GiB)]))
    info = hardware.system_info(vram=(12 * GiB, 8 * GiB))
    assert [(g.index, g.free_bytes, g.source) for g in info.gpus] == [(0, 12 * GiB, "budget"), (1, 8 * GiB, "budget")]
    assert hardware.system_info(vram=(0,)).gpus == ()
    assert info.ram_total_bytes > 0 and info.ram_available_bytes > 0
    assert 1 <= info.physical_cores <= info.logical_cores


def test_physical_cores() -> None:
    n = hardware.physical_cores()
    assert 1 <= n <= (os.cpu_count() or 1)


def test_this_machine_does_not_crash() -> None:
    info = hardware.system_info()
    assert all(g.free_bytes <= g.total_bytes for g in info.gpus)
