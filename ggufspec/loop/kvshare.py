"""When a draft model may take the target's KV cache instead of computing its own (pure).

A quantized draft of the target (the same network at another precision: the default pair, and
anyone measuring what a quantized draft buys) has the target's layers, heads and positions, so
the keys and values the target computed for the history are valid inputs to the draft's
attention. Importing them (llama.cpp's per-sequence state, `Context.state` / `load_state`)
replaces the draft's own prefill and catch-up decodes by a copy: the draft then decodes only its
own proposals. QSpec (Zhao et al. 2024, arXiv 2410.11305) shares one cache between the
low-precision draft and the high-precision verify of one model the same way.

Lossless either way: the imported cache is a function of the history alone, so a round's draft
still depends on past rounds only (the target's verify of this round is never read).

Measured on the 2-core CPU (SmolLM2 F32 target, Q4_1 draft, q8_0 caches): importing a 145-token
prompt took 1.8 ms against 500-1,700 ms to prefill it on the draft; the imported cache puts the
draft's next logits nearer the target's (max |difference| 0.45 against 1.19 with its own).
"""

from __future__ import annotations

from ggufspec.ggufinfo.info import ModelInfo

# A catch-up row of the draft (one more token in its decode) against importing the target's
# cache: on the 2-core CPU a 2-row Q4_1 decode costs ~6 ms more than a 1-row one, and an import
# costs ~1.5 ms plus ~2 us a token the target holds, so importing pays while the target holds
# fewer than ~2,000 tokens per token it saves the draft from decoding.
IMPORT_TOKENS_PER_ROW = 2048


def shared_kv_refusal(target: ModelInfo, draft: ModelInfo) -> str | None:
    """Why `draft` cannot use `target`'s KV cache, or None when it can: it must be the same
    network (architecture, attention shape per layer, sliding window, trained context, and every
    tensor's name and shape), whatever each tensor's encoding."""
    for what, t, d in (
        ("architecture", target.architecture, draft.architecture),
        ("layer count", target.n_layer, draft.n_layer),
        ("embedding width", target.n_embd, draft.n_embd),
        ("KV heads per layer", target.n_head_kv, draft.n_head_kv),
        ("key head size", target.head_dim_k, draft.head_dim_k),
        ("value head size", target.head_dim_v, draft.head_dim_v),
        ("sliding window", (target.n_swa, target.swa_layers), (draft.n_swa, draft.swa_layers)),
        ("trained context", target.context_length, draft.context_length),
    ):
        if t != d:
            return f"the {what} differs ({t} vs {d})"
    shapes_t = {x.name: x.shape for x in target.tensors}
    shapes_d = {x.name: x.shape for x in draft.tensors}
    if shapes_t != shapes_d:
        return "the tensors differ in names or shapes (not the same network)"
    return None


def import_pays(*, gained: int, held: int) -> bool:
    """Import the target's cache (`held` tokens) when that spares the draft decoding `gained`
    tokens of history it lacks (see IMPORT_TOKENS_PER_ROW). A rule on counts, not timings, so a
    seeded sampled run drafts the same tokens every time."""
    return gained >= 1 and gained * IMPORT_TOKENS_PER_ROW >= held
