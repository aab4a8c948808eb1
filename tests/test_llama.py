"""ggufspec.llama: the one package that imports llama_cpp, what a prompt's bytes become, and Ctrl-C
during llama.cpp calls (model load, context, quantization)."""

from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from ggufspec.errors import UserError
from ggufspec.llama.lib import HeldInterrupt
from ggufspec.llama.model import Model

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ggufspec"

# A child that runs the CLI (or a snippet) with a stderr that presses Ctrl-C (SIGINT to itself)
# when llama.cpp's log (shown by --llama-log / set_verbose) first writes MARK: the signal then
# arrives while llama.cpp is inside the C call that logs, every time.
_CTRL_C_AT = """
import signal, sys

class CtrlCAt:
    def __init__(self, inner, mark):
        self.inner, self.mark, self.fired = inner, mark, False

    def write(self, text):
        if not self.fired and self.mark in text:
            self.fired = True
            signal.raise_signal(signal.SIGINT)
        return self.inner.write(text)

    def flush(self):
        self.inner.flush()

sys.stderr = CtrlCAt(sys.stderr, sys.argv[1])
"""


def _child(code: str, *args: str | bytes, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300,
                          cwd=ROOT, env=env)


# ---- one package owns llama_cpp ------------------------------------------------------------


def _top_level_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_only_ggufspec_llama_imports_llama_cpp_at_module_level() -> None:
    importers = sorted(
        str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if "llama_cpp" in _top_level_imports(p)
    )
    assert importers == ["llama/lib.py"]


