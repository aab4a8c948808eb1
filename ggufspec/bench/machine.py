"""The machine a bench ran on: CPU, cores, RAM, GPUs, versions, and the load around the run
(load average and CPU pressure: a busy shared machine slows every figure)."""

from __future__ import annotations

import os
import platform

import ggufspec.loop
from ggufspec.bench.native import find_native
from ggufspec.hardware import cpu_model, system_info
from ggufspec.sysload import load_now

__all__ = ["load_now", "machine_info"]  # load_now lives in ggufspec.sysload (run --compare uses it too)


def machine_info(*, n_threads: int | None = None) -> dict:
    """CPU model, cores, RAM, GPUs, OS and the versions that matter."""
    cpu = cpu_model()
    system = system_info()
    versions = {"python": platform.python_version()}
    for mod in ("ggufspec", "llama_cpp", "numpy", "matplotlib", "torch", "transformers"):
        try:
            versions[mod] = __import__(mod).__version__
        except Exception:
            pass
    native = find_native()
    if native is not None and (native / "VERSION").is_file():
        versions["native_llama_cpp_from"] = "llama-cpp-python " + (native / "VERSION").read_text().strip()
    return {
        "cpu": cpu,
        "physical_cores": system.physical_cores,
        "logical_cores": system.logical_cores,
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "ram_bytes": system.ram_total_bytes,
        "gpus": [{"name": g.name, "total_bytes": g.total_bytes} for g in system.gpus],
        "os": platform.platform(),
        "threads": n_threads,
        "batch_invariant_kernels": _batch_invariant_kernels(),
        "controller": ggufspec.loop.RUNS,  # compiled (mypyc), or its source: ggufspec.loop.compiled
        "load_end": load_now(),
        "versions": versions,
    }


def _batch_invariant_kernels() -> bool | None:
    try:
        from ggufspec.llama.lib import batch_invariant_kernels

        return batch_invariant_kernels()
    except Exception:
        return None
