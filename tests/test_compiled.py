"""The draft controller compiled by mypyc (setup.py, ggufspec.loop.compiled): installed compiled, it
decides exactly as its source, and an edited source runs as source until compiled again."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import ggufspec.loop
from ggufspec.loop import compiled, control

ROOT = Path(__file__).resolve().parents[1]
LOOP = Path(ggufspec.loop.__file__).parent


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "GGUFSPEC_PURE"}
    return {**env, **extra}


def _needs_build() -> None:
    if not compiled.built(LOOP):
        pytest.skip("installed without the compiled controller (GGUFSPEC_PURE=1, or no C compiler)")


def test_the_installed_controller_is_compiled() -> None:
    _needs_build()
    if compiled.pure_asked():
        pytest.skip("GGUFSPEC_PURE is set: the source runs")
    assert ggufspec.loop.RUNS == "compiled"
    assert Path(control.__file__).name.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))
    assert compiled.stale(LOOP) == []


def test_compiled_and_source_decide_alike() -> None:
    # every choice and every round's outcome over 12 generations of each regime, on the simulated clock
    _needs_build()
    cmd = [sys.executable, str(ROOT / "scripts" / "overhead.py"), "--decisions", "12",
           "--modes", "default:pays", "default:h200", "lookup:pays"]
    runs = {}
    for pure in ("0", "1"):
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=_env(GGUFSPEC_PURE=pure))
        assert out.returncode == 0, out.stderr
        runs[pure] = [line for line in out.stdout.splitlines() if "choices)" in line]
    assert len(runs["0"]) == 3 and runs["0"] == runs["1"], runs


def _copy_package(dest: Path) -> Path:
    """The installed package and mypyc's shared library, copied under `dest` (importable from there)."""
    shutil.copytree(LOOP.parent, dest / "ggufspec", ignore=shutil.ignore_patterns("__pycache__"))
    group = importlib.util.find_spec(f"{compiled.GROUP}__mypyc")
    assert group is not None and group.origin is not None
    shutil.copy2(group.origin, dest)
    return dest / "ggufspec" / "loop"


def _runs(where: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Imports the controller from the copy in `where` (-S: no editable install's finder to fall back on)."""
    code = "import ggufspec.loop as l, ggufspec.loop.control as c; print(l.RUNS); print(c.__file__)"
    path = os.pathsep.join([str(where), *(p for p in sys.path if p.endswith("site-packages"))])
    return subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=60, cwd=where,
                          env=_env(PYTHONPATH=path, **env))


def test_an_edited_source_runs_as_source_with_one_line_saying_so(tmp_path: Path) -> None:
    _needs_build()
    loop = _copy_package(tmp_path)
    out = _runs(tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == "compiled" and out.stderr == ""

    with open(loop / "hold.py", "a") as f:
        f.write("\n# edited\n")
    out = _runs(tmp_path)
    assert out.returncode == 0, out.stderr
    runs, file = out.stdout.splitlines()
    assert runs == "source (hold.py changed)" and file == str(loop / "control.py")  # all of them, not a mix
    assert out.stderr.splitlines() == [
        "ggufspec: the compiled controller is older than ggufspec/loop/hold.py; running its source "
        "(pip install -e . compiles it again)"]


def test_gguf_pure_runs_the_source_and_a_partial_build_too(tmp_path: Path) -> None:
    _needs_build()
    loop = _copy_package(tmp_path)
    out = _runs(tmp_path, GGUFSPEC_PURE="1")
    assert out.stdout.splitlines() == ["source (GGUFSPEC_PURE)", str(loop / "control.py")] and out.stderr == ""

    for so in tmp_path.glob(f"{compiled.GROUP}__mypyc*"):  # the shared library failed to build
        so.unlink()
    out = _runs(tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["source (a partial build)", str(loop / "control.py")]


def test_stale_names_each_changed_module(tmp_path: Path) -> None:
    for m in compiled.COMPILED:
        (tmp_path / f"{m}.py").write_text(f"# {m}\n")
    assert compiled.stale(tmp_path) == list(compiled.COMPILED)  # nothing recorded: all
    compiled.record(tmp_path)
    assert json.loads((tmp_path / compiled.SOURCES_JSON).read_text()) == compiled.digests(tmp_path)
    assert compiled.stale(tmp_path) == [] and [p.name for p in tmp_path.glob(".*")] == []  # no temporary left
    (tmp_path / "rounds.py").write_text("# rounds, edited\n")
    assert compiled.stale(tmp_path) == ["rounds"]
    assert not compiled.built(tmp_path)  # sources only


def test_a_stray_extension_module_of_a_module_not_compiled_never_runs(tmp_path: Path) -> None:
    # an earlier build of a longer COMPILED list left lookup's extension module behind: Python
    # would import it ahead of lookup.py (here it is not even a shared library: the import would fail)
    shutil.copytree(LOOP.parent, tmp_path / "ggufspec", ignore=shutil.ignore_patterns("__pycache__"))
    loop = tmp_path / "ggufspec" / "loop"
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    (loop / f"lookup{suffix}").write_bytes(b"not a shared library")
    assert compiled.strays(loop) == [("lookup", loop / f"lookup{suffix}")]
    code = "import ggufspec.loop.lookup as m; print(m.__file__)"
    path = os.pathsep.join([str(tmp_path), *(p for p in sys.path if p.endswith("site-packages"))])
    for pure in ("0", "1"):
        out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=60,
                             cwd=tmp_path, env=_env(PYTHONPATH=path, GGUFSPEC_PURE=pure))
        assert out.returncode == 0, out.stderr
        assert out.stdout.splitlines() == [str(loop / "lookup.py")]
    assert compiled.strays(LOOP) == []  # (the install's own folder: none)
