"""llama.cpp's own device list (ggml's backend registry), RPC workers registered into it, a worker
served in-process, and a clean exit when a worker fails mid-run.

llama-cpp-python's wheel ships `libggml.so` and `libggml.so.0` as two separate files; libllama links
`libggml.so.0` (its NEEDED entry), and that copy's registry is the one llama.cpp's model loader
reads. `dlopen("libggml.so.0", RTLD_NOLOAD)` returns exactly the object the dynamic linker bound
libllama to, so every call here goes through it (registering in the other copy does nothing).

The RPC backend is a loadable module (`scripts/build_rpc_backend.sh` puts `libggml-rpc.so` in the
exact-kernels overlay): `ggml_backend_load` registers its base registry, then per worker
`ggml_backend_rpc_add_server(endpoint)` (through `ggml_backend_reg_get_proc_address`) returns a
registry with that worker's devices, which `ggml_backend_register` adds. llama.cpp puts RPC
devices first in a model's device list, then GPUs (src/llama.cpp, "add RPC servers at the front").

llama.cpp's RPC client calls GGML_ABORT when a worker stops answering; `on_worker_failure`
installs ggml's abort callback so that the process prints one line and exits 2 (or, in the server,
parks the failed thread and reports the failure) instead of dumping a backtrace through abort().
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Literal

from ggufspec.errors import UserError
from ggufspec.llama import kernels, lib, stall
from ggufspec.rpc import Endpoint, check_workers

_KINDS: dict[int, Literal["cpu", "gpu", "igpu", "accel", "meta"]] = {0: "cpu", 1: "gpu", 2: "igpu", 3: "accel", 4: "meta"}


@dataclass(frozen=True, kw_only=True)
class LlamaDevice:
    """One device of ggml's registry as llama.cpp sees it."""

    name: str  # "CPU", "CUDA0", "RPC0", ...
    description: str  # the hardware, or "HOST:PORT" for an RPC worker
    kind: Literal["cpu", "gpu", "rpc"]  # igpu counts as gpu; accel devices (BLAS, AMX) are left out
    backend: str  # the registry's name: "CPU", "CUDA", "RPC", ...
    free_bytes: int
    total_bytes: int


@functools.cache
def _ggml() -> ctypes.CDLL:
    lib.ensure_init()  # libllama (and so its libggml.so.0) loaded, backends initialised
    g = None
    lib_dir = Path(lib.llama.__file__).parent / "lib"
    # the object libllama was bound to (Linux soname), else the platform's copy beside libllama
    for name in ("libggml.so.0", str(lib_dir / "libggml.dylib"), str(lib_dir / "libggml.0.dylib"),
                 str(lib_dir / "ggml.dll"), str(lib_dir / "libggml.so")):
        try:
            g = ctypes.CDLL(name, mode=(os.RTLD_NOLOAD | ctypes.RTLD_GLOBAL) if hasattr(os, "RTLD_NOLOAD") else 0)
            break
        except OSError:
            continue
    if g is None:
        raise UserError(f"cannot find llama.cpp's ggml library beside {lib_dir}; reinstall llama-cpp-python")
    vp, sz = ctypes.c_void_p, ctypes.c_size_t
    for name, res, args in (
        ("ggml_backend_dev_count", sz, []),
        ("ggml_backend_dev_get", vp, [sz]),
        ("ggml_backend_dev_name", ctypes.c_char_p, [vp]),
        ("ggml_backend_dev_description", ctypes.c_char_p, [vp]),
        ("ggml_backend_dev_type", ctypes.c_int, [vp]),
        ("ggml_backend_dev_memory", None, [vp, ctypes.POINTER(sz), ctypes.POINTER(sz)]),
        ("ggml_backend_dev_backend_reg", vp, [vp]),
        ("ggml_backend_dev_by_type", vp, [ctypes.c_int]),
        ("ggml_backend_reg_name", ctypes.c_char_p, [vp]),
        ("ggml_backend_reg_by_name", vp, [ctypes.c_char_p]),
        ("ggml_backend_reg_get_proc_address", vp, [vp, ctypes.c_char_p]),
        ("ggml_backend_load", vp, [ctypes.c_char_p]),
        ("ggml_backend_register", None, [vp]),
        ("ggml_set_abort_callback", vp, [vp]),
    ):
        fn = getattr(g, name)
        fn.restype, fn.argtypes = res, args
    return g


