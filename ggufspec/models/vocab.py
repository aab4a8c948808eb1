"""Can this draft speculate for that target? A verdict on their vocabularies.

Speculative decoding hands draft token ids to the target, so both must mean the same thing by the
same id. llama.cpp's rule (`common_speculative_are_compatible` in common/speculative.cpp):

* the same vocabulary type (SPM, BPE, ...),
* the same special tokens: BOS and EOS ids, add-BOS and add-EOS,
* sizes within 128 of each other (SPEC_VOCAB_MAX_SIZE_DIFFERENCE),
* the same token text for every id from 5 on (SPEC_VOCAB_CHECK_START_TOKEN_ID) up to the smaller size.

We read the 128-token allowance as what it is for: a differing *tail* of the vocabulary (padding or
added tokens at the end). A pair whose token texts agree up to some id and differ only within the
last 128 ids of the larger vocabulary is `compatible` here, whether the tail is extra tokens (the
llama.cpp case) or renamed ones (a fine-tune that renamed its reserved tokens); `llama_cpp_compatible`
says whether llama.cpp's own check would also pass. Output stays exact either way (the target
verifies every token); only acceptance suffers on tail ids. llama.cpp also compares the vocabulary
types as booleans (a quirk); we compare the types themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ggufspec.errors import UserError
from ggufspec.ggufinfo import VocabInfo, read_vocab

SPEC_VOCAB_MAX_SIZE_DIFFERENCE = 128
SPEC_VOCAB_CHECK_START_TOKEN_ID = 5

_FIX = "pick a draft from the same model family as the target"

Status = Literal["identical", "compatible", "incompatible"]


@dataclass(frozen=True, kw_only=True)
class VocabVerdict:
    """The verdict, the first token id where the vocabularies differ, and a one-line message."""

    status: Status
    first_diff_id: int | None  # None when every token text matches
    target_text: str | None  # token text at first_diff_id (None: the target has no such id)
    draft_text: str | None
    llama_cpp_compatible: bool  # whether llama.cpp's own check would accept the pair
    message: str

    @property
    def ok(self) -> bool:
        return self.status != "incompatible"


def _show(text: str | None) -> str:
    if text is None:
        return "(none)"
    return repr(text)


def _first_diff(a: tuple[str, ...], b: tuple[str, ...], start: int) -> int | None:
    n = min(len(a), len(b))
    for i in range(start, n):
        if a[i] != b[i]:
            return i
    return n if len(a) != len(b) and start <= n else None


def compare_vocab(*, target: VocabInfo, draft: VocabInfo) -> VocabVerdict:
    """Compare a draft's vocabulary with the target's.

    Args:
        target: the target model's vocabulary (`ggufinfo.read_vocab`).
        draft: the draft model's vocabulary.

    Returns:
        `identical` (same tokens, types and special tokens), `compatible` (usable for speculation,
        see the module docstring) or `incompatible`, with the first differing token id, both
        texts, and a message that names them and the fix.
    """
    t_tok, d_tok = target.tokens, draft.tokens
    diff_any = _first_diff(t_tok, d_tok, 0)
    diff = _first_diff(t_tok, d_tok, SPEC_VOCAB_CHECK_START_TOKEN_ID)

    def text(tokens: tuple[str, ...], i: int | None) -> str | None:
        return tokens[i] if i is not None and i < len(tokens) else None

    shown = diff if diff is not None else diff_any
    t_text, d_text = text(t_tok, shown), text(d_tok, shown)
    where = (
        f"first differing token id {shown}: target {_show(t_text)}, draft {_show(d_text)}"
        if shown is not None
        else "all token texts match"
    )

    problems: list[str] = []
    if target.vocab_type != draft.vocab_type:
        problems.append(f"vocabulary types differ (target {target.vocab_type}, draft {draft.vocab_type})")
    specials = []
    for label, a, b in (
        ("BOS id", target.bos_id, draft.bos_id),
        ("EOS id", target.eos_id, draft.eos_id),
        ("add-BOS", target.add_bos, draft.add_bos),
        ("add-EOS", target.add_eos, draft.add_eos),
    ):
        if a != b:
            specials.append(f"{label} {a} vs {b}")
    if specials:
        problems.append("special tokens differ (target vs draft: " + ", ".join(specials) + ")")
    size_gap = abs(target.size - draft.size)
    if size_gap > SPEC_VOCAB_MAX_SIZE_DIFFERENCE:
        problems.append(
            f"sizes differ by {size_gap} (target {target.size}, draft {draft.size}; "
            f"at most {SPEC_VOCAB_MAX_SIZE_DIFFERENCE} allowed)"
        )
    text_mismatch_in_common = diff is not None and diff < min(target.size, draft.size)
    llama_ok = not problems and not text_mismatch_in_common
    tail = max(target.size, draft.size) - diff if diff is not None else 0
    if not problems and tail > SPEC_VOCAB_MAX_SIZE_DIFFERENCE:
        problems.append(
            f"token texts differ from id {diff} on, {tail} ids before the end "
            f"(only the last {SPEC_VOCAB_MAX_SIZE_DIFFERENCE} may differ)"
        )

    if problems:
        return VocabVerdict(
            status="incompatible",
            first_diff_id=shown,
            target_text=t_text,
            draft_text=d_text,
            llama_cpp_compatible=False,
            message=f"the draft's vocabulary does not match the target's: {'; '.join(problems)}; {where}; {_FIX}",
        )

    identical = (
        diff_any is None
        and target.token_types == draft.token_types
        and target.model == draft.model
    )
    if identical:
        return VocabVerdict(
            status="identical",
            first_diff_id=None,
            target_text=None,
            draft_text=None,
            llama_cpp_compatible=True,
            message=f"vocabularies are identical ({target.size} tokens, {target.vocab_type})",
        )
    if diff is None:
        detail = (
            f"token texts match from id {SPEC_VOCAB_CHECK_START_TOKEN_ID} on; they differ only "
            f"below it (id {diff_any})" if diff_any is not None else "token texts match; token types differ"
        )
    else:
        detail = f"they differ only in the last {tail} ids ({where})"
        if not llama_ok:
            detail += "; llama.cpp's own check would refuse this pair"
    return VocabVerdict(
        status="compatible",
        first_diff_id=shown,
        target_text=t_text,
        draft_text=d_text,
        llama_cpp_compatible=llama_ok,
        message=f"vocabularies are compatible ({target.size} and {draft.size} tokens): {detail}",
    )


def check_vocab(target: Path, draft: Path) -> None:
    """Refuse an incompatible pair of files before loading anything (llama.cpp's rule, above)."""
    verdict = compare_vocab(target=read_vocab(target), draft=read_vocab(draft))
    if verdict.status == "incompatible":
        raise UserError(verdict.message)
