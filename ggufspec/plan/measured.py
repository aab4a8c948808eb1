"""llama.cpp's measured buffers attributed to the plan's devices (pure), for `plan --measure`.

llama.cpp names a buffer by its buffer type: the device name for a GPU ("CUDA0", "Vulkan0"),
"RPC<n>[HOST:PORT]" for a worker's device, "CPU" / "CPU_Mapped" / "CUDA_Host" for host memory.
"""

from __future__ import annotations

from typing import Any

_FIELDS = {"model": "weights_bytes", "kv": "kv_bytes", "compute": "compute_bytes", "output": "compute_bytes"}


def device_of(buffer: str, devices: Any) -> str:
    """The plan device (its name) a buffer belongs to; host buffers go to "RAM"."""
    if "[" in buffer and buffer.endswith("]"):
        endpoint = buffer[buffer.index("[") + 1:-1]
        for d in devices:
            if d.kind == "rpc" and (d.name.endswith(endpoint) or f"{endpoint})" in d.name):
                return d.name
    for d in devices:
        if d.kind == "gpu" and buffer.split("_")[0] and f"({buffer}" in d.name:
            return d.name
    if buffer.startswith("CPU") or buffer.endswith("_Host"):
        return "RAM"
    gpus = [d.name for d in devices if d.kind == "gpu"]
    return gpus[0] if len(gpus) == 1 else "RAM"


def per_device(plan: Any, measured: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Plan device name -> measured {weights_bytes, kv_bytes, compute_bytes}, both models together.

    Only devices with a measured buffer appear. The output buffer (logits) counts as compute, as
    the estimate counts it.
    """
    out: dict[str, dict[str, int]] = {}
    for entry in measured.values():
        if not entry.get("same_placement", True):
            continue
        for kind, name, size in entry["measured"].buffers:
            dev = device_of(name, plan.devices)
            acc = out.setdefault(dev, {"weights_bytes": 0, "kv_bytes": 0, "compute_bytes": 0})
            acc[_FIELDS[kind]] += size
    return out
