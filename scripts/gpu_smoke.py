#!/usr/bin/env python
"""Does ggufspec load and generate on this machine's llama.cpp build? One step a process, so a crash
(a segfault in llama.cpp) names its step instead of ending the check.

On the one GPU tried so far (an H200, CUDA 13: docs/gpu.md) `ggufspec run` crashed inside the model
load: that build's libggml-cuda.so exports its own libstdc++, and libllama's iostream calls bound
into it (ggufspec.llama.lib.preload_cxx_runtime now prevents it). Which step crashed moved with
what the process had loaded before, so the steps below keep each load in a process of its own:
llama-cpp-python alone, ggufspec's load, the device listing before a plain load and before
ggufspec's, each of the listing's two effects alone before a plain load, then `ggufspec run`.

    python scripts/gpu_smoke.py                    # the embedded Q4_1 draft, all layers offloaded
    python scripts/gpu_smoke.py model.gguf --ngl 0

Prints one line a step (ok, error, or the signal that killed it) and exits 1 if any failed.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# (name, Python run in a fresh process with MODEL and NGL set); each prints one line of evidence
STEPS = (
    ("llama-cpp-python load", """
import llama_cpp as l
l.llama_backend_init()
p = l.llama_model_default_params(); p.n_gpu_layers = NGL
m = l.llama_model_load_from_file(MODEL.encode(), p)
print("loaded" if m else "load failed", "| gpu offload:", bool(l.llama_supports_gpu_offload()))
"""),
    ("ggufspec load", """
from ggufspec.llama.model import Model
from ggufspec.settings import ModelSettings
print("n_vocab", Model(MODEL, settings=ModelSettings(n_gpu_layers=NGL)).n_vocab)
"""),
    ("device list, then llama-cpp-python load", """
from ggufspec.llama import devices, lib
print([d.name for d in devices.list_devices()])
p = lib.llama.llama_model_default_params(); p.n_gpu_layers = NGL
print("loaded" if lib.llama.llama_model_load_from_file(MODEL.encode(), p) else "load failed")
"""),
    ("device list, then ggufspec load", """
from ggufspec.llama import devices
from ggufspec.llama.model import Model
from ggufspec.settings import ModelSettings
print([d.name for d in devices.list_devices()])
print("n_vocab", Model(MODEL, settings=ModelSettings(n_gpu_layers=NGL)).n_vocab)
"""),
    # the two things listing the devices does, apart: promote libggml to the global symbol scope
    # (ggufspec.llama.devices opens it RTLD_NOLOAD | RTLD_GLOBAL), and ask each device its memory
    ("libggml made global, then llama-cpp-python load", """
import ctypes, os
import llama_cpp as l
l.llama_backend_init()
ctypes.CDLL("libggml.so.0", mode=os.RTLD_NOLOAD | ctypes.RTLD_GLOBAL)
p = l.llama_model_default_params(); p.n_gpu_layers = NGL
print("loaded" if l.llama_model_load_from_file(MODEL.encode(), p) else "load failed")
"""),
    ("device memory asked, then llama-cpp-python load", """
import ctypes, os
import llama_cpp as l
l.llama_backend_init()
g = ctypes.CDLL("libggml.so.0", mode=os.RTLD_NOLOAD)
g.ggml_backend_dev_get.restype = ctypes.c_void_p
g.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
g.ggml_backend_dev_memory.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)]
free, total = ctypes.c_size_t(), ctypes.c_size_t()
for i in range(g.ggml_backend_dev_count()):
    g.ggml_backend_dev_memory(g.ggml_backend_dev_get(i), ctypes.byref(free), ctypes.byref(total))
p = l.llama_model_default_params(); p.n_gpu_layers = NGL
print("loaded" if l.llama_model_load_from_file(MODEL.encode(), p) else "load failed")
"""),
    ("ggufspec run --compare", """
import sys
from ggufspec.cli import main
sys.argv = ["ggufspec", "run", "--target", MODEL, "--draft", MODEL, "--draft", "lookup", "--ngl", str(NGL if NGL >= 0 else "all"),
            "--ngld", str(NGL if NGL >= 0 else "all"), "-p", "The capital of France is", "-n", "24", "--compare", "--repeats", "1"]
main()
"""),
)


def run_step(code: str, model: Path, ngl: int, timeout: float) -> tuple[bool, str]:
    prologue = f"MODEL = {str(model)!r}\nNGL = {ngl}\n"
    try:
        p = subprocess.run([sys.executable, "-X", "faulthandler", "-c", prologue + code], cwd=ROOT,
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, f"timed out after {timeout:g} s"
    out = [x for x in p.stdout.splitlines() if x.strip()]
    err = [x for x in p.stderr.splitlines() if x.strip()]
    if p.returncode < 0:  # faulthandler's traceback: the innermost Python frame comes first
        where = [x.strip() for x in err if x.strip().startswith("File ")][:1]
        return False, f"killed by {signal.Signals(-p.returncode).name}" + (f" at {where[0]}" if where else "")
    if p.returncode:
        return False, (err or out or [f"exit {p.returncode}"])[-1]
    return True, (out or err or [""])[-1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", nargs="?", type=Path, help="a GGUF model (default: the embedded SmolLM2 Q4_1)")
    ap.add_argument("--ngl", type=int, default=-1, help="layers to offload (-1: all; default)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds a step may take (default 120)")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    model = args.model
    if model is None:
        from ggufspec.models.embedded import resolve_embedded

        model = resolve_embedded("smollm2", "Q4_1")
    if not model.is_file():
        sys.exit(f"error: {model} does not exist; give a GGUF file")
    failed = 0
    for name, code in STEPS:
        ok, evidence = run_step(code, model.resolve(), args.ngl, args.timeout)
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {evidence}", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
