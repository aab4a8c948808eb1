"""Run a script or the ggufspec CLI with Python's collector timed: each collection over 1 ms is
printed to stderr (generation, ms, wall clock), and the count of collections per generation at exit.

    .venv/bin/python docs/bench/stall-2026-12-07/gc_pauses.py scripts/control_ab.py 4 OUT.json --old spacing=1 \\
        --regime q8_0 --set tuned --categories chat --limit 1 --fresh
    .venv/bin/python docs/bench/stall-2026-12-07/gc_pauses.py ggufspec serve --port 8765
    .venv/bin/python docs/bench/stall-2026-12-07/gc_pauses.py ggufspec bench --regimes q8_0,default --limit 2 --repeats 1
"""
import atexit
import gc
import runpy
import sys
import time

_start = [0.0]
_count = [0, 0, 0]


def _timed(phase: str, info: dict) -> None:
    if phase == "start":
        _start[0] = time.perf_counter()
        return
    ms = (time.perf_counter() - _start[0]) * 1e3
    _count[info["generation"]] += 1
    if ms > 1.0:
        print(f"GC gen{info['generation']} {ms:.1f} ms at {time.strftime('%H:%M:%S')}", file=sys.stderr, flush=True)


gc.callbacks.append(_timed)
atexit.register(lambda: print(f"GC collections by generation {_count}", file=sys.stderr))
if sys.argv[1] == "ggufspec":
    from ggufspec.cli import main

    sys.exit(main(sys.argv[2:]))
sys.argv = sys.argv[1:]
sys.path.insert(0, "scripts")
runpy.run_path(sys.argv[0], run_name="__main__")
