"""Cost stand-ins: a small model re-laid so that it costs like a big one and still computes the same.

`embedded:smollm2-as-7b:Q8_0` is SmolLM2-135M (the embedded model in Q8_0) with every feed-forward
block widened and extra blocks appended, all new weights zero:

- widening: `ffn_gate`/`ffn_up` gain rows of zeros, `ffn_down` gains columns of zeros. A new hidden
  unit computes silu(0) * 0 = 0 and enters `ffn_down` with a zero weight, so it adds exactly 0.0 to
  each dot product (quantized blocks with scale 0 decode to 0; the reduction order of the original
  blocks is kept, the zeros come after them);
- appended blocks: every weight zero, so attention reads v = 0 and the block adds exactly 0.0 to
  the residual stream.

So the logits are the embedded model's, bit for bit, in the same encoding (tests/test_standin.py
compares them), and a draft's accept rates are the 135M pair's, while each decode reads the
weights, fills the KV cache and does the arithmetic of a model of the stand-in's size: a plain
llama GGUF that llama.cpp, llama-server and llama-bench load as any other.

  stand-in        blocks  n_ff    weights   KV cache (f16) / token   built like
  smollm2-as-1b   32      17408   1.02 B    24 KiB                   Llama 3.2 1B: 16 blocks, 1.24 B, 32 KiB
  smollm2-as-7b   64      62464   7.00 B    48 KiB                   Qwen2.5 7B: 28 blocks, 7.6 B, 56 KiB

Zero regions are left as holes in the file (a sparse file: seconds to write, little disk), which
read back as zeros; what llama.cpp loads, in RAM or VRAM, is the full size.

Written with `gguf`'s writer for the header and our own positioned writes for the data, because
the writer's `write_tensor_data` needs each tensor in memory (1.5 GB of zeros per 7B-class block
group) where holes need none.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ggufspec.errors import UserError

__all__ = ["STANDINS", "StandIn", "widen"]

# Bump when the layout a stand-in is derived with changes: cached files of an older layout are then
# derived anew (the version is part of the file name).
LAYOUT_VERSION = 1


@dataclass(frozen=True)
class StandIn:
    """A cost stand-in of an embedded model: `n_layer` blocks, each with a feed-forward width `n_ff`."""

    name: str
    base: str
    n_layer: int
    n_ff: int
    like: str


STANDINS: dict[str, StandIn] = {
    s.name: s
    for s in (
        StandIn("smollm2-as-1b", "smollm2", n_layer=32, n_ff=17408,
                like="~1B: 32 blocks, 1.02 B weights, 24 KiB of f16 KV a token"),
        StandIn("smollm2-as-7b", "smollm2", n_layer=64, n_ff=62464,
                like="~7B: 64 blocks, 7.00 B weights, 48 KiB of f16 KV a token"),
    )
}

_FFN_ROWS = ("ffn_gate.weight", "ffn_up.weight")  # ggml shape (n_embd, n_ff): rows of zeros appended
_FFN_COLS = ("ffn_down.weight",)  # ggml shape (n_ff, n_embd): each row gains zero blocks at its end


def widen(*, src: Path, dst: Path, n_layer: int, n_ff: int, name: str) -> Path:
    """Write `src` (a llama-architecture GGUF) to `dst` widened to `n_ff` and extended to `n_layer` blocks.

    `dst` is written to `.{dst.name}.{pid}.tmp` beside it, then renamed (ggufspec.models.embedded sweeps
    temp files of dead processes).

    Raises:
        UserError: `src` is not a llama model, or the new shape is smaller than the old or not a
            whole number of quantization blocks.
    """
    import gguf

    from ggufspec.ggufinfo import metadata

    # the checks on our header reader (0.02 s): gguf's reader takes 2-3 s on a 49k-token vocabulary
    kv = metadata(src)
    arch = _field(src, kv, "general.architecture")
    if arch != "llama":
        raise UserError(f"{src.name}: a cost stand-in needs a llama-architecture model, not {arch!r}")
    old_layers = int(_field(src, kv, f"{arch}.block_count"))
    old_ff = int(_field(src, kv, f"{arch}.feed_forward_length"))
    if n_layer < old_layers or n_ff < old_ff:
        raise UserError(f"{src.name}: a stand-in cannot shrink the model ({old_layers} blocks, n_ff {old_ff})")

    reader = gguf.GGUFReader(src)  # the fields with their GGUF types, which the writer needs
    plan: list[tuple[str, tuple[int, ...], int, object | None]] = []  # name, ggml shape, type, source tensor
    for t in reader.tensors:
        shape = tuple(int(n) for n in t.shape)
        if t.name.endswith(_FFN_ROWS):
            shape = (shape[0], n_ff)
        elif t.name.endswith(_FFN_COLS):
            shape = (n_ff, shape[1])
        plan.append((t.name, shape, int(t.tensor_type), t))
    template = [(n.removeprefix("blk.0."), s, q) for n, s, q, _ in plan if n.startswith("blk.0.")]
    for i in range(old_layers, n_layer):
        plan.extend((f"blk.{i}.{suffix}", shape, qtype, None) for suffix, shape, qtype in template)

    writer = gguf.GGUFWriter(path=None, arch=arch)
    for field in reader.fields.values():
        if field.name == "general.architecture" or field.name.startswith("GGUF."):
            continue
        value = field.contents()
        if field.name == f"{arch}.block_count":
            value = n_layer
        elif field.name == f"{arch}.feed_forward_length":
            value = n_ff
        elif field.name == "general.name":
            value = f"{value} as {name} (cost stand-in)"
        sub = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, value, field.types[0], sub_type=sub)
    writer.add_uint32("ggufspec.stand_in.base_block_count", old_layers)
    writer.add_uint32("ggufspec.stand_in.base_feed_forward_length", old_ff)
    sizes = [_nbytes(shape, qtype, tname) for tname, shape, qtype, _ in plan]
    for (tname, shape, qtype, _), size in zip(plan, sizes):
        writer.add_tensor_info(tname, tuple(reversed(shape)), np.dtype(np.float32), size,
                               raw_dtype=gguf.GGMLQuantizationType(qtype))

    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
    try:
        writer.write_header_to_file(path=tmp)
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        out = writer.fout[0]
        out.flush()
        start = _pad(out.tell(), writer.data_alignment)
        offset = 0
        for (_, shape, _, source), size in zip(plan, sizes):
            if source is not None:
                _write_tensor(out, at=start + offset, source=source, shape=shape, nbytes=size)
            offset += _pad(size, writer.data_alignment)
        out.truncate(start + offset)  # the trailing holes
        writer.close()
        os.replace(tmp, dst)
    finally:
        tmp.unlink(missing_ok=True)
    return dst


def _write_tensor(out, *, at: int, source, shape: tuple[int, ...], nbytes: int) -> None:
    """Write a source tensor's bytes at `at` in the widened shape; the zeros stay holes."""
    data = np.asarray(source.data).view(np.uint8)
    if shape[0] == int(source.shape[0]):  # rows of the same length (appended, if any, after them)
        out.seek(at)
        out.write(data.tobytes())
        return
    rows = int(np.prod([int(n) for n in source.shape[1:]]))
    new_row = nbytes // rows  # each row gains zero blocks at its end
    for r, row in enumerate(data.reshape(rows, data.size // rows)):
        out.seek(at + r * new_row)
        out.write(row.tobytes())


def _nbytes(shape: tuple[int, ...], qtype: int, name: str) -> int:
    import gguf

    block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(qtype)]
    if shape[0] % block:
        raise UserError(f"{name}: a row of {shape[0]} is not a whole number of {block}-wide quantization blocks")
    return int(np.prod(shape)) // block * size


def _pad(n: int, align: int) -> int:
    return (n + align - 1) // align * align


def _field(src: Path, kv: dict, key: str):
    if key not in kv:
        raise UserError(f"{src.name}: the GGUF has no {key!r}")
    return kv[key]
