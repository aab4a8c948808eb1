"""Cost stand-ins (ggufspec.models.standin): a model widened and extended with zero weights computes the
very same logits as the model it came from, and costs what its new shape costs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tiny_models import read_gguf_kv

from ggufspec.errors import UserError
from ggufspec.ggufinfo import read_model_info
from ggufspec.llama.context import Context
from ggufspec.llama.model import Model
from ggufspec.models.standin import STANDINS, widen
from ggufspec.settings import ContextSettings

TEXT = "The printing press spread across Europe within decades, and books became cheap. " * 3


def _logits(path: Path, tokens: list[int] | None = None) -> tuple[list[int], list[np.ndarray]]:
    """Logits of a prompt (batch) and of three one-row decodes after it."""
    model = Model(path)
    ctx = Context(model, settings=ContextSettings(n_ctx=256).with_cache_type("f16"))
    try:
        tokens = tokens or model.tokenize(TEXT)[:40]
        ctx.decode(tokens[:24])
        ctx.decode(tokens[24:32], logits="all")
        rows = [ctx.logits(j).copy() for j in range(8)]
        for tok in tokens[32:35]:
            ctx.decode([tok])
            rows.append(ctx.logits(-1).copy())
        return tokens, rows
    finally:
        ctx.close(), model.close()


@pytest.mark.parametrize("fixture", ["tiny_target", "tiny_target_q8"])
def test_widened_model_gives_bit_identical_logits(fixture: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    src = request.getfixturevalue(fixture)
    kv = read_gguf_kv(src)
    layers, ff = int(kv["llama.block_count"].value), int(kv["llama.feed_forward_length"].value)
    dst = widen(src=src, dst=tmp_path / "wide.gguf", n_layer=layers + 3, n_ff=ff * 4, name="tiny-wide")
    wide = read_gguf_kv(dst)
    assert int(wide["llama.block_count"].value) == layers + 3
    assert int(wide["llama.feed_forward_length"].value) == ff * 4
    shapes = {t.name: list(t.shape) for t in read_model_info(dst).tensors}
    base = {t.name: list(t.shape) for t in read_model_info(src).tensors}
    assert shapes[f"blk.{layers + 2}.ffn_down.weight"] == [ff * 4, base["blk.0.ffn_down.weight"][1]]
    assert shapes["blk.0.ffn_up.weight"] == [base["blk.0.ffn_up.weight"][0], ff * 4]
    assert len(shapes) == len(base) + 3 * sum(n.startswith("blk.0.") for n in base)
    tokens, rows = _logits(src)
    _, widened = _logits(dst, tokens)
    for j, (a, b) in enumerate(zip(rows, widened)):
        assert np.array_equal(a, b), (fixture, j, float(np.abs(a - b).max()))
    assert not list(tmp_path.glob(".*.tmp"))


def test_a_stand_in_cannot_shrink_a_model(tiny_target: Path, tmp_path: Path) -> None:
    with pytest.raises(UserError, match="cannot shrink"):
        widen(src=tiny_target, dst=tmp_path / "x.gguf", n_layer=1, n_ff=32, name="x")
    assert not list(tmp_path.iterdir())


def test_stand_in_shapes_are_the_sizes_they_claim() -> None:
    # SmolLM2-135M: n_embd 576, 9 heads of 64, 3 KV heads, 49152-token tied embedding
    embd, q, kv, vocab = 576, 576, 192, 49152
    for s, billions, kv_kib in ((STANDINS["smollm2-as-1b"], 1.0, 24), (STANDINS["smollm2-as-7b"], 7.0, 48)):
        per_block = embd * (q + 2 * kv) + q * embd + 3 * embd * s.n_ff
        weights = vocab * embd + s.n_layer * per_block
        assert abs(weights / 1e9 - billions) / billions < 0.03, (s.name, weights)
        assert s.n_layer * 2 * kv * 2 == kv_kib * 1024, s.name  # f16 K and V, per token
        assert s.n_ff % 256 == 0  # whole K-quant blocks


@pytest.mark.slow
def test_smollm2_as_1b_generates_the_embedded_models_text(tmp_path: Path) -> None:
    """The public path: `run` on the stand-in and on the embedded model of the same type agree."""

    def run(target: str) -> dict:
        out = subprocess.run(
            [sys.executable, "-m", "ggufspec.cli", "run", "--target", target, "--draft", "none", "--chat",
             "-p", "Why is the sky blue?", "-n", "24", "--json"],
            capture_output=True, text=True, timeout=600,
        )
        assert out.returncode == 0, out.stderr[-2000:]
        return json.loads(out.stdout)

    base, stand_in = run("embedded:smollm2:Q8_0"), run("embedded:smollm2-as-1b:Q8_0")
    assert stand_in["text"] == base["text"] and base["stats"]["generated_tokens"] >= 8
