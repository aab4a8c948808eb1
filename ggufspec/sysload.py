"""How busy the machine is right now: load average and CPU pressure (PSI). A shared machine
slows every timing; `run --compare` and the bench report these beside their figures."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def load_now() -> dict[str, Any]:
    """Load average (1, 5, 15 min) and CPU pressure (/proc/pressure/cpu "some": the share of time
    at least one runnable task waited for a CPU, averaged over 10 s and 60 s, in percent), as far
    as this system reports them; an empty dict where it reports neither."""
    out: dict[str, Any] = {}
    try:
        out["loadavg"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        pass
    try:
        some = Path("/proc/pressure/cpu").read_text().splitlines()[0].split()
        out["cpu_pressure_avg10"] = float(some[1].split("=")[1])
        out["cpu_pressure_avg60"] = float(some[2].split("=")[1])
    except (OSError, IndexError, ValueError):
        pass
    return out


def describe_load(load: dict[str, Any] | None) -> str:
    """One phrase for a report: "load average 2.10 1.50 1.20, CPU pressure 35% (10 s) / 30% (60 s)"."""
    if not load:
        return "load average unknown"
    parts = []
    if "loadavg" in load:
        parts.append("load average " + " ".join(f"{x:.2f}" for x in load["loadavg"]))
    if "cpu_pressure_avg10" in load:
        parts.append(f"CPU pressure {load['cpu_pressure_avg10']:.0f}% (10 s) / {load.get('cpu_pressure_avg60', 0.0):.0f}% (60 s)")
    return ", ".join(parts) or "load average unknown"
