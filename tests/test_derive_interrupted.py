"""Deriving an embedded model's encoding: an interrupted or killed derivation leaves no temp file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ggufspec.errors import UserError
from ggufspec.ggufinfo import read_model_info
from ggufspec.models import embedded

# Registers a tiny model as `embedded:tiny:F32` and makes llama.cpp's quantizer slow: it writes its
# temp file, then does not return for a minute, like a big model being re-encoded.
_SLOW_DERIVATION = """
import sys, time
from pathlib import Path
import ggufspec.llama.lib  # first, as everywhere (kernels overlay)
import llama_cpp
from ggufspec.models import embedded
from ggufspec.errors import UserError

src = Path(sys.argv[1])
embedded.EMBEDDED["tiny"] = embedded.EmbeddedModel("tiny", "-", "F32", lambda: src, "test")
real = llama_cpp.llama_model_quantize

def slow(*args):
    rc = real(*args)
    time.sleep(60)
    return rc

llama_cpp.llama_model_quantize = slow
print(embedded.resolve_embedded("tiny", "Q8_0"))
"""


def _temps(cache: Path) -> list[Path]:
    return sorted((cache / "embedded").glob(".*.tmp")) if (cache / "embedded").is_dir() else []


def _start_slow_derivation(src: Path, cache: Path) -> subprocess.Popen:
    """A derivation in a subprocess, returned once its temp file is on disk."""
    env = dict(os.environ, GGUFSPEC_CACHE=str(cache))
    proc = subprocess.Popen([sys.executable, "-c", _SLOW_DERIVATION, str(src)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while not _temps(cache):
        if proc.poll() is not None:
            pytest.fail(f"the derivation ended before writing its temp file: {proc.communicate()}")
        time.sleep(0.02)
    return proc


@pytest.fixture
def tiny_embedded(tiny_bytes_target: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`embedded:tiny:*` backed by a tiny F32 model, with an empty cache; returns the cache."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("GGUFSPEC_CACHE", str(cache))
    monkeypatch.setitem(embedded.EMBEDDED, "tiny",
                        embedded.EmbeddedModel("tiny", "-", "F32", lambda: tiny_bytes_target, "test"))
    return cache


def _usable(cache: Path) -> None:
    derived = embedded.resolve_embedded("tiny", "Q8_0")
    assert derived.parent == cache / "embedded"
    assert read_model_info(derived).file_type == "Q8_0"
    assert _temps(cache) == []


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_while_deriving_removes_the_temp_file(tiny_bytes_target: Path, tiny_embedded: Path,
                                                       signum: int) -> None:
    proc = _start_slow_derivation(tiny_bytes_target, tiny_embedded)
    temp = _temps(tiny_embedded)[0]
    assert temp.name.endswith(f".{proc.pid}.tmp")
    proc.send_signal(signum)
    _, err = proc.communicate()
    if signum == signal.SIGTERM:
        assert proc.returncode == -signal.SIGTERM, err  # it still dies by the signal
    else:
        assert proc.returncode != 0 and "KeyboardInterrupt" in err
    assert _temps(tiny_embedded) == []
    assert list((tiny_embedded / "embedded").glob("*.gguf")) == []  # nothing that looks finished
    _usable(tiny_embedded)


def test_temp_files_of_killed_processes_are_removed_by_the_next_derivation(
        tiny_bytes_target: Path, tiny_embedded: Path) -> None:
    proc = _start_slow_derivation(tiny_bytes_target, tiny_embedded)
    proc.kill()  # SIGKILL: no chance to clean up
    proc.communicate()
    stale = _temps(tiny_embedded)
    assert len(stale) == 1 and stale[0].name.endswith(f".{proc.pid}.tmp")
    alive = tiny_embedded / "embedded" / f".other.gguf.{os.getppid()}.tmp"  # a running derivation's
    alive.write_bytes(b"")
    embedded.resolve_embedded("tiny", "Q8_0")
    assert _temps(tiny_embedded) == [alive]
    alive.unlink()
    _usable(tiny_embedded)


def test_a_failed_derivation_is_a_user_error_and_leaves_nothing(tiny_embedded: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + bytes(60))  # a GGUF magic and nothing llama.cpp can load
    monkeypatch.setitem(embedded.EMBEDDED, "broken",
                        embedded.EmbeddedModel("broken", "-", "F32", lambda: broken, "test"))
    with pytest.raises(UserError, match="llama.cpp failed to quantize broken.gguf to Q8_0"):
        embedded.resolve_embedded("broken", "Q8_0")
    assert _temps(tiny_embedded) == [] and list((tiny_embedded / "embedded").glob("*.gguf")) == []
