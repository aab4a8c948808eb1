"""The library API: load a target and its drafters once, then generate many times.

    from ggufspec import load_pair
    with load_pair(target="embedded:smollm2:auto", draft=["embedded:smollm2:Q4_1", "lookup"]) as pair:
        out = pair.generate(prompt="Once upon a time", max_tokens=64).run()
        print(out.text, out.stats.gen_tps, out.stats.accept_rate, out.stats.drafter_rounds)

`draft` is a model reference, "lookup" (prompt lookup, no second model), a list of them (the
controller picks which proposes each round), "none" (the target alone), or None: the embedded
default draft model and lookup when no target is named either, else the target alone
(ggufspec.models.resolve, the one resolver every command uses).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from ggufspec import pairload, remember
from ggufspec.errors import UserError
from ggufspec.ggufinfo import ModelInfo, read_model_info
from ggufspec.loop.control import DraftController
from ggufspec.loop.drafters import Drafter
from ggufspec.loop.model_drafter import ModelDrafter
from ggufspec.loop.lookup import LookupDrafter
from ggufspec.loop.engine import Generation, generate
from ggufspec.loop.exactness import auto_cache_type, greedy_exactness
from ggufspec.loop.parallel import Activity, Slot
from ggufspec.loop.sampling import SamplingSettings
from ggufspec.loop.speculation import SpeculativeSettings
from ggufspec.models.refs import resolve_path
from ggufspec.models.resolve import LOOKUP, resolve_pair_refs
from ggufspec.models.template import render_chat
from ggufspec.models.vocab import check_vocab
from ggufspec.plan.split import DeviceLayers
from ggufspec.session import SessionInfo, load_caches, save_caches
from ggufspec.settings import ContextSettings, ModelSettings, PairSettings

if TYPE_CHECKING:
    from ggufspec.llama.context import Context
    from ggufspec.llama.model import Model

# `pair.generate(drafters=PAIR_DRAFTERS)`: the drafters the pair was loaded with
PAIR_DRAFTERS: Sequence[Drafter] = object()  # type: ignore[assignment]


@dataclass
class SpeculativePair:
    """A loaded target and its drafters (one generation at a time).

    `drafters` are the pair's own (every `--draft`, in order); `load_drafter` loads more, owned
    and closed with the pair; any of them, or () for the target alone, go to
    `generate(drafters=...)`. One `controller` learns the costs for every generation.
    """

    target_path: Path
    target_model: Model
    target_ctx: Context
    target_info: ModelInfo
    settings: PairSettings = field(default_factory=PairSettings)
    drafters: tuple[Drafter, ...] = ()
    draft_path: Path | None = None  # the first draft model's file (None: no draft model)
    # why greedy output may differ from the target alone on this build (None: it cannot)
    inexact_greedy: str | None = None
    # layers of the target and the pair's draft per device (llama.cpp's devices, then the CPU)
    devices: tuple[DeviceLayers, ...] = ()
    # loaded draft models: drafter -> (path, model, context), closed with the pair
    _drafters: dict[int, tuple[Drafter, Path | None, object, object]] = field(default_factory=dict, repr=False)
    # the draft controller's estimates, kept across generations (its settings: pairload.control_settings)
    controller: DraftController = field(default_factory=DraftController, repr=False)
    # settings.parallel > 1: serializes every llama.cpp call of the multi-sequence contexts
    _llama_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _slots: list[Slot] | None = field(default=None, repr=False)
    # contexts made by `fork`, closed with the pair (before the models they run on)
    _forks: list[Any] = field(default_factory=list, repr=False)
    # settings.remember: the controller as earlier runs left it, written back at close (ggufspec.remember)
    _kept: remember.Kept | None = field(default=None, repr=False)

    def draft_name(self, drafter: Drafter | None) -> str:
        """"none", "lookup" or the draft model's path."""
        if drafter is None:
            return "none"
        entry = self._drafters.get(id(drafter))
        return str(entry[1]) if entry is not None and entry[1] is not None else LOOKUP

    def draft_names(self) -> str:
        """The pair's drafters as one line: "none", or their names joined by "+"."""
        return "+".join(d.name for d in self.drafters) or "none"

    def gpu_layers(self, drafter: Drafter | None = None) -> int:
        """llama.cpp's layer count off the CPU for the target (None) or a drafter the pair owns
        (-1: all; 0 for lookup): what a peer must be given to run where this pair runs."""
        if drafter is None:
            return self.target_model.settings.n_gpu_layers
        model = self._drafters[id(drafter)][2]
        return 0 if model is None else model.settings.n_gpu_layers

    def load_drafter(self, ref: str | Path) -> Drafter:
        """Load a drafter for this target: a model reference (vocabulary checked, same context
        settings as the target) or "lookup". The pair owns and closes it."""
        if str(ref) == LOOKUP:
            drafter: Drafter = LookupDrafter(self.settings.lookup)
            self._drafters[id(drafter)] = (drafter, None, None, None)
            return drafter
        path = resolve_path(ref, offline=self.settings.offline)
        info = read_model_info(path)  # a clear error for a non-GGUF or truncated file before llama.cpp
        check_vocab(self.target_path, path)
        _, draft_load = pairload.model_settings(self.target_path, path, self.settings, quiet=True)  # load_pair noted it
        return self._add_model_drafter(path, info, draft_load)

    def _add_model_drafter(self, path: Path, info: ModelInfo, draft_load: ModelSettings) -> Drafter:
        """Load a draft model already checked against the target (file and vocabulary). One that
        is the target's network takes the target's KV cache (--draft-kv auto, ggufspec.loop.kvshare),
        so its cache has the target's type; another's numerics never reach the output, and it
        keeps the faster f16 cache."""
        from ggufspec.llama.model import Model

        shared = pairload.shares_kv(self.target_info, info, self.settings)
        model = Model(path, settings=draft_load)
        draft_ctx = pairload.draft_context(self.target_info, info, self.settings, target=self.target_ctx.settings)
        # one sequence per slot where serving in parallel; the pair's drafter drafts on slot 0's
        ctx = pairload.warm_context(model, settings=draft_ctx, parallel=self.settings.parallel, lock=self._llama_lock)
        # named by its file; a second draft of the same file gets "#2"
        taken = {d.name for d, *_ in self._drafters.values()}
        name = next(n for n in (path.stem, *(f"{path.stem}#{i}" for i in range(2, 100))) if n not in taken)
        drafter = ModelDrafter(ctx, name=name, kv_source=self.target_ctx if shared else None,
                               one_row=pairload.draft_one_row(draft_load, parallel=self.settings.parallel))
        self._drafters[id(drafter)] = (drafter, path, model, ctx)
        return drafter

    def encode(
        self,
        *,
        prompt: str | None = None,
        messages: Sequence[Mapping[str, str]] | None = None,
    ) -> list[int]:
        """Prompt text (raw) or chat messages (rendered with the GGUF template) -> token ids."""
        model = self.target_model
        if messages is not None:
            text = render_chat(
                template=model.chat_template(),
                messages=messages,
                bos_token=model.special_text(model.bos),
                eos_token=model.special_text(model.eos),
            )
            bos = model.special_text(model.bos)
            # The template may write BOS itself; never add a second one.
            add = model.add_bos and not (bos and text.startswith(bos))
            return model.tokenize(text, add_special=add, parse_special=True)
        if prompt is None:
            raise UserError("give a prompt (-p TEXT) or chat messages")
        return model.tokenize(prompt, add_special=True, parse_special=False)

    def generate(
        self,
        *,
        prompt: str | None = None,
        messages: Sequence[Mapping[str, str]] | None = None,
        prompt_tokens: Sequence[int] | None = None,
        drafters: Sequence[Drafter] | None = PAIR_DRAFTERS,
        max_tokens: int = 128,
        sampling: SamplingSettings = SamplingSettings(),
        speculative: SpeculativeSettings = SpeculativeSettings(),
        stop: Sequence[str] = (),
        cache_prompt: bool = True,
        controller: DraftController | None = None,
    ) -> Generation:
        """Start a generation (iterate it for steps, or `.run()` it).

        Args:
            prompt / messages / prompt_tokens: exactly one of them.
            drafters: the pair's own (default), any from `load_drafter`, or () / None: the
                target alone through the same loop (the baseline).
            cache_prompt: start from the longest common prefix of the prompt with what the
                target's KV cache (and the drafter's) holds from earlier generations, and decode
                only the rest (`stats.cached_tokens` says how many were reused); False: clear
                the caches and decode the whole prompt.
            controller: the draft controller to use and teach (default: the pair's own, kept
                across its generations); the bench gives each configuration its own.
        """
        given = sum(x is not None for x in (prompt, messages, prompt_tokens))
        if given != 1:
            raise UserError("give exactly one of prompt, messages or prompt_tokens")
        tokens = list(prompt_tokens) if prompt_tokens is not None else self.encode(prompt=prompt, messages=messages)
        drafters = self.drafters if drafters is PAIR_DRAFTERS else tuple(drafters or ())
        return generate(
            target=self.target_ctx,
            prompt=tokens,
            drafters=drafters,
            max_tokens=max_tokens,
            sampling=sampling,
            speculative=speculative,
            stop=stop,
            controller=self.controller if controller is None else controller,
            cache_prompt=cache_prompt,
        )

    def reset(self) -> None:
        """Clear the target's KV cache and every drafter's (the next generation starts cold)."""
        self.target_ctx.clear()
        for drafter in self._all_drafters():
            drafter.reset()

    def save_session(self, path: str | Path, *, meta: Mapping[str, Any] | None = None) -> None:
        """Write the target's and every draft model's KV cache, the tokens they hold and `meta`
        (plain JSON) to `path`, atomically (ggufspec.session)."""
        save_caches(path, (self.target_path, self.target_ctx), self._model_drafts(), meta=meta)

    def load_session(self, path: str | Path) -> SessionInfo:
        """Replace the caches with a saved session's, so the next generation reuses its tokens.

        Raises:
            UserError: the file belongs to another model, context size or cache type, or is
                truncated, corrupt or not a session file.
        """
        return load_caches(path, (self.target_path, self.target_ctx), self._model_drafts(), self._all_drafters())

    def slots(self) -> list[Slot]:
        """The pair's `settings.parallel` slots (ggufspec.loop.parallel), built once: slot 0 is the pair's
        own target context and drafters; slot i > 0 has sequence i of every context and its own
        drafters (same names). Requests that draft by policy (alone) share the pair's controller;
        always_draft ones use their slot's own. One generation per slot at a time."""
        if self._slots is not None:
            return self._slots
        n = self.settings.parallel
        multi = getattr(self.target_ctx, "multi", None)
        if n > 1 and multi is None:
            raise RuntimeError("a pair with parallel > 1 holds a multi-sequence target context")
        activity = Activity()
        model_drafters = [d for d in self.drafters if isinstance(d, ModelDrafter)]
        draft_multis = [d.ctx.multi for d in model_drafters] if n > 1 else []  # type: ignore[attr-defined]
        slots: list[Slot] = []
        for i in range(n):
            controller = self.new_controller()  # always_draft requests' (others share the pair's)
            if i == 0:
                target, drafters = self.target_ctx, self.drafters
            else:
                target = multi.views[i]
                view = lambda m: m.ctx.multi.views[i]  # type: ignore[attr-defined]  # noqa: E731
                drafters = tuple(self._drafter_copy(d, target, view) for d in self.drafters)
            slots.append(Slot(
                index=i, target=target, drafters=drafters, controller=controller, shared=self.controller,
                activity=activity,
                batcher=multi.batcher if multi is not None else None,
                draft_batchers=tuple(m.batcher for m in draft_multis),
            ))
        self._slots = slots
        return slots

    def new_controller(self) -> DraftController:
        """A fresh controller with the settings of the pair's own."""
        return DraftController(settings=self.controller.settings)

    def fork(self, drafters: Sequence[Drafter]) -> tuple[Context, tuple[Drafter, ...]]:
        """A fresh target context on the loaded target model, and a fresh copy of each of
        `drafters` (the pair's; model drafters get a context on their loaded model, taking the
        new target's KV cache where the original takes the pair's): a second generation that
        runs beside the pair's own without touching its caches. Weights are shared, not loaded
        again; what a fork costs is its KV caches and compute buffers. The bench runs its
        configurations in lockstep on forks (ggufspec.bench.lockstep). Closed with the pair."""
        if self.settings.parallel > 1:
            raise RuntimeError("fork needs a pair with parallel == 1")
        for d in drafters:
            entry = self._drafters.get(id(d))
            loaded = isinstance(d, ModelDrafter) and entry is not None and entry[2] is not None
            if not (loaded or isinstance(d, LookupDrafter)):
                raise ValueError(f"drafter {d.name!r} is not one this pair loaded")

        def new_context(model: Any, settings: Any) -> Context:
            ctx = pairload.warm_context(model, settings=settings, parallel=1, lock=None)
            self._forks.append(ctx)
            return ctx

        target = new_context(self.target_model, self.target_ctx.settings)
        copy = self._drafter_copy
        return target, tuple(copy(d, target, lambda m: new_context(self._drafters[id(m)][2], m.ctx.settings))
                             for d in drafters)

    def _drafter_copy(self, d: Drafter, target: Any, context: Callable[[ModelDrafter], Any]) -> Drafter:
        """`d` for another generation beside the pair's: a model drafter on `context(d)`, taking
        `target`'s KV cache where `d` takes the pair's; prompt lookup anew (its n-gram index is
        per generation); any other drafter as it is."""
        if isinstance(d, ModelDrafter):
            return d.copy(context(d), kv_source=target if d.kv_source is not None else None)
        if isinstance(d, LookupDrafter):
            return LookupDrafter(self.settings.lookup)
        return d

    def _model_drafts(self) -> list[tuple[Drafter, Path, Any]]:
        """(drafter, draft path, draft context) for each draft model the pair holds."""
        return [(d, p, ctx) for d, p, _, ctx in self._drafters.values() if ctx is not None and p is not None]

    def _all_drafters(self) -> list[Drafter]:
        drafters = [entry[0] for entry in self._drafters.values()]
        drafters += [d for d in self.drafters if all(d is not e for e in drafters)]
        return drafters

    @property
    def remembered_rounds(self) -> int:
        """Rounds the controller had observed in earlier runs when the pair loaded (0: fresh)."""
        return self._kept.loaded if self._kept is not None else 0

    def save_controller(self) -> None:
        """With settings.remember, write what the controller learnt since the pair loaded for the
        next run (ggufspec.remember; `close` does, and `serve` between generations and once they
        have stopped: a SIGTERM ends the process before the pair closes). Nothing new learnt: the
        file stands."""
        if self._kept is not None:
            self._kept.save()

    def close(self) -> None:
        self.save_controller()
        for ctx in self._forks:
            ctx.close()
        self._forks.clear()
        for _, _, model, ctx in self._drafters.values():
            for obj in (ctx, model):
                if obj is not None:
                    obj.close()  # type: ignore[attr-defined]
        self._drafters.clear()
        self.target_ctx.close()
        self.target_model.close()

    def __enter__(self) -> "SpeculativePair":
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is not None:  # (a Ctrl-C or an error may have cut the controller short mid-update:
            self._kept = None  # the next run starts from the last clean state, not from that)
        self.close()


