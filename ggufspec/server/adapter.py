"""The server's one door into the library: load the pair, describe it, encode, start a generation.

Every call the server makes into ggufspec's runtime and engine is here, so a change in the
library's API is a change in this file only. (Tests put a fake `start_generation` here too.)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from ggufspec.errors import UserError
from ggufspec.loop.engine import Generation
from ggufspec.loop.parallel import Slot
from ggufspec.loop.sampling import SamplingSettings
from ggufspec.loop.speculation import SpeculativeSettings
from ggufspec.models.resolve import PairRefs
from ggufspec.runtime import SpeculativePair, load_pair
from ggufspec.server.error_bodies import invalid
from ggufspec.server.schemas import Params
from ggufspec.settings import PairSettings

#: The loaded target/draft pair the server serves (the rest of the package names it through here).
Pair = SpeculativePair


@dataclass(frozen=True, kw_only=True)
class PairInfo:
    """What the HTTP side shows of the loaded pair."""

    target_file: str  # the target's file name
    target_stem: str  # ... without .gguf: the default model id
    draft_name: str  # the drafts' file names and/or "lookup", joined by "+"; or "none"
    drafters: tuple[tuple[str, str], ...] = ()  # (name, file name or "lookup") of each, in --draft order
    n_ctx: int
    n_vocab: int


@dataclass(frozen=True, kw_only=True)
class GenerationRequest:
    """One generation as the engine takes it."""

    tokens: tuple[int, ...]
    max_tokens: int
    sampling: SamplingSettings
    speculative: SpeculativeSettings
    stop: tuple[str, ...]
    cache_prompt: bool = True  # reuse the prefix the previous request left in the KV caches
    drafters: tuple[str, ...] | None = None  # the drafters' names, in order; None: the pair's own


def open_pair(*, refs: PairRefs, settings: PairSettings) -> Pair:
    """Load the pair `ggufspec serve` serves (a context manager: closing it frees the models).

    Raises:
        UserError: missing/invalid files, an incompatible vocabulary, a context that cannot be made.
    """
    return load_pair(target=refs.target, draft=list(refs.drafts) or "none", settings=settings)


def on_device_lost(pair: Pair, callback: Callable[[str], None]) -> bool:
    """For a pair on RPC workers: a worker that dies mid-generation calls `callback(reason)` and
    the process goes on (the generating thread stays blocked, the pair unusable) instead of
    exiting. Returns whether the pair uses workers (and so whether it was installed)."""
    if not pair.settings.rpc:
        return False
    from ggufspec.llama.devices import on_worker_failure

    on_worker_failure(callback, park=True)
    return True


def describe(pair: Pair) -> PairInfo:
    return PairInfo(
        target_file=pair.target_path.name,
        target_stem=pair.target_path.stem,
        draft_name="+".join(Path(pair.draft_name(d)).name for d in pair.drafters) or "none",
        drafters=tuple((d.name, Path(pair.draft_name(d)).name) for d in pair.drafters),
        n_ctx=pair.target_ctx.n_ctx,
        n_vocab=pair.target_model.n_vocab,
    )


def encode(
    pair: Pair, *, prompt: str | None = None, messages: Sequence[Mapping[str, str]] | None = None
) -> list[int]:
    """Prompt text or chat messages (the GGUF's chat template) -> token ids; UserError if it cannot."""
    return pair.encode(prompt=prompt, messages=messages)


def generation_request(
    body: Params, *, tokens: Sequence[int], max_tokens: int, speculative: SpeculativeSettings,
    drafters: tuple[str, ...] | None = None,
) -> GenerationRequest:
    """Request fields -> engine settings (OpenAI's defaults: temperature 1, top_p 1); 400 if they clash.
    `speculative` and `drafters`: the request's (ggufspec.server.drafting)."""
    if body.accept == "greedy" and body.temperature != 0:
        raise invalid("accept 'greedy' needs temperature 0; use 'rejection' or 'match' when sampling", param="accept")
    try:
        sampling = SamplingSettings(
            temperature=1.0 if body.temperature is None else body.temperature,
            top_k=body.top_k or 0,
            top_p=1.0 if body.top_p is None else body.top_p,
            min_p=body.min_p or 0.0,
            seed=body.seed,
        )
        speculative.rule_for(sampling)  # greedy acceptance with temperature > 0 is refused here
    except UserError as exc:
        raise invalid(str(exc)) from None
    return GenerationRequest(
        tokens=tuple(tokens), max_tokens=max_tokens, sampling=sampling, speculative=speculative, stop=body.stops,
        cache_prompt=body.cache_prompt, drafters=drafters,
    )


def parallel(pair: Pair) -> int:
    """How many generations the pair runs at once (serve --parallel)."""
    return pair.settings.parallel


def slots(pair: Pair) -> list[Slot]:
    """The pair's slots (serve --parallel N > 1): one sequence of every context each."""
    return pair.slots()


def start_generation(pair: Pair, request: GenerationRequest, *, slot: Slot | None = None) -> Generation:
    """Start one generation on the pair (the worker thread only; with `slot`, that slot's thread):
    iterate it for steps with `.text`, `.close()` it to stop early; its `.stats` (RunStats) are set
    when it ends. UserError: refused.

    Without `slot`, the pair's KV caches are the server's one slot: a generation starts from the
    longest common prefix of its prompt with what the previous one left (`stats.cached_tokens`),
    unless the request set cache_prompt false. With `slot`, the same on that slot's caches.
    `request.drafters` picks among the pair's (the slot's) drafters by name."""
    if slot is not None:
        return slot.generate(
            prompt=list(request.tokens), max_tokens=request.max_tokens, sampling=request.sampling,
            speculative=request.speculative, stop=request.stop, cache_prompt=request.cache_prompt,
            drafters=request.drafters,
        )
    by_name = {d.name: d for d in pair.drafters}
    drafters = pair.drafters if request.drafters is None else tuple(by_name[n] for n in request.drafters)
    return pair.generate(
        prompt_tokens=list(request.tokens), max_tokens=request.max_tokens, sampling=request.sampling,
        speculative=request.speculative, stop=request.stop, cache_prompt=request.cache_prompt, drafters=drafters,
    )
