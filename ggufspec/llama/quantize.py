"""llama.cpp's own quantizer: re-encode a GGUF in another file type, atomically."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

from ggufspec.errors import UserError
from ggufspec.hardware import physical_cores
from ggufspec.llama import lib
from ggufspec.llama.lib import HeldInterrupt, llama

# "F32", "F16", "Q8_0", "Q4_K_M", ...: llama.cpp's LLAMA_FTYPE_* names without their prefix
FTYPES: dict[str, int] = {
    name.removeprefix("LLAMA_FTYPE_MOSTLY_").removeprefix("LLAMA_FTYPE_ALL_"): getattr(llama, name)
    for name in dir(llama)
    if name.startswith(("LLAMA_FTYPE_MOSTLY_", "LLAMA_FTYPE_ALL_"))
}


def quantize(*, src: Path, dst: Path, ftype: str, n_threads: int | None = None) -> Path:
    """Re-encode a GGUF with llama.cpp's own quantizer (requantizing allowed), atomically.

    llama.cpp's quantizer cannot be stopped midway: a Ctrl-C is held until it returns, then raises
    KeyboardInterrupt with nothing left on disk.

    Args:
        src: input GGUF.
        dst: output path; written to a temporary file beside it, then renamed.
        ftype: "F32", "F16", "Q8_0", "Q4_0", "Q2_K", ... (llama.cpp's LLAMA_FTYPE names).
        n_threads: quantizer threads (default: physical cores).

    Raises:
        UserError: unknown ftype, or llama.cpp failed.
    """
    lib.ensure_init()
    key = ftype.upper()
    if key not in FTYPES:
        raise UserError(f"unknown quantization {ftype!r}; choose one of: {', '.join(sorted(FTYPES))}")
    params = llama.llama_model_quantize_default_params()
    params.ftype = FTYPES[key]
    params.allow_requantize = True
    params.nthread = n_threads or physical_cores()
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
    try:
        with HeldInterrupt():  # it logs every tensor (see lib)
            rc = llama.llama_model_quantize(os.fsencode(src), os.fsencode(tmp), ctypes.byref(params))
        if rc != 0:
            raise UserError(f"llama.cpp failed to quantize {src.name} to {key} (code {rc})")
        os.replace(tmp, dst)
    finally:
        tmp.unlink(missing_ok=True)
    return dst
