"""The machine: GPUs with their free memory, RAM, physical cores; and memory sizes as users write them.

GPUs come from NVML (`nvidia-ml-py`, imported only when asked; no library or no driver means no
NVIDIA GPU), else from `nvidia-smi`, plus AMD GPUs from sysfs (`mem_info_vram_*` of the amdgpu
driver). A `--vram 12GiB,8GiB` budget replaces detection, so planning works on any machine.

NVML lists GPUs in PCI bus order; CUDA (and so llama.cpp) numbers them fastest first unless
CUDA_DEVICE_ORDER=PCI_BUS_ID is set. `CUDA_VISIBLE_DEVICES` given as indices is honoured.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ggufspec.errors import UserError
from ggufspec.rpc import parse_endpoints

KiB, MiB, GiB, TiB = 1 << 10, 1 << 20, 1 << 30, 1 << 40

_UNITS = {
    "": 1, "b": 1,
    "k": KiB, "kib": KiB, "kb": 1000,
    "m": MiB, "mib": MiB, "mb": 1000**2,
    "g": GiB, "gib": GiB, "gb": 1000**3,
    "t": TiB, "tib": TiB, "tb": 1000**4,
}
_SIZE = re.compile(r"^\s*([+-]?\d+(?:\.\d*)?|[+-]?\.\d+)\s*([a-z]*)\s*$", re.I)


@dataclass(frozen=True, kw_only=True)
class Gpu:
    """One GPU and its memory in bytes."""

    index: int  # position in the list llama.cpp's tensor_split refers to
    name: str
    total_bytes: int
    free_bytes: int
    vendor: Literal["nvidia", "amd", "budget"]
    source: Literal["nvml", "nvidia-smi", "sysfs", "budget"]


@dataclass(frozen=True, kw_only=True)
class SystemInfo:
    """GPUs, RAM and cores of this machine (or of a `--vram` budget)."""

    gpus: tuple[Gpu, ...]
    ram_total_bytes: int
    ram_available_bytes: int
    physical_cores: int
    logical_cores: int


# ---- sizes ---------------------------------------------------------------------------------


def parse_size(text: str) -> int:
    """Parse one memory size: `8GiB`, `512 MiB`, `1.5gib`, `8GB` (10^9), `1073741824` (bytes).

    Args:
        text: a number with an optional unit B, KB, MB, GB, TB (powers of 1000), KiB, MiB, GiB,
            TiB or K, M, G, T (powers of 1024), any case.

    Returns:
        The size in bytes.

    Raises:
        UserError: not a size, an unknown unit, or a negative number.
    """
    m = _SIZE.match(text)
    if not m:
        raise UserError(f"{text!r} is not a memory size; write it like 8GiB, 512MiB or 12GB")
    number, unit = m.group(1), m.group(2).lower()
    if unit not in _UNITS:
        raise UserError(f"unknown unit {m.group(2)!r} in {text!r}; use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB")
    value = float(number)
    if value < 0:
        raise UserError(f"memory size {text!r} is negative; give a size of 0 or more, like 8GiB")
    return int(round(value * _UNITS[unit]))


def parse_sizes(text: str) -> tuple[int, ...]:
    """Parse a comma-separated list of sizes, one per GPU: `12GiB,8GiB`.

    Args:
        text: sizes as `parse_size` reads them, separated by commas.

    Returns:
        The sizes in bytes, in order.

    Raises:
        UserError: an empty list or any item `parse_size` refuses.
    """
    items = [s for s in text.split(",")]
    if not text.strip() or any(not s.strip() for s in items):
        raise UserError(f"{text!r} is not a list of memory sizes; write it like 12GiB,8GiB")
    return tuple(parse_size(s) for s in items)


def format_bytes(n: int | float) -> str:
    """Bytes in binary units for people: `1.50 GiB`, `97.3 MiB`, `512 B`."""
    sign = "-" if n < 0 else ""
    n = abs(n)
    for unit, size in (("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= size:
            v = n / size
            return f"{sign}{v:.2f} {unit}" if v < 100 else f"{sign}{v:.1f} {unit}"
    return f"{sign}{int(n)} B"


# ---- detection -----------------------------------------------------------------------------


def _visible(indices: list[int]) -> list[int]:
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is None:
        return indices
    parts = [p.strip() for p in env.split(",") if p.strip()]
    if not parts:
        return []
    if all(p.isdigit() for p in parts):
        wanted = [int(p) for p in parts]
        return [i for i in wanted if i in indices]
    return indices  # UUIDs or MIG names: leave the list as NVML gives it


def _nvml_gpus() -> list[Gpu]:
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return []
    try:
        count = pynvml.nvmlDeviceGetCount()
        out: list[Gpu] = []
        for pos, i in enumerate(_visible(list(range(count)))):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            name = pynvml.nvmlDeviceGetName(h)
            if isinstance(name, bytes):
                name = name.decode(errors="replace")
            out.append(Gpu(index=pos, name=str(name), total_bytes=int(mem.total), free_bytes=int(mem.free),
                           vendor="nvidia", source="nvml"))
        return out
    except Exception:
        return []
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def _smi_gpus() -> list[Gpu]:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return []
    try:
        out = subprocess.run(
            [exe, "--query-gpu=index,name,memory.total,memory.free", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    rows: dict[int, tuple[str, int, int]] = {}
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 4:
            continue
        try:
            rows[int(parts[0])] = (", ".join(parts[1:-2]), int(float(parts[-2]) * MiB), int(float(parts[-1]) * MiB))
        except ValueError:
            continue
    return [
        Gpu(index=pos, name=rows[i][0], total_bytes=rows[i][1], free_bytes=rows[i][2], vendor="nvidia",
            source="nvidia-smi")
        for pos, i in enumerate(_visible(sorted(rows)))
    ]


def _amd_gpus(sysfs: Path, start: int) -> list[Gpu]:
    out: list[Gpu] = []
    cards = sorted(sysfs.glob("class/drm/card*/device/mem_info_vram_total"),
                   key=lambda p: int(re.sub(r"\D", "", p.parent.parent.name) or 0))
    for total_file in cards:
        dev = total_file.parent
        try:
            total = int(total_file.read_text().strip())
            used = int((dev / "mem_info_vram_used").read_text().strip())
        except (OSError, ValueError):
            continue
        name = f"AMD GPU ({dev.parent.name})"
        for f in ("product_name",):
            try:
                text = (dev / f).read_text().strip()
                if text:
                    name = text
            except OSError:
                pass
        out.append(Gpu(index=start + len(out), name=name, total_bytes=total, free_bytes=max(0, total - used),
                       vendor="amd", source="sysfs"))
    return out


def detect_gpus(*, sysfs: Path = Path("/sys")) -> tuple[Gpu, ...]:
    """The GPUs of this machine with their free memory; empty when there are none.

    Args:
        sysfs: where sysfs is mounted (tests point it at a fake tree).

    Returns:
        NVIDIA GPUs (NVML, else nvidia-smi), then AMD GPUs (sysfs).
    """
    nvidia = _nvml_gpus() or _smi_gpus()
    return tuple(nvidia) + tuple(_amd_gpus(sysfs, len(nvidia)))


def budget_gpus(sizes: tuple[int, ...]) -> tuple[Gpu, ...]:
    """Simulated GPUs for a `--vram` budget: all of each size is free. A size of 0 is no GPU."""
    return tuple(
        Gpu(index=i, name=f"budget {i}", total_bytes=s, free_bytes=s, vendor="budget", source="budget")
        for i, s in enumerate(x for x in sizes if x > 0)
    )


def physical_cores() -> int:
    """Physical CPU cores (psutil), the best default thread count for llama.cpp."""
    import psutil

    return psutil.cpu_count(logical=False) or os.cpu_count() or 1


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo's first "model name"), else what `platform` says."""
    import platform

    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def usable_cpus() -> int:
    """Logical CPUs this process may run on (its affinity mask where the OS has one): the most
    threads llama.cpp can run at once. More only queue on the same CPUs, and far more crash it
    (libgomp cannot create 32768 threads; 100000 segfaults)."""
    import psutil

    try:
        return len(psutil.Process().cpu_affinity()) or 1
    except (AttributeError, OSError, psutil.Error):  # no affinity API (macOS)
        return psutil.cpu_count(logical=True) or os.cpu_count() or 1


