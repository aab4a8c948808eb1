"""Which of the loop's modules run compiled, and when their source runs instead.

The draft controller (the modules in `COMPILED`: pure Python, fully typed) is compiled to C by
mypyc at install time (setup.py): the same source and the same decisions, with about a third less
of our Python a round (docs/bench/overhead.md). Compiled, its classes keep no instance `__dict__`,
and their methods cannot be replaced on an instance (subclass them instead).

The source runs instead of the compiled modules when
  - `GGUFSPEC_PURE=1` is set (profiling with cProfile, which cannot see inside compiled code);
  - a source file differs from the one compiled (an editable checkout edited or checked out after
    `pip install -e .`): one line on stderr says so, and the next install compiles it again.
A loop module compiled by an earlier build but not named in `COMPILED` (a build of a longer list,
or a module since dropped from it) always runs as source: Python would import its stale extension
module ahead of its .py (`strays`; setup.py deletes them).
setup.py keeps `compiled_sources.json` (each module's SHA-256, `record`) beside the modules it compiles;
all of them run from one kind or the other, never a mix (they call each other natively).
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

# the controller and what it is built from (setup.py compiles these)
# (not ggufspec.loop.late: mypyc's classes derived from an ABC share its registry, so a dict
# would pass for its Mapping, LateScores)
COMPILED = ("controlsettings", "estimates", "rounds", "costmodel", "throughput", "catchup", "exploration",
            "hold", "checks", "extension", "control")
SOURCES_JSON = "compiled_sources.json"
GROUP = "ggufspec_loop"  # mypyc's shared library of the group: ggufspec_loop__mypyc, beside the package
PACKAGE = "ggufspec.loop"


def pure_asked() -> bool:
    """`GGUFSPEC_PURE` set (not to 0): the source runs, and an install compiles nothing."""
    return os.environ.get("GGUFSPEC_PURE", "") not in ("", "0")


def digests(folder: Path) -> dict[str, str]:
    """Each compiled module's source SHA-256, as `record` keeps it."""
    return {m: hashlib.sha256((folder / f"{m}.py").read_bytes()).hexdigest() for m in COMPILED}


def record(folder: Path) -> None:
    """Keep the digests of the sources about to be compiled (setup.py), atomically, for `stale`."""
    tmp = folder / f".{SOURCES_JSON}.tmp"  # (ggufspec.atomic is not importable in the build)
    tmp.write_text(json.dumps(digests(folder), indent=1, sort_keys=True) + "\n")
    os.replace(tmp, folder / SOURCES_JSON)


def _extensions(folder: Path) -> list[tuple[str, Path]]:
    """(module, file) for each extension module file in `folder`."""
    suffixes = importlib.machinery.EXTENSION_SUFFIXES
    return [(p.name[:-len(s)], p) for p in folder.iterdir() for s in suffixes if p.name.endswith(s)]


def _present(folder: Path) -> list[str]:
    """The compiled modules with an extension module in `folder`."""
    found = {m for m, _ in _extensions(folder)}
    return [m for m in COMPILED if m in found]


def built(folder: Path) -> bool:
    """Whether every compiled module and their shared library are installed (`folder`: the modules')."""
    return len(_present(folder)) == len(COMPILED) and importlib.util.find_spec(f"{GROUP}__mypyc") is not None


def stale(folder: Path) -> list[str]:
    """The compiled modules whose source differs from the one compiled (all, if unrecorded)."""
    try:
        recorded = json.loads((folder / SOURCES_JSON).read_text())
    except (OSError, ValueError):
        return list(COMPILED)
    now = digests(folder)
    return [m for m in COMPILED if recorded.get(m) != now[m]]


def strays(folder: Path) -> list[tuple[str, Path]]:
    """(module, file): the extension modules in `folder` of a .py beside them that `COMPILED` does not name."""
    return sorted((m, p) for m, p in _extensions(folder) if m not in COMPILED and (folder / f"{m}.py").exists())


class _Source(importlib.abc.MetaPathFinder):
    """Finds `ggufspec.loop.<m>` of `names` as its .py source, ahead of the compiled module."""

    def __init__(self, folder: Path, names: Sequence[str] = COMPILED) -> None:
        self.folder, self.names = folder, frozenset(names)

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
                  ) -> importlib.machinery.ModuleSpec | None:
        package, _, name = fullname.rpartition(".")
        if package != PACKAGE or name not in self.names:
            return None
        return importlib.util.spec_from_file_location(fullname, self.folder / f"{name}.py")


def choose(folder: Path) -> str:
    """Called once, as `ggufspec.loop` is imported (before any of its modules): 'compiled',
    'source' (none built) or 'source (...)' where the source is made to run instead."""
    extra = strays(folder)
    if extra:  # (whatever runs for the others)
        sys.meta_path.insert(0, _Source(folder, [m for m, _ in extra]))
    if not built(folder):  # (none, or a build that failed part-way: optional extensions)
        if not _present(folder):
            return "source"
        sys.meta_path.insert(0, _Source(folder))
        return "source (a partial build)"
    if pure_asked():
        why = "GGUFSPEC_PURE"
    else:
        changed = stale(folder)
        if not changed:
            return "compiled"
        why = f"{changed[0]}.py changed"
        print(f"ggufspec: the compiled controller is older than ggufspec/loop/{changed[0]}.py; running "
              "its source (pip install -e . compiles it again)", file=sys.stderr)
    sys.meta_path.insert(0, _Source(folder))
    return f"source ({why})"
