"""The build: setuptools as pyproject.toml describes it, plus the draft controller compiled.

The controller (`ggufspec.loop.control` and the modules it is built from: pure Python, fully
typed) is compiled to C with mypyc, mypy's compiler: the same source, the same decisions, about a
third less of our Python a round (docs/bench/overhead.md). `GGUFSPEC_PURE=1` at install time
builds nothing and runs the source, as does `GGUFSPEC_PURE=1` at run time with a compiled
install (ggufspec/loop/compiled.py says when a compiled module is not used).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from setuptools import setup

LOOP = Path(__file__).resolve().parent / "ggufspec" / "loop"
# ggufspec/loop/compiled.py: the modules, their digests (read as a file: the package is not built yet)
spec = importlib.util.spec_from_file_location("_ggufspec_compiled", LOOP / "compiled.py")
compiled = importlib.util.module_from_spec(spec)
spec.loader.exec_module(compiled)

ext_modules = []
if not compiled.pure_asked():
    from mypyc.build import mypycify

    compiled.record(LOOP)  # the sources compiled: an edited one runs as source until compiled again
    for _, stray in compiled.strays(LOOP):  # an earlier build's, of a module no longer compiled
        stray.unlink()
    # (imports outside these modules are read, not checked: silent)
    ext_modules = mypycify(["--ignore-missing-imports", "--follow-imports=silent",
                            *(f"ggufspec/loop/{m}.py" for m in compiled.COMPILED)], group_name=compiled.GROUP)
    for ext in ext_modules:  # no C compiler: a warning, and the source runs (compiled.choose)
        ext.optional = True

setup(ext_modules=ext_modules)
