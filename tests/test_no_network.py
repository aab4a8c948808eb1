"""The session's socket guard (tests/conftest.py): loopback and unix sockets only."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest
from conftest import NetworkBlocked


def test_connections_that_leave_the_machine_are_refused() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        with pytest.raises(NetworkBlocked, match=r"connect to \('93\.184\.216\.34', 80\) refused"):
            s.connect(("93.184.216.34", 80))
        with pytest.raises(NetworkBlocked):
            s.connect_ex(("93.184.216.34", 80))
    with pytest.raises(NetworkBlocked, match="name lookup of 'example.com' refused"):
        socket.create_connection(("example.com", 80), timeout=1)
    with pytest.raises(NetworkBlocked, match="name lookup of 'huggingface.co' refused"):
        socket.getaddrinfo("huggingface.co", 443)


def _serve_once(server: socket.socket) -> None:
    conn, _ = server.accept()
    conn.sendall(b"ok")
    conn.close()


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_loopback_connections_are_allowed(host: str) -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        t = threading.Thread(target=_serve_once, args=(server,))
        t.start()
        with socket.create_connection((host, port), timeout=10) as c:
            assert c.recv(2) == b"ok"
        t.join()


def test_ipv6_loopback_is_allowed() -> None:
    try:
        server = socket.create_server(("::1", 0), family=socket.AF_INET6)
    except OSError:
        pytest.skip("no IPv6 loopback on this machine")
    with server, socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as c:
        c.connect(("::1", server.getsockname()[1]))


def test_unix_sockets_are_allowed(tmp_path: Path) -> None:
    path = str(tmp_path / "s")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server, \
            socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
        server.bind(path)
        server.listen(1)
        c.connect(path)
