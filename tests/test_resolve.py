"""One resolver for what a command means by --pair/--target/--draft (ggufspec.models.resolve)."""

from __future__ import annotations

import pytest

from ggufspec.errors import UserError
from ggufspec.models.catalog import get_pair
from ggufspec.models.embedded import DEFAULT_DRAFT, DEFAULT_TARGET
from ggufspec.models.resolve import LOOKUP, PairRefs, resolve_pair_refs


def test_nothing_named_is_the_embedded_default_pair() -> None:
    assert resolve_pair_refs() == PairRefs(target=DEFAULT_TARGET, drafts=(DEFAULT_DRAFT, LOOKUP))  # model and lookup


def test_a_target_alone_and_none() -> None:
    assert resolve_pair_refs(target="a.gguf") == PairRefs(target="a.gguf", drafts=())
    assert resolve_pair_refs(target="a.gguf", draft="none").draft is None
    assert resolve_pair_refs(draft="none") == PairRefs(target=DEFAULT_TARGET, drafts=())
    # bench measures something when only a target is named
    assert resolve_pair_refs(target="a.gguf", target_only_drafts=[LOOKUP]).drafts == (LOOKUP,)


def test_a_draft_alone_drafts_for_the_default_target() -> None:
    assert resolve_pair_refs(draft="lookup") == PairRefs(target=DEFAULT_TARGET, drafts=(LOOKUP,))
    assert resolve_pair_refs(draft=["b.gguf", "lookup", "b.gguf"]).drafts == ("b.gguf", LOOKUP)


def test_a_catalog_pair() -> None:
    entry = get_pair("qwen2.5-7b")
    assert resolve_pair_refs(pair="qwen2.5-7b") == PairRefs(target=entry.target, drafts=(entry.draft,))
    extended = resolve_pair_refs(pair="qwen2.5-7b", draft=["lookup"], extra_drafts=True)
    assert extended.drafts == (entry.draft, LOOKUP)  # bench: the pair's draft first, then the others


@pytest.mark.parametrize("kw, message", [
    ({"pair": "qwen2.5-7b", "target": "a.gguf"}, "--pair names both models"),
    ({"pair": "qwen2.5-7b", "draft": "lookup"}, "--pair names both models"),
    ({"draft": ["none", "lookup"]}, "--draft none means the target alone"),
    ({"draft": " "}, "an empty --draft"),
    ({"pair": "no-such-pair"}, "no-such-pair"),
])
def test_refusals_are_one_line(kw: dict, message: str) -> None:
    with pytest.raises(UserError, match=message) as err:
        resolve_pair_refs(**kw)
    assert "\n" not in str(err.value)
