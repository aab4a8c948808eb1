"""What a GGUF model is: the frozen results `read_model_info` and `read_vocab` return."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

@dataclass(frozen=True, kw_only=True)
class TensorInfo:
    """One tensor of the table: where it sits and how big it is."""

    name: str
    ggml_type: str  # "Q4_K", "F16", ...
    shape: tuple[int, ...]  # GGUF order: ne0 (row length) first
    n_bytes: int
    layer: int | None  # block index for `blk.N.*`, else None
    group: str  # "layer", "input", "output" or "other"
    shard: int  # index into ModelInfo.paths


@dataclass(frozen=True, kw_only=True)
class VocabInfo:
    """A model's vocabulary as llama.cpp sees it (its defaults applied where keys are missing)."""

    model: str  # tokenizer.ggml.model: "llama", "gpt2", "bert", "t5", ...
    vocab_type: str  # llama.cpp's name: "spm", "bpe", "wpm", "ugm", "rwkv", "plamo2", "none"
    pre: str | None  # tokenizer.ggml.pre
    tokens: tuple[str, ...]
    token_types: tuple[int, ...]
    bos_id: int | None
    eos_id: int | None
    add_bos: bool
    add_eos: bool

    @property
    def size(self) -> int:
        return len(self.tokens)


@dataclass(frozen=True, kw_only=True)
class ModelInfo:
    """What a GGUF model is and how its bytes are spread over layers."""

    path: Path  # first (or only) file
    paths: tuple[Path, ...]  # all shards, in order
    file_bytes: int  # size on disk, all shards
    name: str | None
    architecture: str
    file_type: str  # "Q4_K_M", "F16", ... or "unknown"
    n_layer: int
    n_embd: int
    n_ff: int
    n_head: int
    n_head_kv: tuple[int, ...]  # per layer (0 = no attention in that layer)
    head_dim_k: tuple[int, ...]  # per layer
    head_dim_v: tuple[int, ...]
    n_swa: int  # sliding-window size in tokens (0 = none)
    swa_layers: tuple[bool, ...]  # per layer: True = sliding-window attention
    context_length: int  # trained context
    vocab_size: int
    vocab_type: str
    bos_id: int | None
    eos_id: int | None
    add_bos: bool
    has_chat_template: bool
    tensors: tuple[TensorInfo, ...]
    layer_bytes: tuple[int, ...]  # weights of each block
    input_bytes: int  # token embeddings: llama.cpp keeps them in RAM
    output_bytes: int  # output norm + output matrix (the "output layer")
    other_bytes: int  # tensors in no block (rope factors, ...)
    tied_embeddings: bool  # no output.weight: llama.cpp reuses token_embd for the output layer

    @property
    def weights_bytes(self) -> int:
        """All tensor bytes in the file(s)."""
        return sum(t.n_bytes for t in self.tensors)

    @property
    def output_layer_bytes(self) -> int:
        """Bytes of the output layer where it is placed (a tied embedding is copied there)."""
        tok = sum(t.n_bytes for t in self.tensors if t.name == "token_embd.weight")
        return self.output_bytes + self.other_bytes + (tok if self.tied_embeddings else 0)

    @property
    def n_params(self) -> int:
        return sum(math.prod(t.shape) for t in self.tensors)

