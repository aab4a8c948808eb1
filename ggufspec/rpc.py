"""RPC workers: `--rpc HOST:PORT[,HOST:PORT]` parsed, and each worker checked before llama.cpp
connects (pure Python sockets; no llama.cpp).

llama.cpp's RPC client aborts the whole process when a worker does not answer (ggml-rpc.cpp:
`GGML_ABORT("Failed to connect ...")`), and a worker serves one client at a time, so a second
connection waits silently. `check_workers` therefore speaks the protocol's first message itself,
with a timeout, before llama.cpp is given the endpoint:

    request : | cmd = HELLO (14), 1 byte | size = 24, u64 | conn_caps, 24 zero bytes (plain TCP) |
    response: | size = 28, u64 | major, minor, patch, pad, 1 byte each | conn_caps, 24 bytes |

and closes the connection (the worker then waits for the next client). A worker that does not
listen, does not answer within the timeout, or speaks another protocol version is one clear error.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
from dataclasses import dataclass

from ggufspec.errors import UserError

# ggml/include/ggml-rpc.h of the vendored llama.cpp (llama-cpp-python 0.3.36)
PROTO_VERSION = (7, 0, 0)
_CMD_HELLO = 14
_CAPS = 24
CONNECT_TIMEOUT_S = 5.0


@dataclass(frozen=True, kw_only=True)
class Endpoint:
    """One worker: `host:port` as llama.cpp's RPC backend takes it."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and `localhost`."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_endpoints(text: str) -> tuple[Endpoint, ...]:
    """`--rpc 127.0.0.1:50052,10.0.0.2:50052` -> endpoints, in order (llama.cpp's device order).

    Raises:
        UserError: an empty item, no port, a port outside 1..65535, or a worker named twice.
    """
    out: list[Endpoint] = []
    for item in text.split(","):
        item = item.strip()
        host, sep, port = item.rpartition(":")
        if not item or not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise UserError(f"--rpc: {item!r} is not a worker address; write HOST:PORT[,HOST:PORT], "
                            "like 127.0.0.1:50052")
        ep = Endpoint(host=host.strip("[]"), port=int(port))
        if ep in out:
            raise UserError(f"--rpc: the worker {ep} is named twice; name each worker once")
        out.append(ep)
    return tuple(out)


def hello(endpoint: Endpoint, *, timeout_s: float = CONNECT_TIMEOUT_S) -> tuple[int, int, int]:
    """The worker's RPC protocol version (major, minor, patch), asked with a timeout.

    Raises:
        UserError: nothing listens there, no answer within `timeout_s`, or not an RPC worker.
    """
    fix = f"start one there with `ggufspec rpc-server --host {endpoint.host} --port {endpoint.port}`"
    try:
        sock = socket.create_connection((endpoint.host, endpoint.port), timeout=timeout_s)
    except socket.timeout:
        raise UserError(f"RPC worker {endpoint} did not accept a connection within {timeout_s:g} s; "
                        f"check the address and the network, or {fix}") from None
    except OSError as e:
        raise UserError(f"no RPC worker at {endpoint} ({e.strerror or e}); {fix}") from None
    try:
        with sock:
            sock.settimeout(timeout_s)
            sock.sendall(struct.pack("<BQ", _CMD_HELLO, _CAPS) + bytes(_CAPS))
            head = _recv(sock, 8)
            (size,) = struct.unpack("<Q", head)
            if size < 3 or size > 4096:
                raise ValueError(size)
            body = _recv(sock, size)
    except socket.timeout:
        raise UserError(f"RPC worker {endpoint} did not answer within {timeout_s:g} s: it is busy with another "
                        "client (a worker serves one at a time) or is not an RPC worker; stop the other "
                        f"client or {fix}") from None
    except (OSError, ValueError, EOFError):
        raise UserError(f"{endpoint} does not answer as an RPC worker of protocol "
                        f"{'.'.join(map(str, PROTO_VERSION))} (another llama.cpp version, or another "
                        "program); run `ggufspec rpc-server` there with the same ggufspec and "
                        "llama-cpp-python as here") from None
    return body[0], body[1], body[2]


def _recv(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return buf


def check_workers(endpoints: tuple[Endpoint, ...], *, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Refuse (UserError) any worker that is down, silent, or of another protocol version.

    llama.cpp's own rule: the same major version, a minor version no newer than ours.
    """
    for ep in endpoints:
        major, minor, patch = hello(ep, timeout_s=timeout_s)
        if major != PROTO_VERSION[0] or minor > PROTO_VERSION[1]:
            raise UserError(f"RPC worker {ep} speaks protocol {major}.{minor}.{patch}, this llama.cpp "
                            f"{'.'.join(map(str, PROTO_VERSION))}; run `ggufspec rpc-server` there with the "
                            "same llama-cpp-python version as here")
