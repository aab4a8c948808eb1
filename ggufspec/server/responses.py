"""OpenAI-shaped response bodies and stream chunks, plus ggufspec's ``speculative`` block.

A non-streaming response carries ``usage`` and ``speculative``. A stream, like OpenAI's, carries
no usage unless the request set ``stream_options.include_usage``; then every chunk has
``"usage": null`` and one last chunk with ``"choices": []`` carries ``usage`` and ``speculative``.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ggufspec.loop.stats import RunStats


def finish_reason(stats: RunStats) -> str:
    return "stop" if stats.stop_reason in ("eog", "stop") else "length"


def usage(stats: RunStats) -> dict:
    return {
        "prompt_tokens": stats.prompt_tokens,
        "completion_tokens": stats.generated_tokens,
        "total_tokens": stats.prompt_tokens + stats.generated_tokens,
        # OpenAI's field: prompt tokens served from the cache (here: the KV cache's common prefix)
        "prompt_tokens_details": {"cached_tokens": stats.cached_tokens},
    }


def speculative(stats: RunStats, draft: str) -> dict:
    return {
        "draft": draft,
        "drafted": stats.drafted,
        "accepted": stats.accepted,
        "accept_rate": round(stats.accept_rate, 4),
        "mean_accepted_len": round(stats.mean_accepted_len, 4),
        "paused_rounds": stats.paused_rounds,
        "gen_tps": round(stats.gen_tps, 2),
        "k_hist": {str(k): n for k, n in stats.k_hist.items()},  # rounds per draft length, as --json has them
        "drafter_rounds": dict(stats.drafter_rounds),  # rounds per drafter ("none": the target alone)
    }


def sse(obj: dict | str) -> str:
    """One server-sent event: a JSON object, or the literal ``[DONE]``."""
    return f"data: {obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False)}\n\n"


@dataclass(frozen=True, kw_only=True)
class Reply:
    """One response's fixed fields, shaped as a text completion or as a chat completion."""

    chat: bool
    model: str
    draft: str  # named in the speculative block
    id: str
    created: int

    @classmethod
    def new(cls, *, chat: bool, model: str, draft: str) -> Reply:
        prefix = "chatcmpl" if chat else "cmpl"
        return cls(chat=chat, model=model, draft=draft, id=f"{prefix}-{uuid.uuid4().hex[:24]}", created=int(time.time()))

    def _head(self, obj: str) -> dict:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def body(self, text: str, stats: RunStats) -> dict:
        """The whole (non-streaming) response."""
        if self.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text},
                      "logprobs": None, "finish_reason": finish_reason(stats)}
            out = self._head("chat.completion")
        else:
            choice = {"text": text, "index": 0, "logprobs": None, "finish_reason": finish_reason(stats)}
            out = self._head("text_completion")
        out["choices"] = [choice]
        out["usage"], out["speculative"] = usage(stats), speculative(stats, self.draft)
        return out

    def chunk(self, text: str | None = None, *, finish: str | None = None, role: bool = False) -> dict:
        """A stream chunk with one choice: new text, the finish reason, or (chat) the role."""
        if self.chat:
            delta = {"role": "assistant", "content": ""} if role else ({} if text is None else {"content": text})
            out = self._head("chat.completion.chunk")
            out["choices"] = [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
        else:
            out = self._head("text_completion")
            out["choices"] = [{"text": text or "", "index": 0, "logprobs": None, "finish_reason": finish}]
        return out

    def usage_chunk(self, stats: RunStats) -> dict:
        """The stream's last chunk when the client asked for usage: no choices."""
        out = self._head("chat.completion.chunk" if self.chat else "text_completion")
        out["choices"] = []
        out["usage"], out["speculative"] = usage(stats), speculative(stats, self.draft)
        return out
