"""The catalog of pairs: every file loads, refs are well-formed, the schema is enforced."""

from __future__ import annotations

from pathlib import Path

import pytest

from ggufspec.errors import UserError
from ggufspec.models import catalog, embedded
from ggufspec.models.refs import EmbeddedRef, HubRef, parse_ref

PAIRS = catalog.load_pairs()
BY_NAME = {p.name: p for p in PAIRS}
MAINTAINERS = {"bartowski", "unsloth", "Qwen", "ggml-org", "lmstudio-community", "HuggingFaceTB"}


def test_catalog_has_the_pairs_people_use() -> None:
    assert PAIRS[0].name == "default"
    for name in ("llama3.1-8b", "qwen2.5-7b", "qwen3-8b", "gemma3-12b", "smollm2-1.7b"):
        assert name in BY_NAME
    assert any(p.name.endswith("-32b") for p in PAIRS)  # a 30B+ target
    assert len(PAIRS) >= 7
    assert catalog.models_dir() == Path(catalog.__file__).resolve().parent.parent / "pairs"  # package data


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: p.name)
def test_pair_refs_are_well_formed(pair: catalog.PairEntry) -> None:
    for role in ("target", "draft"):
        ref = parse_ref(getattr(pair, role))
        assert isinstance(ref, (HubRef, EmbeddedRef)), role
        assert str(ref) == getattr(pair, role)  # canonical form
        if isinstance(ref, HubRef):
            assert ref.repo_id.split("/")[0] in MAINTAINERS
            assert ref.repo_id.endswith("-GGUF")
            assert ref.quant and ref.filename is None and ref.revision is None
    assert pair.target != pair.draft or pair.name == "default"
    assert pair.title and pair.licence and pair.context
    if pair.source is not None:
        assert pair.source.startswith("https://")
        assert pair.accept_rate is None or 0 < pair.accept_rate <= 1
        assert pair.speedup is None or pair.speedup > 0


def test_default_pair_is_the_embedded_default() -> None:
    default = catalog.get_pair("default")
    assert (default.target, default.draft) == (embedded.DEFAULT_TARGET, embedded.DEFAULT_DRAFT)


def test_public_report_numbers_carry_their_source() -> None:
    llama = BY_NAME["llama3.1-8b"]
    assert llama.source == "https://github.com/ggml-org/llama.cpp/issues/5877"
    assert llama.accept_rate == pytest.approx(526 / 730, abs=0.005)  # n_accept / n_drafted
    assert llama.speedup == pytest.approx(55.473 / 32.49, abs=0.01)  # spec / target-alone tokens/s
    assert llama.to_dict()["expected"]["conditions"]
    assert BY_NAME["qwen3-8b"].to_dict()["expected"] is None  # no number without a report


def test_get_pair_unknown_lists_names() -> None:
    with pytest.raises(UserError, match=r"unknown pair 'llama-9000'; choose one of: default, .*qwen3-8b"):
        catalog.get_pair("llama-9000")
    assert catalog.get_pair(" Qwen3-8B ").name == "qwen3-8b"


@pytest.mark.parametrize(("body", "message"), [
    ('title = "x"\ntarget = "o/r:Q4_K_M"\n', "'draft' must be a non-empty string"),
    ('title = "x"\ntarget = "o/r:Q4_K_M"\ndraft = "./local.gguf"\n', "is a local path"),
    ('title = "x"\ntarget = "o/r:Q4_K_M"\ndraft = "o/d:Q8_0"\nctx = 4\n', "unknown key 'ctx'"),
    ('title = "x"\ntarget = "o/r:Q4_K_M"\ndraft = "o/d:Q8_0"\ncontext = -1\n', "'context' must be a positive integer"),
    ('title = "x"\ntarget = "o/r:Q4_K_M"\ndraft = "o/d:Q8_0"\n[expected]\nspeedup = 2.0\n', "'source' must be"),
    ('title = "x"\ntarget = "o/r:Q4_K_M"\ndraft = "o/d:Q8_0"\n[expected]\naccept_rate = 1.5\nsource = "https://x"\n',
     r"expected.accept_rate must be a number in \(0.0, 1.0\]"),
    ('title = "x"\ntarget = "o/r:Q4_K_M"\ndraft = "o/d:Q8_0"\n[expected]\nsource = "http://x"\nspeedup = 2\n', "https://"),
    ('title = "x"\ntarget = "o/r:Q4_K_M"\ndraft = "o/d:Q8_0"\n[expected]\nsource = "https://x"\n', "needs accept_rate or speedup"),
    ('title = "x"\ntarget = "llama"\ndraft = "o/d:Q8_0"\n', "not a model reference"),
    ("title = \n", "cannot be read"),
])
def test_schema_errors_name_the_file(tmp_path: Path, body: str, message: str) -> None:
    (tmp_path / "bad.toml").write_text(body)
    with pytest.raises(UserError, match=message) as info:
        catalog.load_pairs(tmp_path)
    assert "bad.toml" in str(info.value) or "not a model reference" in message


def test_a_valid_file_loads(tmp_path: Path) -> None:
    (tmp_path / "mine.toml").write_text(
        'title = "Mine"\ntarget = "o/t-GGUF:Q4_K_M"\ndraft = "o/d-GGUF:Q8_0@v1"\ncontext = 4096\n'
        '[expected]\naccept_rate = 0.5\nsource = "https://example.org/report"\n')
    (pair,) = catalog.load_pairs(tmp_path)
    assert (pair.name, pair.draft, pair.context, pair.accept_rate, pair.speedup) == ("mine", "o/d-GGUF:Q8_0@v1", 4096, 0.5, None)
    with pytest.raises(UserError, match="catalog .* is missing"):
        catalog.load_pairs(tmp_path / "nope")
