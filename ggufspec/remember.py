"""What the draft controller learnt on this machine, kept between runs (`remember`, --remember).

A pair's controller learns what each source costs and how often its drafts are kept, and is kept
across the pair's generations (ggufspec.loop.control). A process that generates once, as
`ggufspec run` does, met it fresh every time: its first rounds measure what an earlier run had
measured already (a draft model that cannot pay here is tried, its prompt prefilled, its first K
probed), and on a quantized target on two CPU cores that costs the first generation 2-5% against
the target alone (docs/bench/remember-2026-11-29). With `PairSettings.remember` the pair's
controller is read when the pair loads and written back when it closes, so a run starts where the
last one on the same pair and machine stopped, as the next generation of one process would.

The file is named by a hash of what changes what the controller measures: the model files (path,
size, modification time), the drafters in order, the load, context and lookup settings and the
layers each device took, the controller's settings, the host (name, CPU, core count, llama.cpp's
devices), the versions
(Python, llama-cpp-python, ggufspec) and the controller's code (the sources of ggufspec.loop).
Any change meets a fresh controller, under another name; the state directory is
ggufspec.paths.state_dir. A file no run has written for `FORGET_DAYS` (90) is removed at the next
write (the other versions' and settings' files would otherwise stay for good).

Format: a pickle of {"identity": ..., "controller": DraftController}. Pickle, not JSON: the
controller's state is ~40 attributes over 8 classes (windows of timing samples stamped with round
numbers, discounted counts, the exploration's schedule), and a JSON codec would be a second
description of each, kept in step by hand; the code hash in the name retires a file whenever
those classes change. Unpickling runs what the file's writer chose, so this reads only files the
user owns, in their own state directory (the trust ggufspec already gives its cache directory,
whose kernel overlays are shared libraries it loads); a file another user owns is ignored. A file that does not load (cut
short, another format, not ours) is ignored: the controller starts fresh and replaces it at close.
A pair left by an exception (a Ctrl-C may land inside the controller's bookkeeping) writes
nothing: the next run starts from the last clean run's state.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import pickle
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path
from typing import Any

import ggufspec.loop
from ggufspec.atomic import write_atomic
from ggufspec.hardware import cpu_model
from ggufspec.llama.kernels import installed_version
from ggufspec.loop.control import DraftController
from ggufspec.loop.controlsettings import ControlSettings
from ggufspec.paths import state_dir
from ggufspec.settings import PairSettings

FORMAT = 1
FORGET_DAYS = 90  # a controller file no run wrote for this long is removed at the next write


@functools.cache
def code_digest() -> str:
    """A hash of the controller's code: every source file of ggufspec.loop."""
    h = hashlib.sha256()
    for path in sorted(Path(ggufspec.loop.__file__).parent.glob("*.py")):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def _file(path: Path) -> list[Any]:
    st = path.stat()
    return [str(path.resolve()), st.st_size, st.st_mtime_ns]


def identity(*, target: Path, drafts: Sequence[Path | None], settings: PairSettings, control: ControlSettings,
             devices: Sequence[Any] = (), placement: Sequence[Any] = (),
             llama_version: str | None = None) -> dict[str, Any]:
    """What a remembered controller must have been learnt on (module docstring); `drafts`: each
    drafter's file in order, None for prompt lookup; `devices`: llama.cpp's (ggufspec.hardware.Device);
    `placement`: each device's layers of the two models as loaded (ggufspec.plan.split.DeviceLayers:
    --ngl auto's choice, which free memory decides)."""
    return {
        "format": FORMAT,
        "target": _file(target),
        "drafts": [_file(p) if p is not None else "lookup" for p in drafts],
        "settings": repr(replace(settings, offline=False, remember=False)),
        "control": repr(control),
        "host": [platform.node(), platform.machine(), cpu_model(), os.cpu_count()],
        "devices": [f"{d.name} {d.description} {d.total_bytes}" for d in devices],
        "placement": [f"{p.name} {p.target_layers} {p.draft_layers}" for p in placement],
        "versions": [platform.python_version(), llama_version, _version()],
        "code": code_digest(),
    }