def system_info(*, vram: tuple[int, ...] | None = None, sysfs: Path = Path("/sys")) -> SystemInfo:
    """GPUs (detected, or the `vram` budget), RAM and cores.

    Args:
        vram: per-GPU budgets in bytes that replace detection (None: detect).
        sysfs: where sysfs is mounted.

    Returns:
        The machine as the planner sees it.
    """
    import psutil

    mem = psutil.virtual_memory()
    gpus = budget_gpus(vram) if vram is not None else detect_gpus(sysfs=sysfs)
    return SystemInfo(
        gpus=gpus,
        ram_total_bytes=int(mem.total),
        ram_available_bytes=int(mem.available),
        physical_cores=physical_cores(),
        logical_cores=psutil.cpu_count(logical=True) or os.cpu_count() or 1,
    )


# ---- llama.cpp's own devices ---------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Device:
    """A device llama.cpp can run layers on (ggml's backend registry).

    `index` is its position in a model's device list, the one `tensor_split` and the planner's
    GPU indices refer to (RPC workers first, then GPUs); -1 for the CPU.
    """

    index: int
    name: str  # llama.cpp's: "CPU", "CUDA0", "Metal", "Vulkan0", "RPC0"
    description: str  # the hardware, or HOST:PORT of a worker
    kind: Literal["cpu", "gpu", "rpc"]
    free_bytes: int
    total_bytes: int

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "description": self.description, "kind": self.kind,
                "free_bytes": self.free_bytes, "total_bytes": self.total_bytes}


def llama_devices(*, rpc: str | None = None) -> tuple[Device, ...]:
    """The devices of the loaded llama.cpp build, in a model's order, then the CPU.

    Args:
        rpc: `--rpc HOST:PORT[,HOST:PORT]`: workers to register first (each checked: down or
            another protocol version is a UserError).
    """
    from ggufspec.llama import devices as ld

    if rpc:
        ld.add_workers(parse_endpoints(rpc))
    found = ld.list_devices()
    ordered = ld.model_device_order(found)
    out = [Device(index=i, name=d.name, description=d.description, kind=d.kind, free_bytes=d.free_bytes,
                  total_bytes=d.total_bytes) for i, d in enumerate(ordered)]
    out += [Device(index=-1, name=d.name, description=d.description, kind="cpu", free_bytes=d.free_bytes,
                   total_bytes=d.total_bytes) for d in found if d.kind == "cpu"]
    return tuple(out)


def offload_devices() -> tuple[Device, ...]:
    """The devices a model's layers can go to (RPC workers registered so far, then GPUs)."""
    return tuple(d for d in llama_devices() if d.kind != "cpu")