def test_kernels_and_paths_load_neither_llama_cpp_nor_embedded() -> None:
    # the kernels must be chosen before llama_cpp loads, and the cache location no longer comes
    # from ggufspec.models.embedded (which imports the backend): no import circle
    out = _child(
        "import sys; from ggufspec.llama import kernels; kernels.overlay_dir(); kernels.current_overlay(); "
        "print(sorted(m for m in ('llama_cpp', 'ggufspec.models.embedded', 'ggufspec.backend') if m in sys.modules))"
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# ---- a prompt's bytes ----------------------------------------------------------------------

CAFE_LATIN1 = b"caf\xe9"  # "café" from a Latin-1 terminal: not UTF-8


def test_a_non_utf8_byte_reaches_the_tokenizer_as_it_came(tiny_target: Path, tiny_bytes_target: Path) -> None:
    text = CAFE_LATIN1.decode("utf-8", errors="surrogateescape")  # how Python hands such an argv over
    bpe = Model(tiny_target)
    # a BPE tokenizer reads the invalid byte as U+FFFD, as llama.cpp's own tools do
    assert bpe.tokenize(text, add_special=False) == bpe.tokenize("caf\ufffd", add_special=False)
    spm = Model(tiny_bytes_target)
    # a vocabulary with byte tokens keeps the byte itself
    tokens = spm.tokenize(text, add_special=False)
    assert spm.token_bytes(tokens[-1]) == b"\xe9"
    assert b"".join(spm.token_bytes(t) for t in tokens).endswith(CAFE_LATIN1)


def test_a_lone_surrogate_that_is_no_byte_is_one_clear_error(tiny_target: Path) -> None:
    with pytest.raises(UserError, match="lone UTF-16 surrogate") as e:
        Model(tiny_target).tokenize("caf\ud800")
    assert "\n" not in str(e.value)


def test_run_takes_a_non_utf8_prompt(tiny_bytes_target: Path) -> None:
    expected = Model(tiny_bytes_target).tokenize("caf\udce9")
    env = dict(os.environ, PYTHONUTF8="1")  # argv decoded as UTF-8 with surrogateescape, whatever the locale
    out = subprocess.run(
        [sys.executable, "-m", "ggufspec.cli", "run", "--target", str(tiny_bytes_target), "--draft", "none",
         "-p", CAFE_LATIN1, "-n", "4", "--threads", "1", "--ctx", "64", "--json"],
        capture_output=True, text=True, timeout=300, cwd=ROOT, env=env,
    )
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    assert json.loads(out.stdout)["stats"]["prompt_tokens"] == len(expected)


# ---- Ctrl-C during llama.cpp calls -----------------------------------------------------------


@pytest.mark.parametrize("mark", ["llama_model_loader", "llama_context"], ids=["model load", "context"])
def test_ctrl_c_inside_llama_cpp_stops_the_run(tiny_target: Path, mark: str) -> None:
    code = _CTRL_C_AT + "from ggufspec.cli import main; sys.exit(main(sys.argv[2:]))"
    out = _child(code, mark, "run", "--llama-log", "--target", str(tiny_target), "--draft", "none",
                 "-p", "hello", "-n", "4", "--threads", "1", "--ctx", "64")
    assert out.returncode == 130, out.stderr[-2000:]
    assert out.stderr.endswith("error: interrupted\n")
    assert "Traceback" not in out.stderr and "Exception ignored" not in out.stderr
    assert out.stdout == ""  # nothing generated


def test_ctrl_c_while_quantizing_leaves_nothing_on_disk(tiny_target: Path, tmp_path: Path) -> None:
    code = _CTRL_C_AT + (
        "from pathlib import Path\n"
        "from ggufspec.llama.lib import set_verbose\n"
        "from ggufspec.llama.quantize import quantize\n"
        "set_verbose(True)\n"
        "try:\n"
        "    quantize(src=Path(sys.argv[2]), dst=Path(sys.argv[3]), ftype='Q8_0', n_threads=1)\n"
        "except KeyboardInterrupt:\n"
        "    sys.exit(130)\n"
    )
    out_dir = tmp_path / "derived"
    out = _child(code, "llama_model_loader", str(tiny_target), str(out_dir / "tiny.Q8_0.gguf"))
    assert out.returncode == 130, out.stderr[-2000:]
    assert "Traceback" not in out.stderr and "Exception ignored" not in out.stderr
    assert list(out_dir.iterdir()) == []


def test_held_interrupt_raises_once_the_call_is_over() -> None:
    before = signal.getsignal(signal.SIGINT)
    finished = False
    with pytest.raises(KeyboardInterrupt):
        with HeldInterrupt() as held:
            signal.raise_signal(signal.SIGINT)
            finished = True  # the signal did not stop the held block
    assert finished and held.requested
    assert signal.getsignal(signal.SIGINT) is before


def test_held_interrupt_leaves_other_threads_alone() -> None:
    seen: list[object] = []

    def work() -> None:
        with HeldInterrupt() as held:
            seen.append(signal.getsignal(signal.SIGINT))
        seen.append(held.requested)

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert seen == [signal.getsignal(signal.SIGINT), False]


def test_repack_follows_the_setting_and_in_auto_the_builds_amx(monkeypatch: pytest.MonkeyPatch) -> None:
    """GGUFSPEC_REPACK=on/off decide; auto repacks unless this llama.cpp build has AMX_INT8 (its
    AMX matmul crashes on quantized weights, llama.cpp #20824); the high-level `Llama(...)` of the
    bench's llama-cpp-python peer gets the same choice."""
    from ggufspec.llama import lib

    try:
        for value, want in (("on", True), ("off", False), ("", b"AMX_INT8 = 1" not in lib.llama.llama_print_system_info())):
            monkeypatch.setenv("GGUFSPEC_REPACK", value)
            lib.repack.cache_clear()
            assert lib.repack() is want, value
            with lib.high_level_repack():
                assert lib.llama.llama_cpp.llama_model_default_params().use_extra_bufts is want
            assert lib.llama.llama_cpp.llama_model_default_params().use_extra_bufts is True  # restored
        monkeypatch.setenv("GGUFSPEC_REPACK", "sometimes")
        lib.repack.cache_clear()
        with pytest.raises(UserError, match="GGUFSPEC_REPACK takes auto, on or off"):
            lib.repack()
    finally:
        monkeypatch.delenv("GGUFSPEC_REPACK")
        lib.repack.cache_clear()
