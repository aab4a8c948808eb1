"""Batch-invariant CPU kernels: an overlay of llama.cpp's CPU backend with one kernel per weight
type for every batch size.

Greedy speculative output equals the target alone only if a token's logits do not depend on
how many tokens share its batch. llama.cpp's CPU backend multiplies a one-row batch with ggml's
own dot products, but a batch of 2+ rows with llamafile's tinyBLAS (ggml-cpu/llamafile/sgemm.cpp:
"only enable sgemm for prompt processing"). For Q8_0/Q4_0/Q4_1 weights both sum in the same order;
for F32/F16/BF16 they do not: max |logit| difference 0.038 between a one-row decode and the same
token in a batch of 5, SmolLM2-135M F32, 880 tokens of context (measured). Two overlays fix it
(`overlay_variant`):
* "tinyblas": that gate removed, so every batch size takes tinyBLAS, which sums each output over
  k in one order whatever its tile (0.0 for F32 at 1, 2, 5, 9 and 12 rows and for a prefill split
  anywhere, measured); on x86-64 it has no other batch-size gate. Faster where it counts for
  speculation on the 2-core AVX2 EPYC: 9 rows 46 ms against 55, a prefill 2.35 ms a token
  against 3.55, one row 19.4-20.2 ms against 19.2-19.5 (an AVX-512 host measured that one 10-15%
  slower). The types stock kernels already compute batch-invariantly (Q8_0/Q4_0/Q4_1,
  `ggufspec.loop.exactness.STOCK_BATCH_INVARIANT_TYPES`) keep the gate (revision 2): there ggml's
  one-row dot sums in tinyBLAS's order (0.0, as on the stock build) and is faster: the default Q4_1 draft, whose output matrix
  is Q8_0, steps in 6.8 ms against 8.6 with tinyBLAS for its one row (measured, alternated);
* "ggml": built with GGML_LLAMAFILE=OFF, every batch size takes ggml's dot products: 0.0 for F32,
  F16 and Q8_0. Elsewhere than x86-64, where tinyBLAS has gates of its own (n < 4, n < 8 on ARM).

`scripts/build_exact_kernels.sh` builds that `libggml-cpu` from the llama.cpp source vendored in
the sdist of the installed llama-cpp-python, into `overlay_dir()` beside copies of the installed
libraries, and names its variant in the file `VARIANT_FILE` there. `activate()` (called by `ggufspec.llama.lib` before it imports llama_cpp) points
llama-cpp-python at it through its own LLAMA_CPP_LIB_PATH. Nothing here imports llama_cpp; the
library module checks what was really loaded (`ggufspec.llama.lib.batch_invariant_kernels()`).

GGUFSPEC_KERNELS=stock keeps the installed libraries; a LLAMA_CPP_LIB_PATH set by the user wins.
"""

from __future__ import annotations

import ctypes
import filecmp
import importlib.util
import os
import sys
from importlib import metadata
from pathlib import Path

from ggufspec.paths import kernels_dir

# the libraries llama-cpp-python loads from LLAMA_CPP_LIB_PATH (llama_cpp.llama_cpp, llama_cpp.mtmd_cpp)
_REQUIRED = ("libllama.so", "libggml.so", "libggml-base.so", "libggml-cpu.so")
VARIANT_FILE = "EXACT_KERNELS"  # in the overlay: "tinyblas" or "ggml", then "revision N" (write_marker)
# the patch's revision: 1 tinyBLAS for every type at one row; 2 ggml's dot for one row of the
# types the stock kernels compute batch-invariantly
OVERLAY_REVISION = 2


