"""List the devices llama.cpp can run a model's layers on: GPUs of this build (CUDA, Metal, Vulkan,
...), RPC workers given with --rpc, and the CPU, with free and total memory as llama.cpp reports
them. The order is a model's device order (RPC workers first, then GPUs), the one --vram
budgets and tensor splits follow. GPUs that NVML sees but this llama.cpp build cannot use are
named in a note.

examples:
  ggufspec devices
  ggufspec devices --rpc 127.0.0.1:50052,127.0.0.1:50053 --json
"""

from __future__ import annotations

import argparse
import json
import sys

from ggufspec.commands import add_rpc_argument


def add_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("devices")
    add_rpc_argument(g)
    parser.add_argument("--json", action="store_true", help="print the devices as JSON")


def run(args: argparse.Namespace) -> int:
    from ggufspec.hardware import detect_gpus, format_bytes, llama_devices

    found = llama_devices(rpc=args.rpc)
    note = None
    if not any(d.kind == "gpu" for d in found):
        unused = detect_gpus()  # NVML / nvidia-smi / sysfs: only what llama.cpp does not say
        if unused:
            note = (f"{len(unused)} GPU(s) found ({', '.join(g.name for g in unused)}) that this llama.cpp build "
                    "cannot use; reinstall llama-cpp-python with CMAKE_ARGS (see the README)")
    if args.json:
        json.dump({"devices": [d.as_dict() for d in found], "note": note}, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    width = max(len(d.name) for d in found)
    for d in found:
        print(f"{d.name:<{width}}  {d.kind:<3}  {format_bytes(d.free_bytes):>10} free of "
              f"{format_bytes(d.total_bytes):>10}  {d.description}")
    if note:
        print(f"note: {note}")
    return 0
