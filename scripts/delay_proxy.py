#!/usr/bin/env python3
"""A TCP relay that delays every byte by a fixed time each way: a network delay without tc netem.

`scripts/netem_rpc.sh` puts RPC workers behind `tc netem` in a network namespace; on a kernel with
no sch_netem module (this project's CI machines and sandboxes have none) this relay stands in:

    ggufspec rpc-server --port 50052 --threads 1 &
    ggufspec rpc-server --port 50053 --threads 1 &
    python scripts/delay_proxy.py --delay-ms 0.5 60052:127.0.0.1:50052 60053:127.0.0.1:50053 &
    ggufspec bench --rpc 127.0.0.1:60052,127.0.0.1:60053 --sweep-ngl 0,8,16,24,all ...

Each direction of each connection is a reader thread that stamps what it receives with
`now + delay` and a writer thread that sends it when due (time.sleep has microsecond resolution,
unlike an event loop's millisecond poll timeouts), so the round trip grows by 2 x delay, as netem
on both ends of a link would make it, and the byte order is kept. The relay itself adds about
0.1 ms a round trip on loopback: measure `--delay-ms 0` as the baseline beside the delays.
"""

from __future__ import annotations

import argparse
import queue
import socket
import sys
import threading
import time


def _pump(src: socket.socket, dst: socket.socket, delay_s: float) -> None:
    pending: queue.Queue[tuple[float, bytes]] = queue.Queue()

    def reader() -> None:
        try:
            while True:
                data = src.recv(1 << 16)
                pending.put((time.perf_counter() + delay_s, data))
                if not data:
                    return
        except OSError:
            pending.put((0.0, b""))

    def writer() -> None:
        try:
            while True:
                due, data = pending.get()
                wait = due - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
                if not data:
                    dst.shutdown(socket.SHUT_WR)
                    return
                dst.sendall(data)
        except OSError:
            pass

    for fn in (reader, writer):
        threading.Thread(target=fn, daemon=True).start()


def _serve(listen_port: int, host: str, port: int, delay_s: float) -> None:
    server = socket.create_server(("127.0.0.1", listen_port), reuse_port=False)
    while True:
        client, _ = server.accept()
        try:
            upstream = socket.create_connection((host, port), timeout=10)
        except OSError as exc:
            print(f"delay_proxy: cannot reach {host}:{port}: {exc}", file=sys.stderr)
            client.close()
            continue
        upstream.settimeout(None)
        for s in (client, upstream):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        _pump(client, upstream, delay_s)
        _pump(upstream, client, delay_s)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delay-ms", type=float, required=True, help="one-way delay added in each direction")
    parser.add_argument("routes", nargs="+", metavar="LISTEN:HOST:PORT", help="127.0.0.1:LISTEN relays to HOST:PORT")
    args = parser.parse_args()
    if args.delay_ms < 0:
        parser.error("--delay-ms must be >= 0")
    threads = []
    for route in args.routes:
        try:
            listen, host, port = route.split(":")
            t = threading.Thread(target=_serve, args=(int(listen), host, int(port), args.delay_ms / 1000.0), daemon=True)
        except ValueError:
            parser.error(f"a route is LISTEN:HOST:PORT, got {route!r}")
        t.start()
        threads.append(t)
    print(f"delay_proxy: {len(threads)} route(s), {args.delay_ms} ms each way", file=sys.stderr, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
