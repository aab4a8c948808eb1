"""llama_cpp itself: imported once over the right kernels; process set-up, llama.cpp's log, Ctrl-C.

The other modules of this package reach llama.cpp's C API as `lib.llama`.

Ctrl-C during a llama.cpp call: CPython runs a signal's Python handler in the main thread at the
next bytecode boundary. During a long C call (model load, context, quantization) that boundary lies
inside a Python callback llama.cpp makes, its log callback above all: the KeyboardInterrupt is then
raised inside the callback, where ctypes prints and drops it, and the C call goes on. Such calls run
under `HeldInterrupt`: SIGINT only records itself, and once the call returns (a model load aborts
at once, through its progress callback) the handler it replaced runs and raises KeyboardInterrupt.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any, Iterator

from ggufspec.errors import UserError
from ggufspec.llama import compute, kernels, stall

kernels.preload_cxx_runtime()  # before llama_cpp loads its libraries (see there)
kernels.activate()  # before llama_cpp is imported: it loads its libraries at import

import llama_cpp as llama  # noqa: E402

# Every decode holds SIGINT: `signal.signal` converts to and from enums (~7 us a pair here), the
# C functions under it do not (~0.5 us).
try:
    from _signal import getsignal as _getsignal, signal as _setsignal
except ImportError:  # not CPython
    from signal import getsignal as _getsignal, signal as _setsignal
_MAIN_THREAD = threading.main_thread().ident

_init_lock = threading.Lock()
_initialised = False
_verbose = False


@llama.llama_log_callback
def _log_callback(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    # llama.cpp and ggml log through here; quiet unless asked (--llama-log / set_verbose).
    # ctypes would print an exception raised here and drop it: write errors are ignored, and the
    # calls that log run under HeldInterrupt so that no KeyboardInterrupt is raised here.
    if _verbose:
        try:
            sys.stderr.write(text.decode("utf-8", errors="replace"))
        except Exception:
            pass


def set_verbose(verbose: bool) -> None:
    """Show llama.cpp's own log on stderr (off by default)."""
    global _verbose
    _verbose = verbose


def ensure_init() -> None:
    """Route llama.cpp's log through this module and initialise its backends (once a process)."""
    global _initialised
    with _init_lock:
        if not _initialised:
            with HeldInterrupt():
                llama.llama_log_set(_log_callback, ctypes.c_void_p(0))
                llama.llama_backend_init()
            _initialised = True


@functools.cache
def gpu_offload_supported() -> bool:
    """True when this llama.cpp build has a device to offload layers to (CUDA, Metal, Vulkan, ...)."""
    return bool(llama.llama_supports_gpu_offload())


@functools.cache
def batch_invariant_kernels() -> bool:
    """True when llama.cpp's CPU matmuls give a token the same logits whatever its batch holds,
    for every weight type: a CPU backend without llamafile's tinyBLAS, or the overlay whose
    tinyBLAS takes every batch size (see ggufspec.llama.kernels). With the stock tinyBLAS only
    Q8_0/Q4_0/Q4_1 weights are batch-invariant (measured)."""
    if b"LLAMAFILE = 1" not in llama.llama_print_system_info():
        return True
    lib = kernels.current_overlay()
    return (lib is not None and os.environ.get("LLAMA_CPP_LIB_PATH") == str(lib)
            and kernels.overlay_variant(lib) == "tinyblas")


#: GGUFSPEC_REPACK=auto|on|off: llama.cpp's weight repacking (see `repack`)
REPACK_ENV = "GGUFSPEC_REPACK"


@functools.cache
def repack() -> bool:
    """Whether llama.cpp may repack weights into the CPU's extra buffer types (AMX tiles, AVX2
    interleaved Q4_0, ...): `llama_model_params.use_extra_bufts`, llama.cpp's --repack/--no-repack.

    auto (the default): on, except where this llama.cpp build has AMX_INT8. There its AMX matmul
    (`ggml_backend_amx_mul_mat`) segfaults at the first decode of a quantized model (llama.cpp
    issue #20824, closed as stale without a fix). Seen on a 2-core Xeon with AMX: the Q4_1 and
    Q8_0 SmolLM2 crash in ggufspec and in llama.cpp's own llama-bench, the F32 one runs; with
    repacking off llama-bench runs the Q4_1 at 157 tok/s. GGUFSPEC_REPACK=on or off decides instead.
    Native peers built from the same source on the same machine take the same choice.

    Raises:
        UserError: GGUFSPEC_REPACK is not auto, on or off.
    """
    value = os.environ.get(REPACK_ENV, "auto").strip().lower() or "auto"
    if value not in ("auto", "on", "off"):
        raise UserError(f"{REPACK_ENV} takes auto, on or off, got {value!r}; unset it for auto")
    if value != "auto":
        return value == "on"
    ensure_init()
    return b"AMX_INT8 = 1" not in llama.llama_print_system_info()