def cpu_only() -> bool:
    """Whether every device llama.cpp has registered is the CPU backend's (no GPU, no RPC worker)."""
    g = _ggml()
    return all(g.ggml_backend_reg_name(g.ggml_backend_dev_backend_reg(g.ggml_backend_dev_get(i))) == b"CPU"
               for i in range(g.ggml_backend_dev_count()))


def list_devices() -> tuple[LlamaDevice, ...]:
    """The devices llama.cpp can place layers on, in registry order, with free and total memory."""
    g = _ggml()
    out: list[LlamaDevice] = []
    for i in range(g.ggml_backend_dev_count()):
        dev = g.ggml_backend_dev_get(i)
        kind = _KINDS.get(g.ggml_backend_dev_type(dev), "accel")
        if kind in ("accel", "meta"):
            continue
        backend = (g.ggml_backend_reg_name(g.ggml_backend_dev_backend_reg(dev)) or b"").decode()
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        with lib.HeldInterrupt():
            g.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        out.append(LlamaDevice(
            name=(g.ggml_backend_dev_name(dev) or b"").decode(),
            description=(g.ggml_backend_dev_description(dev) or b"").decode(errors="replace"),
            kind="rpc" if backend == "RPC" else ("cpu" if kind == "cpu" else "gpu"),
            backend=backend, free_bytes=int(free.value), total_bytes=int(total.value)))
    return tuple(out)


def model_device_order(devices: tuple[LlamaDevice, ...]) -> tuple[LlamaDevice, ...]:
    """The devices a model's layers spread over, in the order `tensor_split` indexes them:
    RPC workers first, then GPUs (llama.cpp's default device selection); the CPU is not one."""
    return tuple(d for d in devices if d.kind == "rpc") + tuple(d for d in devices if d.kind == "gpu")


def rpc_module() -> Path:
    """libggml-rpc.so of the overlay (UserError with the build command when it is missing)."""
    lib_dir = kernels.overlay_dir()
    path = lib_dir / "libggml-rpc.so" if lib_dir is not None else None
    if path is None or not path.is_file():
        raise UserError("this install has no llama.cpp RPC backend; build it once with "
                        "scripts/build_exact_kernels.sh (it runs scripts/build_rpc_backend.sh)")
    return path


_rpc_lock = threading.Lock()
_added: dict[str, int] = {}  # endpoint -> registry pointer


def _rpc_reg() -> int:
    g = _ggml()
    reg = g.ggml_backend_reg_by_name(b"RPC")
    if not reg:
        with lib.HeldInterrupt():
            reg = g.ggml_backend_load(os.fsencode(rpc_module()))
        if not reg:
            raise UserError(f"llama.cpp could not load its RPC backend {rpc_module()}; rebuild it with "
                            "FORCE=1 scripts/build_rpc_backend.sh")
    return reg


def add_workers(endpoints: tuple[Endpoint, ...]) -> tuple[LlamaDevice, ...]:
    """Register RPC workers as llama.cpp devices (once per process and worker); their devices.

    Each worker is checked first (`ggufspec.rpc.check_workers`: listening, answering, the same
    protocol), since llama.cpp's own connect aborts the process on failure.

    Raises:
        UserError: no RPC backend built, or a worker down, silent or of another version.
    """
    with _rpc_lock:
        new = tuple(ep for ep in endpoints if str(ep) not in _added)
        if new:
            check_workers(new)
            g = _ggml()
            add = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)(
                g.ggml_backend_reg_get_proc_address(_rpc_reg(), b"ggml_backend_rpc_add_server"))
            for ep in new:
                with lib.HeldInterrupt():
                    reg = add(str(ep).encode())
                if not reg:
                    raise UserError(f"RPC worker {ep} offers no device; start it with `ggufspec rpc-server`")
                g.ggml_backend_register(reg)
                _added[str(ep)] = reg
        wanted = {str(ep) for ep in endpoints}
        return tuple(d for d in list_devices() if d.kind == "rpc" and d.description in wanted)


# ---- a worker in this process ------------------------------------------------------------------


def serve_worker(*, host: str, port: int, n_threads: int) -> None:
    """Serve this machine's CPU device (ggufspec's batch-invariant kernels) as an RPC worker; blocks.

    ggml_backend_rpc_start_server runs in a thread (it never returns) so that Ctrl-C and SIGTERM
    reach Python; the process exits with them.
    """
    g = _ggml()
    start = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t,
                             ctypes.POINTER(ctypes.c_void_p))(
        g.ggml_backend_reg_get_proc_address(_rpc_reg(), b"ggml_backend_rpc_start_server"))
    cpu = g.ggml_backend_dev_by_type(0)
    devs = (ctypes.c_void_p * 1)(cpu)
    endpoint = f"{host}:{port}".encode()
    done = threading.Event()

    def run() -> None:
        start(endpoint, None, n_threads, 1, devs)  # returns only if it could not bind
        done.set()

    threading.Thread(target=run, name="rpc-server", daemon=True).start()
    try:
        while not done.wait(0.5):
            pass
    except KeyboardInterrupt:
        return
    raise UserError(f"could not serve on {host}:{port} (in use, or not an address of this machine); "
                    "pick another --port or --host")