def load_pair(
    *,
    target: str | Path | None = None,
    draft: str | Path | Sequence[str | Path] | None = None,
    settings: PairSettings = PairSettings(),
) -> SpeculativePair:
    """Resolve, check and load a target and its drafters.

    Args:
        target: model reference; None = the embedded default target.
        draft: model reference, "lookup", a list of them, "none", or None (see the module docstring).
        settings: context, offload and lookup settings (the draft shares the target's context).

    Raises:
        UserError: missing/invalid files, an incompatible vocabulary, a context that cannot be made.
    """
    from ggufspec.llama.lib import batch_invariant_kernels
    from ggufspec.llama.model import Model
    refs = resolve_pair_refs(target=target, draft=draft)
    target_path = resolve_path(refs.target, offline=settings.offline)
    draft_paths = [None if ref == LOOKUP else resolve_path(ref, offline=settings.offline) for ref in refs.drafts]
    draft_path = next((p for p in draft_paths if p is not None), None)
    target_info, draft_infos = pairload.read_infos(target_path, draft_paths)  # every file checked before any loads
    target_load, draft_load = pairload.model_settings(target_path, draft_path, settings)
    model_devices = pairload.load_devices()  # free memory before loading: llama.cpp's default split
    on_gpu = pairload.runs_on_gpu(target_load, model_devices)
    ctx_settings: ContextSettings = settings.context.with_cache_type(auto_cache_type(target_info, on_gpu=on_gpu))
    pairload.check_memory(target_info, list(draft_infos.values()), settings, context=ctx_settings, devices=model_devices)
    target_model = Model(target_path, settings=target_load)
    lock = threading.Lock()
    try:  # one sequence per server slot where serving in parallel (ggufspec.llama.multi)
        target_ctx = pairload.warm_context(target_model, settings=ctx_settings, parallel=settings.parallel, lock=lock)
    except BaseException:
        target_model.close()
        raise
    control = pairload.control_settings(target_load, model_devices, settings)
    placement = pairload.layers_per_device(target_info, target_load, draft_path, draft_load, model_devices)
    kept = (remember.recall(target=target_path, drafts=draft_paths, settings=settings, control=control,
                            devices=model_devices, placement=placement) if settings.remember else None)
    pair = SpeculativePair(
        target_path=target_path, target_model=target_model, target_ctx=target_ctx, target_info=target_info,
        settings=settings,
        inexact_greedy=greedy_exactness(target_info, on_gpu=on_gpu, cache_type=ctx_settings.cache_type_k,
                                        invariant_kernels=batch_invariant_kernels()),
        devices=placement,
        controller=kept.controller if kept is not None else DraftController(settings=control),
        _llama_lock=lock, _kept=kept,
    )
    try:
        # every draft file was checked above: load them without reading them again
        drafters: list[Drafter] = []
        for p in draft_paths:
            if p is None:
                drafters.append(pair.load_drafter(LOOKUP))
                continue
            load = draft_load if p == draft_path else pairload.model_settings(target_path, p, settings, quiet=True)[1]
            drafters.append(pair._add_model_drafter(p, draft_infos[p], load))
        pair.drafters = tuple(drafters)
        pair.draft_path = draft_path
    except BaseException:
        pair.close()
        raise
    pairload.watch_workers(settings)
    return pair
