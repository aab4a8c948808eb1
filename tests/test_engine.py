"""The draft/verify loop on tiny generated models: greedy output equals the target alone,
token for token, for every drafter and draft-length policy; sampling keeps the target's
distribution (seeded chi-square); stops, context limits and UTF-8 text are right.

Targets are Q8_0: llama.cpp's CPU kernels are batch-invariant for it (see conftest.py).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from ggufspec.errors import UserError
from ggufspec.loop.acceptance import AcceptRule, Variant
from ggufspec.loop.model_drafter import ModelDrafter
from ggufspec.loop.lookup import LookupDrafter
from ggufspec.loop.rounds import Source
from ggufspec.loop.sampling import SamplingSettings
from ggufspec.loop.speculation import DraftLengthSettings, SpeculativeSettings
from ggufspec.runtime import SpeculativePair, load_pair
from ggufspec.settings import ContextSettings, PairSettings

PROMPTS: list[tuple[str, str]] = [
    ("chat", "Hi! Can you tell me a joke about cats?"),
    ("chat", "What is the capital of France, and why is it famous?"),
    ("chat", "Give me three tips for sleeping better."),
    ("chat", "Translate 'good morning' into Spanish and German."),
    ("chat", "Explain recursion to a five year old."),
    ("chat", "Write a limerick about a lighthouse keeper."),
    ("prose", "prompt number 23: tell me"),  # the byte-vocabulary target ends on an EOG token
    ("code", "def fibonacci(n):\n    if n < 2:\n        return n\n"),
    ("code", "import numpy as np\n\ndef softmax(x):\n"),
    ("code", "SELECT name, count(*) FROM users GROUP BY"),
    ("code", "for (int i = 0; i < n; i++) {\n    sum += a[i] * b[i];\n"),
    ("code", "class Stack:\n    def __init__(self):\n        self.items = []\n"),
    ("code", "#!/bin/bash\nfor f in *.txt; do\n"),
    ("prose", "Once upon a time, in a small village by the sea,"),
    ("prose", "The history of the printing press begins"),
    ("prose", "In 1969, astronauts first walked on the Moon. The mission"),
    ("prose", "Photosynthesis is the process by which plants"),
    ("prose", "The quick brown fox jumps over the lazy dog. The quick brown fox"),
    ("prose", "Rain fell on the city all night, and by morning"),
    ("prose", "A B C D E F G H I J K L M N O P A B C D E F G H"),
]
# (drafter, draft_max, adaptive): per drafter a short and a long fixed length and adaptive at the
# cap, as tests/test_default_pair.py's grid (16 configs before: 18 s here for no path these skip)
CONFIGS = [("model", 1, False), ("model", 4, False), ("model", 8, True),
           ("lookup", 2, False), ("lookup", 8, False), ("lookup", 8, True)]


def _open(target: Path, draft: Path | None, n_ctx: int = 512) -> SpeculativePair:
    return load_pair(target=str(target), draft=str(draft) if draft else "none",
                     settings=PairSettings(context=ContextSettings(n_ctx=n_ctx, n_threads=1)))


@pytest.fixture(scope="module", params=["smollm2-vocab", "byte-vocab"])
def pair(request, tiny_target_q8, tiny_draft_q8, tiny_bytes_target_q8, tiny_bytes_draft_q8):
    target, draft = (
        (tiny_target_q8, tiny_draft_q8) if request.param == "smollm2-vocab" else (tiny_bytes_target_q8, tiny_bytes_draft_q8)
    )
    p = _open(target, draft)
    p.kind = request.param  # type: ignore[attr-defined]
    yield p
    p.close()


def _encode(pair: SpeculativePair, kind: str, text: str) -> list[int]:
    if kind == "chat":
        return pair.encode(messages=[{"role": "user", "content": text}])
    return pair.encode(prompt=text)


def test_greedy_is_token_identical_to_the_target_alone(pair: SpeculativePair) -> None:
    model_drafter = pair.drafters[0]
    lookup = LookupDrafter()
    stop_reasons = Counter()
    gains = Counter()
    for kind, text in PROMPTS:
        tokens = _encode(pair, kind, text)
        base = pair.generate(prompt_tokens=tokens, max_tokens=64, drafters=()).run()
        stop_reasons[base.stats.stop_reason] += 1
        for name, k, adaptive in CONFIGS:
            spec = SpeculativeSettings(length=DraftLengthSettings(draft_max=k, fixed=not adaptive))
            out = pair.generate(prompt_tokens=tokens, max_tokens=64, speculative=spec,
                                drafters=[model_drafter if name == "model" else lookup]).run()
            assert out.tokens == base.tokens, (pair.kind, text, name, k, adaptive)
            assert out.text == base.text
            assert out.stats.stop_reason == base.stats.stop_reason
            gains[name] += out.stats.accepted
    assert gains["model"] > 0  # the draft model really drafted and got tokens accepted
    if pair.kind == "byte-vocab":  # type: ignore[attr-defined]
        # A random 49k-token model never repeats an n-gram, so lookup has nothing to propose
        # there; the 377-token byte model repeats, so lookup must have been exercised.
        assert gains["lookup"] > 0
        assert stop_reasons["eog"] >= 1


def test_greedy_identity_when_generation_fills_the_context(tiny_target_q8, tiny_draft_q8) -> None:
    with _open(tiny_target_q8, tiny_draft_q8, n_ctx=96) as p:
        tokens = p.encode(prompt="The quick brown fox jumps over the lazy dog. " * 4)
        base = p.generate(prompt_tokens=tokens, max_tokens=1000, drafters=()).run()
        assert base.stats.stop_reason == "context"
        assert len(tokens) + len(base.tokens) == p.target_ctx.n_ctx  # llama.cpp may round n_ctx up
        for k in (1, 4, 8):
            for drafter in (p.drafters[0], LookupDrafter()):
                spec = SpeculativeSettings(length=DraftLengthSettings(draft_max=k, fixed=True))
                out = p.generate(prompt_tokens=tokens, max_tokens=1000, speculative=spec, drafters=[drafter]).run()
                assert out.tokens == base.tokens and out.stats.stop_reason == "context"


def test_target_as_its_own_draft_accepts_everything(tiny_target_q8) -> None:
    # mlx-lm's check: with the target as the draft, every drafted token is accepted and the
    # output is made of draft tokens plus one bonus token per round.
    with _open(tiny_target_q8, tiny_target_q8) as p:
        out = p.generate(prompt="hello world", max_tokens=40,
                         speculative=SpeculativeSettings(length=DraftLengthSettings(draft_max=4, fixed=True))).run()
    s = out.stats
    assert s.accept_rate == 1.0 and s.drafted == s.accepted > 0
    assert out.sources[0] is Source.TARGET
    assert set(out.sources[1:]) <= {Source.DRAFT, Source.BONUS}
    assert Source.CORRECTION not in out.sources
    assert s.mean_accepted_len == pytest.approx((s.generated_tokens - 1) / s.rounds)
    assert s.accept_rate_by_position == (1.0, 1.0, 1.0, 1.0)


def test_max_tokens_and_stop_strings(tiny_target_q8, tiny_draft_q8) -> None:
    with _open(tiny_target_q8, tiny_draft_q8) as p:
        full = p.generate(prompt="Once upon a time", max_tokens=40, drafters=()).run()
        assert len(full.tokens) == 40 and full.stats.stop_reason == "length"
        short = p.generate(prompt="Once upon a time", max_tokens=7).run()
        assert short.tokens == full.tokens[:7]
        # a stop string taken from the middle of the full text: output ends right before it
        cut = len(full.text) // 2
        stop = full.text[cut : cut + 3]
        if stop.strip():
            out = p.generate(prompt="Once upon a time", max_tokens=40, stop=[stop]).run()
            assert out.stats.stop_reason == "stop"
            assert out.text == full.text[: full.text.find(stop)]


def test_utf8_is_never_split(tiny_bytes_target_q8) -> None:
    # The byte vocabulary spells non-ASCII text one byte token at a time: pieces must hold
    # incomplete characters back and never emit U+FFFD for valid text.
    with _open(tiny_bytes_target_q8, None) as p:
        model = p.target_model
        from ggufspec.loop.text import Detokenizer

        text = "héllo wörld, 日本語 ✓"
        ids = model.tokenize(text, add_special=False)
        assert len(ids) > len(text)  # multi-byte characters really are split over tokens
        d = Detokenizer(model)
        pieces = [d.push(t) for t in ids] + [d.flush()]
        assert "".join(pieces).strip() == text
        assert all("\ufffd" not in piece for piece in pieces)


def test_prompt_longer_than_the_context_is_a_user_error(tiny_target_q8) -> None:
    with _open(tiny_target_q8, None, n_ctx=32) as p:
        n_ctx = p.target_ctx.n_ctx  # llama.cpp rounds 32 up
        with pytest.raises(UserError, match=rf"prompt is \d+ tokens but the context holds {n_ctx}"):
            p.generate(prompt="word " * (n_ctx + 10)).run()


def test_greedy_rule_refused_when_sampling() -> None:
    with pytest.raises(UserError, match="--accept greedy needs --temp 0"):
        SpeculativeSettings(accept=AcceptRule.GREEDY).rule_for(SamplingSettings(temperature=0.7))


def test_confidence_stop_and_draft_min(tiny_target_q8, tiny_draft_q8) -> None:
    with _open(tiny_target_q8, tiny_draft_q8) as p:
        base = p.generate(prompt="Once upon a time", max_tokens=32, drafters=()).run()
        spec = SpeculativeSettings(length=DraftLengthSettings(draft_max=8, draft_p_min=0.9, fixed=True))
        out = p.generate(prompt="Once upon a time", max_tokens=32, speculative=spec).run()
        assert out.tokens == base.tokens
        free = p.generate(prompt="Once upon a time", max_tokens=32, speculative=SpeculativeSettings(length=DraftLengthSettings(draft_max=8, fixed=True))).run()
        assert out.stats.drafted < free.stats.drafted  # the confidence stop cut drafts short
        spec = SpeculativeSettings(length=DraftLengthSettings(draft_max=8, draft_min=8, draft_p_min=0.9, fixed=True))
        gated = p.generate(prompt="Once upon a time", max_tokens=32, speculative=spec).run()
        assert gated.tokens == base.tokens and gated.stats.drafted <= out.stats.drafted


# ---- sampling keeps the target's distribution ----------------------------------------------


def _token_counts(p: SpeculativePair, tokens: list[int], sampling_kw: dict, spec: SpeculativeSettings | None,
                  runs: int, n_tokens: int) -> list[Counter]:
    counts = [Counter() for _ in range(n_tokens)]
    for seed in range(runs):
        s = SamplingSettings(seed=seed, **sampling_kw)
        out = p.generate(prompt_tokens=tokens, max_tokens=n_tokens, sampling=s,
                         speculative=spec or SpeculativeSettings(),
                         **({} if spec is not None else {"drafters": ()})).run()
        for i, t in enumerate(out.tokens):
            counts[i][t] += 1
    return counts


def _two_sample_p(a: Counter, b: Counter) -> float:
    keys = sorted(set(a) | set(b), key=lambda t: -(a[t] + b[t]))
    table = np.array([[a[t] for t in keys], [b[t] for t in keys]], dtype=float)
    big = table.sum(axis=0) >= 10
    table = np.column_stack([table[:, big], table[:, ~big].sum(axis=1)])
    table = table[:, table.sum(axis=0) > 0]
    if table.shape[1] < 2:
        return 1.0
    return float(sps.chi2_contingency(table).pvalue)


@pytest.mark.parametrize(
    "sampling_kw",
    [{"temperature": 1.0}, {"temperature": 0.7, "top_p": 0.9}],
    ids=["temp1", "temp0.7-top_p0.9"],
)
@pytest.mark.parametrize(
    "rule, variant",
    [(AcceptRule.REJECTION, Variant.LEVIATHAN), (AcceptRule.REJECTION, Variant.CHEN), (AcceptRule.MATCH, Variant.LEVIATHAN)],
    ids=["leviathan", "chen", "match"],
)
def test_sampled_tokens_follow_the_target_alone(tiny_bytes_target_q8, tiny_bytes_draft_q8, sampling_kw, rule, variant) -> None:
    runs, n_tokens = 700, 4
    with _open(tiny_bytes_target_q8, tiny_bytes_draft_q8) as p:
        tokens = p.encode(prompt="hello world")
        spec = SpeculativeSettings(accept=rule, variant=variant, length=DraftLengthSettings(draft_max=3, fixed=True))
        ours = _token_counts(p, tokens, sampling_kw, spec, runs, n_tokens)
        alone = _token_counts(p, tokens, sampling_kw, None, runs, n_tokens)
    for i in range(n_tokens):
        assert _two_sample_p(ours[i], alone[i]) > 1e-3, (rule, variant, sampling_kw, i)


def test_rejection_accepts_more_than_match_when_sampling(tiny_bytes_target_q8, tiny_bytes_draft_q8) -> None:
    rates = {}
    with _open(tiny_bytes_target_q8, tiny_bytes_draft_q8) as p:
        for rule in (AcceptRule.REJECTION, AcceptRule.MATCH):
            drafted = accepted = 0
            for seed in range(40):
                out = p.generate(prompt="hello world", max_tokens=24,
                                 sampling=SamplingSettings(temperature=0.8, seed=seed),
                                 speculative=SpeculativeSettings(accept=rule)).run()
                drafted += out.stats.drafted
                accepted += out.stats.accepted
            rates[rule] = accepted / drafted
    assert rates[AcceptRule.REJECTION] > rates[AcceptRule.MATCH]


def test_seeded_runs_are_reproducible(tiny_bytes_target_q8, tiny_bytes_draft_q8) -> None:
    with _open(tiny_bytes_target_q8, tiny_bytes_draft_q8) as p:
        s = SamplingSettings(temperature=0.9, seed=42)
        a = p.generate(prompt="hello", max_tokens=30, sampling=s).run()
        b = p.generate(prompt="hello", max_tokens=30, sampling=s).run()
        assert a.tokens == b.tokens


def test_greedy_equals_llama_cpp_pythons_own_loop(tiny_target_q8, tiny_draft_q8) -> None:
    # an independent reference: llama-cpp-python's Llama.generate at temperature 0 on the same file,
    # KV cache type and flash attention; our target alone and our speculative loop must both match it
    import llama_cpp

    from ggufspec.ggufinfo import read_model_info
    from ggufspec.llama.lib import high_level_repack
    from ggufspec.loop.exactness import auto_cache_type

    cache = {"q8_0": llama_cpp.GGML_TYPE_Q8_0, "f16": llama_cpp.GGML_TYPE_F16}[
        auto_cache_type(read_model_info(tiny_target_q8), on_gpu=False)]
    with high_level_repack():  # no AMX repacking where llama.cpp's AMX matmul crashes, as ggufspec loads
        llm = llama_cpp.Llama(model_path=str(tiny_target_q8), n_ctx=512, n_threads=1, n_gpu_layers=0,
                              type_k=cache, type_v=cache, flash_attn=True, verbose=False)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    try:
        with _open(tiny_target_q8, tiny_draft_q8) as p:
            for _, text in PROMPTS[:8]:
                tokens = p.encode(prompt=text)
                assert tokens == llm.tokenize(text.encode(), add_bos=True, special=False)
                ref: list[int] = []
                for t in llm.generate(tokens, temp=0.0, repeat_penalty=1.0):
                    ref.append(t)
                    if llama_cpp.llama_vocab_is_eog(vocab, t) or len(ref) == 40:
                        break
                alone = p.generate(prompt_tokens=tokens, max_tokens=40, drafters=()).run()
                spec = p.generate(prompt_tokens=tokens, max_tokens=40, speculative=SpeculativeSettings(
                    length=DraftLengthSettings(draft_max=4, always_draft=True))).run()
                assert alone.tokens == ref and spec.tokens == ref, text
                shown = [t for t in ref if not llama_cpp.llama_vocab_is_eog(vocab, t)]  # control tokens render nothing
                assert spec.text == alone.text == llm.detokenize(shown).decode("utf-8", errors="replace")
    finally:
        llm.close()


@pytest.mark.parametrize("own_draft", [False, True])
def test_forks_generate_beside_the_pair_without_touching_its_caches(tiny_target_q8, tiny_draft_q8, own_draft) -> None:
    """`SpeculativePair.fork`: a second target context and drafter copies on the loaded weights.
    Generations on the pair and on a fork, interleaved token by token (as the bench's lockstep
    runs them), give what each gives alone; the pair's cache holds only its own generation; a
    draft that takes the target's KV cache (the target as its own draft does) takes the fork's."""
    from ggufspec.bench.lockstep import interleave
    from ggufspec.loop.engine import generate

    pair = _open(tiny_target_q8, tiny_target_q8 if own_draft else tiny_draft_q8)
    try:
        a = pair.encode(messages=[{"role": "user", "content": PROMPTS[0][1]}])
        b = pair.encode(prompt=PROMPTS[7][1])
        spec = SpeculativeSettings(length=DraftLengthSettings(draft_max=4))
        alone_a = pair.generate(prompt_tokens=a, max_tokens=40, drafters=()).run().tokens
        alone_b = pair.generate(prompt_tokens=b, max_tokens=40, drafters=()).run().tokens
        lookup = LookupDrafter()
        target, drafters = pair.fork([pair.drafters[0], lookup])
        assert target is not pair.target_ctx and drafters[0] is not pair.drafters[0]
        assert isinstance(drafters[1], LookupDrafter) and drafters[1] is not lookup
        # a copy takes the fork's KV cache exactly where the original takes the pair's
        assert (drafters[0].kv_source is target) == (pair.drafters[0].kv_source is pair.target_ctx)
        assert pair.drafters[0].kv_source is pair.target_ctx or not own_draft
        on_pair = pair.generate(prompt_tokens=a, max_tokens=40, speculative=spec, cache_prompt=False)
        on_fork = generate(target=target, prompt=b, drafters=drafters[:1], max_tokens=40, speculative=spec,
                           cache_prompt=False)
        busy = interleave([on_pair, on_fork])
        assert on_pair.tokens == alone_a and on_fork.tokens == alone_b
        assert on_fork.stats.accepted > 0 and all(s > 0 for s in busy)
        assert list(pair.target_ctx.tokens[: len(a)]) == a and list(target.tokens[: len(b)]) == b
        with pytest.raises(ValueError, match="not one this pair loaded"):
            pair.fork([ModelDrafter(target, name="stranger")])
    finally:
        pair.close()
