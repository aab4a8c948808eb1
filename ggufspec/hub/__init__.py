"""GGUF models from the Hugging Face Hub: pick a quant, fetch every shard, verify, cache.

All HTTP goes through ``huggingface_hub``: ``HfApi.model_info(files_metadata=True)`` lists the
repo (file names, sizes, LFS sha256) and ``hf_hub_download`` fetches each file into the standard
Hugging Face cache (``HF_HUB_CACHE``), with its own progress bars, ``HF_TOKEN``, ``HF_ENDPOINT``,
revisions, redirects, and in-call resume: a connection dropped mid-file is retried with a ``Range``
request, and the file only appears in the cache once complete (a process-unique ``.incomplete``
file is renamed into place). On top of that this module:

* picks the file like llama.cpp's ``-hf owner/repo:QUANT``: the GGUF whose name carries the quant
  as a token (case-insensitive, bounded by ``-``, ``.`` or ``/``), skipping ``mmproj``/``imatrix``
  files; with no quant, the only model, else Q4_K_M, else Q8_0. An ambiguous or missing quant is a
  ``UserError`` listing what the repo has;
* fetches every shard of a split model (``-00001-of-00003.gguf``), first shard first;
* verifies each file's size and LFS sha256 (``huggingface_hub`` checks only the size) on every new
  download, and on demand for cached files; a mismatch deletes the blob, never handing it back;
* works from the cache alone with ``offline=True`` or ``HF_HUB_OFFLINE=1``
  (``local_files_only=True``), and falls back to the cache when the Hub cannot be reached;
* turns 401/403 (gated), 404 (repo, revision, file) and connection failures into one ``UserError``.

Modules: ``names`` (repo id and revision checks), ``quants`` (choosing the file), ``listing``
(the repo's files, online or cached), ``download`` (``fetch``, verification, ``sha256_file``),
``errors`` (failures as ``UserError``), ``env`` (``huggingface_hub``'s settings, read at call time).
"""

from __future__ import annotations

from ggufspec.hub.download import HubModel, fetch, sha256_file
from ggufspec.hub.listing import RepoFile, RepoListing, list_repo
from ggufspec.hub.names import check_repo_id, check_revision
from ggufspec.hub.quants import DEFAULT_QUANTS, QuantFiles, available_quants, gguf_quant_files, pick_quant_files
from ggufspec.models.shards import split_info

__all__ = [
    "DEFAULT_QUANTS",
    "HubModel",
    "RepoFile",
    "RepoListing",
    "QuantFiles",
    "available_quants",
    "check_repo_id",
    "check_revision",
    "fetch",
    "gguf_quant_files",
    "list_repo",
    "pick_quant_files",
    "sha256_file",
    "split_info",
]
