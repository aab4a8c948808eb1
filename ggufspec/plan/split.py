"""Which device each layer of a model lands on, as llama.cpp decides it (pure).

llama.cpp (src/llama-model.cpp, load_tensors) offloads the last `n_gpu_layers` of the n_layer + 1
slots (blocks, then the output layer) and spreads them over the model's devices by cumulative
proportion:

    split    = tensor_split, or each device's free memory when it is all zero / not given
    cum[d]   = (split[0] + ... + split[d]) / sum(split)
    i_start  = n_layer + 1 - ngl
    device(il) = first d with cum[d] > (il - i_start) / ngl       for il >= i_start, else the CPU

Devices are in the model's order: RPC workers first, then GPUs (src/llama.cpp).
"""

from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True, kw_only=True)
class DeviceLayers:
    """One device and how many layers (blocks and the output layer) of each model it holds."""

    name: str  # llama.cpp's device name: "CPU", "CUDA0", "RPC0", ...
    kind: str  # "cpu" | "gpu" | "rpc"
    target_layers: int
    draft_layers: int

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "kind": self.kind, "target_layers": self.target_layers,
                "draft_layers": self.draft_layers}


def layer_devices(*, n_layer: int, n_gpu_layers: int, split: Sequence[float]) -> tuple[int, ...]:
    """Per slot (blocks 0..n_layer-1, then the output layer): the device position, -1 = CPU.

    Args:
        n_layer: the model's blocks.
        n_gpu_layers: llama.cpp's count (-1 or more than n_layer + 1: all).
        split: one weight per device in the model's order (tensor_split, else free memory).
    """
    slots = n_layer + 1
    ngl = slots if n_gpu_layers < 0 else min(n_gpu_layers, slots)
    if not split or ngl == 0:
        return (-1,) * slots
    if sum(split) <= 0:
        split = [1.0] * len(split)
    # in float32 as llama.cpp computes it, so that a boundary falls where llama.cpp puts it
    cum, acc = [], 0.0
    for s in split:
        acc = _f32(acc + _f32(s))
        cum.append(acc)
    cum = [_f32(c / acc) for c in cum]
    start = slots - ngl
    out = []
    for il in range(slots):
        if il < start:
            out.append(-1)
        else:
            out.append(min(bisect.bisect_right(cum, _f32((il - start) / ngl)), len(split) - 1))
    return tuple(out)


def _f32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


def device_layers(*, devices: Sequence[tuple[str, str, int]], target: tuple[int, ...],
                  draft: tuple[int, ...] | None) -> tuple[DeviceLayers, ...]:
    """Layers per device for a target and a draft placed by `layer_devices`.

    Args:
        devices: (name, kind, free bytes) of the model's devices, in its order.
        target / draft: `layer_devices` of each model (draft None: no draft model).

    Returns:
        One entry per device, then the CPU (always listed).
    """
    def count(slots: tuple[int, ...] | None, pos: int) -> int:
        return 0 if slots is None else sum(1 for s in slots if s == pos)

    out = [DeviceLayers(name=name, kind=kind, target_layers=count(target, i), draft_layers=count(draft, i))
           for i, (name, kind, _) in enumerate(devices)]
    out.append(DeviceLayers(name="CPU", kind="cpu", target_layers=count(target, -1), draft_layers=count(draft, -1)))
    return tuple(out)


def effective_split(tensor_split: Sequence[float] | None, free_bytes: Sequence[int]) -> tuple[float, ...]:
    """The proportions llama.cpp uses: `tensor_split` unless absent or all zero, else free memory."""
    if tensor_split and any(x > 0 for x in tensor_split):
        return tuple(float(x) for x in tensor_split[:len(free_bytes)]) + (0.0,) * max(0, len(free_bytes) - len(tensor_split))
    return tuple(float(f) for f in free_bytes)
