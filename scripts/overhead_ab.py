"""Our per-round overhead, two checkouts in one process: scripts/overhead.py's runners of each,
their generations interleaved, so the host's drift (a shared 2-core host swings 20-60% from one
process to the next) falls on both alike.

Separate processes alternated gave per-round ratios of 0.90-1.19 for one code against itself;
interleaved in one process, 0.98-1.02. The base checkout's package is copied to a temporary
folder as `ggufspec_base` (its imports rewritten) and its scripts/overhead.py loaded against it;
the working tree's runs as itself. Each part (the controller's choose and observe, the drafters,
the acceptance) is timed by a wrapper around it, the fake models' own seconds taken off, as
overhead.py takes them off the total.

    git worktree add /tmp/base <commit>
    .venv/bin/python scripts/overhead_ab.py /tmp/base --mode default:pays --reps 8

Prints, per part: the base's and this tree's microseconds a round (medians over repeats) and the
ratio this / base, its median and min-max over repeats (each repeat: >= --rounds rounds a side).
"""

from __future__ import annotations

import argparse
import collections
import functools
import importlib
import os
import re
import shutil
import statistics as st
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

# each part is timed by a wrapper set on its class: the source of the controller (GGUFSPEC_PURE,
# ggufspec.loop.compiled), so this compares code changes as Python, not the compiled build
os.environ["GGUFSPEC_PURE"] = "1"
HERE = Path(__file__).resolve().parents[1]
perf = time.perf_counter
PARTS = (  # (module, class, method, label)
    ("loop.control", "DraftController", "choose", "choose"),
    ("loop.control", "DraftController", "observe", "observe"),
    ("loop.model_drafter", "ModelDrafter", "propose", "model.propose"),
    ("loop.model_drafter", "ModelDrafter", "backlog", "model.backlog"),
    ("loop.lookup", "LookupDrafter", "propose", "lookup.propose"),
    ("loop.lookup", "LookupDrafter", "continue_after", "lookup.continue_after"),
    ("loop.round_runner", "RoundRunner", "_accept", "accept"),
)


def renamed_copy(base: Path, into: Path) -> None:
    """`base`/ggufspec copied to `into`/ggufspec_base, its imports of itself renamed."""
    dst = into / "ggufspec_base"
    shutil.copytree(base / "ggufspec", dst)
    for p in dst.rglob("*.py"):
        s = p.read_text()
        s2 = re.sub(r"\bggufspec\.", "ggufspec_base.", s)
        s2 = re.sub(r"^(\s*)from ggufspec import", r"\1from ggufspec_base import", s2, flags=re.M)
        s2 = re.sub(r"^(\s*)import ggufspec$", r"\1import ggufspec_base", s2, flags=re.M)
        if s2 != s:
            p.write_text(s2)


def load_script(script: Path, package: str) -> types.ModuleType:
    """A script of one checkout (scripts/overhead.py, scripts/coldstart.py), its imports pointed at `package`."""
    text = script.read_text().replace("from ggufspec.", f"from {package}.")
    m = types.ModuleType(f"{script.stem}_{package}")
    m.__file__ = str(script)
    sys.modules[m.__name__] = m
    exec(compile(text, str(script), "exec"), m.__dict__)  # noqa: S102 (our own script)
    return m


class Side:
    """One checkout's runner and its parts' seconds."""

    def __init__(self, package: str, overhead: types.ModuleType, mode: str, prompt_len: int, *, parts: bool) -> None:
        self.runner = overhead.Runner(mode, prompt_len)
        self.parts: collections.Counter[str] = collections.Counter()
        for module, cls, method, label in PARTS if parts else ():
            try:
                owner = getattr(importlib.import_module(f"{package}.{module}"), cls)
            except (ImportError, AttributeError):  # (an older checkout: the part lives elsewhere)
                owner = getattr(importlib.import_module(f"{package}.loop.drafters"), cls, None)
            if owner is not None and hasattr(owner, method):
                self._wrap(owner, method, label)

    def _own(self) -> float:
        return float(self.runner.target.own_s + self.runner.draft.own_s)

    def _wrap(self, owner: Any, method: str, label: str) -> None:
        f = getattr(owner, method)

        @functools.wraps(f)
        def timed(*args: Any, **kwargs: Any) -> Any:
            t, own = perf(), self._own()
            try:
                return f(*args, **kwargs)
            finally:
                self.parts[label] += perf() - t - (self._own() - own)

        setattr(owner, method, timed)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("base", type=Path, help="the other checkout (a git worktree)")
    ap.add_argument("--mode", default="default:pays", help="overhead.py's mode (default:pays, default:h200, K4, lookup:pays, alone)")
    ap.add_argument("--reps", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=1500, help="rounds each side runs in a repeat (whole generations)")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--prompt-len", type=int, default=200)
    ap.add_argument("--no-parts", action="store_true", help="the totals only (each part's wrapper adds ~1 us a call to both sides)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="overhead-ab-"))
    try:
        renamed_copy(args.base.resolve(), tmp)
        sys.path[:0] = [str(tmp), str(HERE)]
        sides = {
            "base": Side("ggufspec_base", load_script(args.base / "scripts" / "overhead.py", "ggufspec_base"),
                         args.mode, args.prompt_len, parts=not args.no_parts),
            "this": Side("ggufspec", load_script(HERE / "scripts" / "overhead.py", "ggufspec"), args.mode,
                         args.prompt_len, parts=not args.no_parts),
        }
        clocks = [importlib.import_module(f"{p}.loop.clock") for p in ("ggufspec_base", "ggufspec")]
        real_now = [c.now for c in clocks]
        for s in sides.values():
            s.runner.generation(args.max_tokens)  # untimed: the controller calibrates, numpy warms
        res: dict[str, dict[str, list[float]]] = {k: collections.defaultdict(list) for k in sides}
        for rep in range(args.reps):
            totals = {k: [0.0, 0] for k in sides}
            for s in sides.values():
                s.parts.clear()
            order = ("base", "this") if rep % 2 else ("this", "base")
            while min(t[1] for t in totals.values()) < args.rounds:
                for k in order:  # one generation each, in turn
                    wall, rounds, _ = sides[k].runner.generation(args.max_tokens)
                    totals[k][0] += wall
                    totals[k][1] += rounds
            for k, s in sides.items():
                n = totals[k][1]
                res[k]["total"].append(totals[k][0] / n * 1e6)
                for label, v in s.parts.items():
                    res[k][label].append(v / n * 1e6)
        for c, now in zip(clocks, real_now):
            c.now = now
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"mode {args.mode}, {args.reps} repeats of >= {args.rounds} rounds a side; base {args.base}")
    print("| part | base us a round | this us a round | this / base, median [min-max] |")
    print("|---|---:|---:|---|")
    for label in ["total", *[p[3] for p in PARTS]]:
        b, w = res["base"].get(label), res["this"].get(label)
        if not b or not w:
            continue
        r = sorted(x / y for x, y in zip(w, b))
        print(f"| {label} | {st.median(b):.1f} | {st.median(w):.1f} | {st.median(r):.3f} [{r[0]:.3f}-{r[-1]:.3f}] |")


if __name__ == "__main__":
    main()
