"""GGUF metadata and the tensor table: what a model is and how many bytes each layer takes.

* ``header``: the GGUF header reader over a memory map (why we parse it ourselves, and the checks
  that turn a corrupt header into one line);
* ``info``: the results, ``ModelInfo``, ``TensorInfo``, ``VocabInfo``;
* ``read``: llama.cpp's reading of the keys: ``read_model_info``, ``read_vocab``, ``metadata``.

Split models (``name-00001-of-00003.gguf``) are read shard by shard; metadata comes from the first.
"""

from ggufspec.ggufinfo.header import check_gguf_magic
from ggufspec.ggufinfo.info import ModelInfo, TensorInfo, VocabInfo
from ggufspec.ggufinfo.read import metadata, read_model_info, read_vocab

__all__ = [
    "ModelInfo",
    "TensorInfo",
    "VocabInfo",
    "check_gguf_magic",
    "metadata",
    "read_model_info",
    "read_vocab",
]
