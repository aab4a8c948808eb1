"""Temp files of atomic writes (a temp file beside the target, then a rename): each carries its
writer's process id, so one left by a killed writer can be told from one being written and swept."""

from __future__ import annotations

import os
import re
from pathlib import Path


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_stale(directory: Path, pattern: re.Pattern[str], *, glob: str = ".*") -> int:
    """Remove the files in `directory` whose name matches `pattern` (with a `pid` group) and whose
    process is gone; returns how many."""
    n = 0
    for p in directory.glob(glob):
        m = pattern.match(p.name)
        if m and int(m["pid"]) != os.getpid() and not pid_alive(int(m["pid"])):
            try:
                p.unlink(missing_ok=True)
                n += 1
            except OSError:  # not ours to remove
                continue
    return n
