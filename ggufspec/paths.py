"""Where ggufspec keeps its files: one cache directory, and the places inside it.

The cache is GGUFSPEC_CACHE, else $XDG_CACHE_HOME/ggufspec, else ~/.cache/ggufspec. Nothing here
creates a directory; writers make what they need.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """The ggufspec cache: derived models, checksums, kernels, downloads."""
    root = os.environ.get("GGUFSPEC_CACHE")
    if root:
        return Path(root)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "ggufspec"


def kernels_dir() -> Path:
    """Where scripts/build_exact_kernels.sh puts its overlays, one per llama-cpp-python version."""
    return cache_dir() / "kernels"


def state_dir() -> Path:
    """What ggufspec learns on this machine and keeps between runs (the draft controller's
    estimates: ggufspec.remember): GGUFSPEC_STATE, else $XDG_STATE_HOME/ggufspec, else
    ~/.local/state/ggufspec. State, not cache: it is not rebuilt from anything, only learnt again."""
    root = os.environ.get("GGUFSPEC_STATE")
    if root:
        return Path(root)
    xdg = os.environ.get("XDG_STATE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".local" / "state") / "ggufspec"