def preload_cxx_runtime() -> str | None:
    """Load the system's C++ runtime into the global symbol scope before llama_cpp loads its
    libraries (`ggufspec.llama.lib` calls it first); returns what it loaded, None where there is
    none to load (not Linux, no libstdc++).

    A CUDA build of llama.cpp can carry a private copy of libstdc++ inside libggml-cuda.so and
    export it (3,414 libstdc++ symbols, on an H200 with CUDA 13, the vendored llama.cpp of
    llama-cpp-python 0.3.36), while libllama.so does not link libstdc++ itself. libllama's
    iostream calls (`llama_model::print_info`, on every model load) then bound into that copy,
    with the system's locale objects: `ggufspec run` crashed (SIGSEGV inside
    std::ostream::_M_insert<long>, cuda-gdb) on 4 of 4 runs, and on 0 of 5 with this preload
    (docs/gpu.md). With the system's libstdc++ global first, every C++ runtime symbol binds to
    one copy; a CPU build links that one anyway."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        ctypes.CDLL("libstdc++.so.6", mode=ctypes.RTLD_GLOBAL)
    except OSError:
        return None
    return "libstdc++.so.6"


def installed_version() -> str | None:
    """Version of the installed llama-cpp-python, read without importing it."""
    try:
        return metadata.version("llama-cpp-python")
    except metadata.PackageNotFoundError:
        return None


def overlay_dir(version: str | None = None) -> Path | None:
    """Where the overlay for `version` (default: the installed one) lives; None if not installed."""
    version = version or installed_version()
    if version is None:
        return None
    return kernels_dir() / f"llama-cpp-python-{version}" / "lib"


def activate() -> Path | None:
    """Point llama-cpp-python at the overlay if one was built for the installed version.

    Returns:
        The overlay directory in use, or None: none built, GGUFSPEC_KERNELS=stock, the user set
        LLAMA_CPP_LIB_PATH, or llama_cpp was already imported (too late to choose its libraries).
    """
    if "llama_cpp" in sys.modules:
        return None
    if os.environ.get("GGUFSPEC_KERNELS", "").lower() == "stock":
        lib = overlay_dir()
        if lib is not None and os.environ.get("LLAMA_CPP_LIB_PATH") == str(lib):
            del os.environ["LLAMA_CPP_LIB_PATH"]  # inherited from a parent process that used it
        return None
    if os.environ.get("LLAMA_CPP_LIB_PATH"):
        # ours from an earlier call (`import ggufspec` activates), or the user's own choice
        lib = current_overlay()
        return lib if lib is not None and os.environ["LLAMA_CPP_LIB_PATH"] == str(lib) else None
    lib = current_overlay()
    if lib is not None:
        os.environ["LLAMA_CPP_LIB_PATH"] = str(lib)
    return lib


def _marker(lib: Path) -> list[str]:
    """The words of the overlay's marker (`write_marker`); none where it has no marker."""
    try:
        return (lib / VARIANT_FILE).read_text().split()
    except FileNotFoundError:
        return []


def overlay_variant(lib: Path) -> str | None:
    """Which batch-invariant kernels the overlay in `lib` has: "tinyblas" (llamafile's, at every
    batch size) or "ggml" (no llamafile); an overlay built before variants existed is "ggml".
    None: `lib` is not an overlay."""
    if not (lib / "libggml-cpu.so").is_file():
        return None
    words = _marker(lib)
    return words[0] if words else "ggml"


def overlay_revision(lib: Path) -> int:
    """The revision of the patch the overlay in `lib` was built with (1: before revisions were
    written). An older revision is exact too, only slower; the build script rebuilds it."""
    words = _marker(lib)
    for key, value in zip(words, words[1:]):
        if key == "revision" and value.isdigit():
            return int(value)
    return 1


def write_marker(lib: Path | str, variant: str) -> None:
    """Name the overlay in `lib` (a directory being assembled) as `variant` at this revision."""
    (Path(lib) / VARIANT_FILE).write_text(f"{variant}\nrevision {OVERLAY_REVISION}\n")


def installed_lib_dir() -> Path | None:
    """The shared libraries of the installed llama-cpp-python (found without importing it)."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent / "lib"


def current_overlay() -> Path | None:
    """The overlay directory if it is complete and built for the installed llama-cpp-python.

    Its libllama must be a byte-for-byte copy of the installed one (a new venv installing the same
    cached wheel has the same bytes; a llama-cpp-python built differently makes the overlay stale).
    scripts/build_exact_kernels.sh asks this too, to decide whether to build.
    """
    lib, installed = overlay_dir(), installed_lib_dir()
    if lib is None or installed is None or not all((lib / name).is_file() for name in _REQUIRED):
        return None
    try:
        same = filecmp.cmp(installed / "libllama.so", lib / "libllama.so", shallow=False)  # ~4 MB: a few ms
    except OSError:
        return None
    return lib if same else None