# ---- a worker failing mid-run ------------------------------------------------------------------

_ABORT = ctypes.CFUNCTYPE(None, ctypes.c_char_p)
_abort_handler: Callable[[str], None] | None = None
_park = False
_installed = False


@_ABORT
def _on_abort(message: bytes) -> None:
    text = (message or b"").decode(errors="replace").strip().splitlines()
    reason = text[-1] if text else "llama.cpp aborted"
    rpc = "RPC" in reason or "rpc" in reason
    frozen = stall.stalled()  # the watchdog cut a silent worker's connection: that is the cause
    if frozen is not None:
        reason, rpc = frozen, True
    handler = _abort_handler
    if handler is not None:
        try:
            handler(reason)
        except BaseException:
            pass
    if _park and rpc:
        # the server: this thread never returns into llama.cpp (abort() would follow), and the
        # generation waiting on it stays blocked; the handler has failed its request and closed
        # the server to new ones, and the process keeps answering /health
        threading.Event().wait()
    if frozen is not None:
        line = f"error: {frozen}; restart it (`ggufspec rpc-server`) and run again\n"
    elif rpc:
        line = ("error: an RPC worker stopped answering mid-run (llama.cpp: "
                f"{reason.split(': ', 1)[-1]}); restart it (`ggufspec rpc-server`) and run again\n")
    else:
        line = f"error: llama.cpp aborted: {reason}\n"
    try:
        sys.stderr.write(line)
        sys.stderr.flush()
    finally:
        os._exit(2)


def on_worker_failure(handler: Callable[[str], None] | None = None, *, park: bool = False) -> None:
    """Handle llama.cpp's GGML_ABORT (an RPC worker gone mid-run): one line and exit 2.

    `handler(reason)` runs first. With `park`, a worker failure does not end the process: the
    failing thread blocks forever instead (ggml's abort callback cannot return into llama.cpp), so
    a server can fail that request and go on answering; the pair is unusable from then on.
    """
    global _abort_handler, _park, _installed
    _abort_handler, _park = handler, park
    _ggml().ggml_set_abort_callback(ctypes.cast(_on_abort, ctypes.c_void_p))
    _installed = True


def failure_handled() -> bool:
    """True once `on_worker_failure` has been called in this process."""
    return _installed


# ---- dead workers are found within seconds -----------------------------------------------------

# TCP keepalive probes a silent connection: a worker machine that is gone (power, network) fails
# the pending recv after KEEPIDLE + KEEPCNT * KEEPINTVL = 10 + 3 * 5 = 25 s, while a worker that is
# merely slow (a long graph) still answers the probes from its kernel. TCP_USER_TIMEOUT bounds
# data sent but never acknowledged the same way. ggml-rpc sets neither.
_KEEPIDLE_S, _KEEPINTVL_S, _KEEPCNT, _USER_TIMEOUT_MS = 10, 5, 3, 25_000


def harden_worker_sockets(endpoints: tuple[Endpoint, ...]) -> int:
    """Set keepalive and a user timeout on this process's TCP connections to the workers.

    llama.cpp opens its connections lazily (a loaded model's buffers hold one per worker), so call
    this after loading. Returns the number of sockets set.
    """
    import socket

    n = 0
    for _, s in stall.worker_sockets(endpoints):
        with s:
            try:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
                for opt, value in (("TCP_KEEPIDLE", _KEEPIDLE_S), ("TCP_KEEPINTVL", _KEEPINTVL_S),
                                   ("TCP_KEEPCNT", _KEEPCNT), ("TCP_USER_TIMEOUT", _USER_TIMEOUT_MS)):
                    if hasattr(socket, opt):
                        s.setsockopt(socket.IPPROTO_TCP, getattr(socket, opt), value)
                n += 1
            except OSError:
                continue
    return n


def current_failure_handler() -> Callable[[str], None] | None:
    """The handler `on_worker_failure` last installed (None: none)."""
    return _abort_handler
