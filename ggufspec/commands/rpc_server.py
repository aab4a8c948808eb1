"""Serve this machine's CPU as a llama.cpp RPC worker: another ggufspec process given
`--rpc HOST:PORT` puts model layers here. The worker computes with ggufspec's own llama.cpp
(the batch-invariant CPU kernels of scripts/build_exact_kernels.sh), so a split model gives the
same greedy text as a local one; run the same ggufspec and llama-cpp-python version on every
machine. A worker serves one client process at a time.

The RPC protocol has no authentication and no encryption: anyone who can reach the port can run
code paths of llama.cpp on this machine and read what is sent. Bind it to 127.0.0.1 (the
default) or to a private network you trust, never to an open one.

examples:
  ggufspec rpc-server --port 50052
  ggufspec rpc-server --host 10.0.0.2 --port 50052 --threads 8
"""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=50052, metavar="P", help="TCP port (default 50052)")
    parser.add_argument("--threads", type=int, default=None, metavar="N", help="CPU threads (default: physical cores)")
    parser.add_argument("--llama-log", action="store_true", help="show llama.cpp's own log")


def run(args: argparse.Namespace) -> int:
    from ggufspec.errors import UserError
    from ggufspec.hardware import physical_cores
    from ggufspec.rpc import is_loopback
    from ggufspec.settings import check_threads

    if not 0 < args.port < 65536:
        raise UserError(f"--port {args.port} is not a TCP port; give one in 1..65535")
    if args.threads is not None:
        check_threads(args.threads)
    if not is_loopback(args.host):
        sys.stderr.write(f"warning: listening on {args.host}: llama.cpp's RPC protocol has no authentication "
                         "and no encryption; anyone who reaches this port can use this machine. Use it on a "
                         "private network you trust only.\n")
    from ggufspec.llama import devices, lib

    lib.set_verbose(args.llama_log)
    threads = args.threads or physical_cores()
    sys.stderr.write(f"RPC worker on {args.host}:{args.port}, {threads} threads (Ctrl-C stops it)\n")
    sys.stderr.flush()
    devices.serve_worker(host=args.host, port=args.port, n_threads=threads)
    return 0