def _version() -> str | None:
    try:
        return metadata.version("ggufspec")
    except metadata.PackageNotFoundError:  # (run from a source tree never installed)
        return None


def state_path(ident: dict[str, Any]) -> Path:
    """The file of the controller learnt on `ident`."""
    digest = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:20]
    return state_dir() / "controller" / f"{digest}.pickle"


def _owned(st: os.stat_result) -> bool:
    """Is the file of this `stat` the user's own (always, where there are no user ids)?"""
    return not hasattr(os, "getuid") or st.st_uid == os.getuid()


def load(ident: dict[str, Any]) -> DraftController | None:
    """The controller remembered for `ident`, or None (never run so, or a file that does not load)."""
    path = state_path(ident)
    try:
        if not _owned(path.stat()):
            return None  # (another user's file: unpickling it would run what they chose)
        data = pickle.loads(path.read_bytes())
    except Exception:  # (missing, unreadable, cut short, another version's classes: start fresh)
        return None
    if not isinstance(data, dict) or data.get("identity") != ident:
        return None
    controller = data.get("controller")
    ok = isinstance(controller, DraftController) and controller.timed and repr(controller.settings) == ident["control"]
    return controller if ok else None


def save(ident: dict[str, Any], controller: DraftController) -> Path | None:
    """Write `controller` for `ident`, atomically; a directory that cannot be written is said in one
    line on stderr (the run goes on: nothing but the head start is lost). Returns the file. The
    user's files there that no run wrote for `FORGET_DAYS` go (other versions', other settings')."""
    path = state_path(ident)
    try:
        blob = pickle.dumps({"identity": ident, "controller": controller}, protocol=pickle.HIGHEST_PROTOCOL)
        path.parent.mkdir(parents=True, exist_ok=True)
        written = write_atomic(path, blob)
    except OSError as e:
        sys.stderr.write(f"ggufspec: could not keep what the draft controller learnt in {path.parent} "
                         f"({e.strerror or e}); set GGUFSPEC_STATE to a writable folder, or give --no-remember\n")
        return None
    forget_old(path.parent, keep=path)
    return written


def forget_old(folder: Path, *, keep: Path, days: float = FORGET_DAYS) -> list[Path]:
    """Remove the user's controller files in `folder` last written more than `days` ago (not
    `keep`); returns them. Each run rewrites its own file, so only unused ones age."""
    gone = []
    cutoff = time.time() - days * 86400
    for p in folder.glob("*.pickle"):
        try:
            st = p.stat()
            if p != keep and st.st_mtime < cutoff and _owned(st):
                p.unlink()
                gone.append(p)
        except OSError:  # (gone already, or not ours to remove)
            continue
    return gone


@dataclass
class Kept:
    """A pair's controller with what it was learnt on (`identity`): read by `recall`, written back
    by `save`. `loaded`: the rounds it had observed when read (0: it started fresh); `saved`: when
    last written (or read)."""

    identity: dict[str, Any]
    controller: DraftController
    loaded: int
    saved: int

    def save(self) -> None:
        """Write the controller if it learnt anything since it was read or last written."""
        if self.controller.round > self.saved:
            save(self.identity, self.controller)
            self.saved = self.controller.round


def recall(*, target: Path, drafts: Sequence[Path | None], settings: PairSettings, control: ControlSettings,
           devices: Sequence[Any] = (), placement: Sequence[Any] = ()) -> Kept:
    """The controller earlier runs left for this pair and machine (`identity`'s arguments), or a
    fresh one of settings `control`, to be written back with `Kept.save`."""
    ident = identity(target=target, drafts=drafts, settings=settings, control=control, devices=devices,
                     placement=placement, llama_version=installed_version())
    controller = load(ident)
    rounds = controller.round if controller is not None else 0
    return Kept(ident, controller or DraftController(settings=control), rounds, rounds)

