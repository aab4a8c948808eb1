"""scripts/gpu_smoke.py: each step in its own process, so a crash names its step."""

from __future__ import annotations

from pathlib import Path

from script_module import load_script

gpu_smoke = load_script("gpu_smoke")


def test_a_crash_is_reported_with_its_signal_and_frame(tiny_target: Path) -> None:
    ok, evidence = gpu_smoke.run_step("import ctypes\nctypes.string_at(0)", tiny_target, 0, 30)
    assert not ok
    assert evidence.startswith("killed by SIGSEGV at File") and "string_at" in evidence


def test_the_load_steps_pass_on_this_build(tiny_target: Path) -> None:
    steps = dict(gpu_smoke.STEPS)
    for name in ("ggufspec load", "device list, then ggufspec load"):
        ok, evidence = gpu_smoke.run_step(steps[name], tiny_target, 0, 60)
        assert ok, (name, evidence)
        assert evidence == "n_vocab 49152"
