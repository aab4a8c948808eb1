"""What ``huggingface_hub``'s settings say: offline mode, endpoint, cache folder and its layout.

Read at call time from ``huggingface_hub.constants`` (and ``HF_HUB_OFFLINE``), never copied at
import, so that the environment and patched constants apply.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

COMMIT = re.compile(r"^[0-9a-f]{40}$")  # a snapshot folder / refs file holds a commit hash
SHA256 = re.compile(r"^[0-9a-f]{64}$")  # the blob of an LFS file is named by its sha256


def is_offline(flag: bool) -> bool:
    from huggingface_hub import constants

    env = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}
    return bool(flag or constants.HF_HUB_OFFLINE or env)


def hub_endpoint() -> str:
    from huggingface_hub import constants

    return constants.ENDPOINT


def storage_folder(repo_id: str) -> Path:
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE) / ("models--" + repo_id.replace("/", "--"))