@contextlib.contextmanager
def high_level_repack() -> Iterator[None]:
    """Inside, llama-cpp-python's own `Llama(...)` loads models with `repack()`'s choice too: its
    constructor takes no such argument, so the default model parameters it starts from are
    patched for the duration (the bench's llama-cpp-python peer would crash where ours cannot)."""
    module = llama.llama_cpp
    original = module.llama_model_default_params
    if repack():
        yield
        return

    def params() -> Any:
        p = original()
        p.use_extra_bufts = False
        return p

    module.llama_model_default_params = params
    try:
        yield
    finally:
        module.llama_model_default_params = original


class HeldInterrupt:
    """`with HeldInterrupt() as held:` around a llama.cpp call that may call back into Python.

    Inside, SIGINT only sets `held.requested`; on leaving, the SIGINT handler it replaced runs
    (Python's default raises KeyboardInterrupt). Signals reach only the main thread, so in another
    thread, or when SIGINT has no Python handler (ignored, or the default action), it does nothing.
    """

    __slots__ = ("requested", "_previous")

    def __init__(self) -> None:
        self.requested = False
        self._previous: Any = None

    def _hold(self, signum: int, frame: object) -> None:
        self.requested = True

    def __enter__(self) -> HeldInterrupt:
        if threading.get_ident() == _MAIN_THREAD:
            previous = _getsignal(signal.SIGINT)
            if callable(previous):
                _setsignal(signal.SIGINT, self._hold)
                self._previous = previous
        return self

    def __exit__(self, *exc: object) -> None:
        previous, self._previous = self._previous, None
        if previous is not None:
            _setsignal(signal.SIGINT, previous)
            if self.requested:
                previous(signal.SIGINT, None)  # the default handler raises KeyboardInterrupt


def decode(ctx: Any, batch: Any, *, wait: bool = True) -> int:
    """llama_decode(ctx, batch), on the process's compute thread when one is installed (see
    `compute`); `wait`: then llama_synchronize, so that it returns once the device is done (a GPU
    backend returns from llama_decode before; the CPU backend's is a no-op). Call it under
    `HeldInterrupt`, with the bookkeeping of its result: the caller then waits for the decode to
    end whatever Ctrl-C does, and records what reached the cache."""
    owner = compute.current()
    # a frozen RPC worker would hold either call forever (see stall)
    if owner is None:
        return stall.watched(_decode, ctx, batch, wait)
    return stall.watched(owner.call, _decode, ctx, batch, wait)


def _decode(ctx: Any, batch: Any, wait: bool) -> int:
    rc = llama.llama_decode(ctx, batch)
    if rc == 0 and wait:  # (a no-op on the CPU backend)
        llama.llama_synchronize(ctx)
    return rc


def _returning_address(fn: Any, *argtypes: Any) -> Any:
    """llama_cpp's ctypes function `fn` declared to return a plain address (an int; None for NULL),
    not a ctypes pointer object to build and take apart."""
    return ctypes.CFUNCTYPE(ctypes.c_void_p, *argtypes)(ctypes.cast(fn, ctypes.c_void_p).value)


#: llama_get_logits_ith(ctx, i) as an address (None: no logits for row i); see context.RowViews
logits_address = _returning_address(llama.llama_get_logits_ith, ctypes.c_void_p, ctypes.c_int32)


def load_model(path: Path, params: Any) -> Any:
    """llama_model_load_from_file(path, params) that Ctrl-C aborts (through the load's progress
    callback) with KeyboardInterrupt, with weight repacking only where `repack()` allows it (a
    caller may turn it off, never on). Returns the model pointer, NULL when llama.cpp failed."""
    ensure_init()
    params.use_extra_bufts = params.use_extra_bufts and repack()
    ptr = None
    try:
        with HeldInterrupt() as held:
            # returning False aborts the load (this replaces llama.cpp's progress dots in its log)
            progress = llama.llama_progress_callback(lambda fraction, user_data: not held.requested)
            params.progress_callback = progress
            ptr = llama.llama_model_load_from_file(os.fsencode(path), params)
    except KeyboardInterrupt:
        if ptr:
            free_model(ptr)
        raise
    return ptr


def new_context(model_ptr: Any, params: Any) -> Any:
    """llama_init_from_model(model_ptr, params) with Ctrl-C held until it returns (then
    KeyboardInterrupt). Returns the context pointer, NULL when llama.cpp failed."""
    ctx = None
    try:
        with HeldInterrupt():
            ctx = llama.llama_init_from_model(model_ptr, params)
    except KeyboardInterrupt:
        if ctx:
            free_context(ctx)
        raise
    return ctx


def free_model(ptr: Any) -> None:
    """llama_model_free (it logs) with Ctrl-C held until it returns."""
    with HeldInterrupt():
        llama.llama_model_free(ptr)


def free_context(ptr: Any) -> None:
    """llama_free (it logs its buffers) with Ctrl-C held until it returns."""
    with HeldInterrupt():
        llama.llama_free(ptr)
