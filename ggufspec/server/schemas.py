"""Request bodies: read, type-check (pydantic, strict), and refuse what this server would ignore.

Every refusal is an ``APIError`` 400 with a one-line message naming the field (``param``).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from fastapi import Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import ClientDisconnect

from ggufspec.loop.sampling import MAX_SEED
from ggufspec.server.error_bodies import APIError, client_gone, invalid

MAX_STOP = 16
#: Chat roles the GGUF chat templates know; "developer" (OpenAI's newer name) is sent as "system".
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)


class StreamOptions(_Strict):
    include_usage: bool = False
    # ggufspec's extension: each chunk's tokens with where they came from (ggufspec.server.marks)
    include_speculative: bool = False


class ResponseFormat(_Strict):
    type: str


class Params(BaseModel):
    """Fields both endpoints share. Unknown fields are ignored; known ones are type-checked strictly."""

    model_config = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False)

    model: str | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=0)
    min_p: float | None = Field(default=None, ge=0.0, lt=1.0)
    seed: int | None = Field(default=None, ge=0, le=MAX_SEED)
    stop: str | list[str] | None = None
    n: int | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    # speculative decoding (ggufspec's own fields; ggufspec.server.drafting checks them)
    draft: str | list[str] | None = None  # drafters the server loaded, by name; "none": the target alone
    draft_max: int | None = None  # limits and messages: DraftLengthSettings, as the CLI's
    draft_min: int | None = None
    fixed: bool | None = None  # the first drafter drafts draft_max every round (no controller)
    always_draft: bool | None = None  # None: the server's default (serve --always-draft)
    accept: Literal["greedy", "rejection", "match"] | None = None
    # llama.cpp server's name: reuse the longest common prefix of the prompt with the KV cache the
    # previous request left (default); false decodes the whole prompt afresh
    cache_prompt: bool = True
    # OpenAI fields this server does not implement: accepted only at their neutral value
    best_of: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    logprobs: bool | int | None = None
    top_logprobs: int | None = None
    tools: list[Any] | None = None
    response_format: ResponseFormat | None = None

    @property
    def include_usage(self) -> bool:
        """A stream ends with one extra chunk carrying `usage` (OpenAI's stream_options)."""
        return bool(self.stream_options and self.stream_options.include_usage)

    @property
    def include_speculative(self) -> bool:
        """Stream chunks carry their tokens' provenance (ggufspec's opt-in extension)."""
        return bool(self.stream and self.stream_options and self.stream_options.include_speculative)

    @property
    def stops(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)


class CompletionBody(Params):
    prompt: str | list[str] | list[int]
    echo: bool | None = False
    suffix: str | None = None


class _ContentPart(_Strict):
    type: str
    text: str | None = None


class _Message(_Strict):
    role: str
    content: str | list[_ContentPart] | None = None


class ChatBody(Params):
    messages: list[_Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)


_EXPECTED = {  # readable names for union-typed fields (pydantic reports each union arm)
    "stop": "a string or a list of strings",
    "draft": "a drafter's name, 'none', or a list of drafters' names",
    "prompt": "a string, a list of one string, or a list of token ids",
}


def _validation_error(exc: ValidationError) -> APIError:
    err = exc.errors()[0]
    # pydantic names union arms in the location ("stop", "list[str]", 1): keep the field path only
    loc = [p for p in err["loc"] if isinstance(p, int) or ("[" not in p and p not in ("str", "int", "float", "bool"))]
    param = str(loc[0]) if loc else None
    path = ".".join(str(p) for p in loc) or "body"
    kind = err["type"]
    if kind == "missing":
        return invalid(f"missing required parameter '{path}'", param=param, code="missing_required_parameter")
    if param in _EXPECTED and len(loc) <= 2 and kind.endswith("_type"):
        msg = f"'{param}' must be {_EXPECTED[param]}"
    else:
        msg = f"invalid '{path}': {err['msg']}"
        if "input" in err and not isinstance(err["input"], (dict, list)):
            msg += f", got {json.dumps(err['input'])[:80]}"
    return invalid(msg, param=param, code="invalid_type" if kind.endswith("_type") else "invalid_value")


def _unsupported(body: Params) -> None:
    """Refuse OpenAI options we would otherwise silently ignore."""
    if body.n not in (None, 1):
        raise invalid(f"n={body.n} is not supported: this server returns one choice per request", param="n")
    if body.best_of not in (None, 1):
        raise invalid("best_of is not supported; use 1", param="best_of")
    for name in ("presence_penalty", "frequency_penalty"):
        if getattr(body, name) not in (None, 0, 0.0):
            raise invalid(f"{name} is not supported; use 0", param=name)
    if body.logit_bias:
        raise invalid("logit_bias is not supported", param="logit_bias")
    if body.logprobs not in (None, False, 0) or body.top_logprobs not in (None, 0):
        raise invalid("logprobs are not supported", param="logprobs")
    if body.tools:
        raise invalid("tools are not supported", param="tools")
    if body.response_format is not None and body.response_format.type != "text":
        raise invalid(
            f"response_format '{body.response_format.type}' is not supported: this server generates free text; "
            "leave response_format out or use {\"type\": \"text\"}",
            param="response_format",
        )
    if isinstance(body.stop, list) and len(body.stop) > MAX_STOP:
        raise invalid(f"at most {MAX_STOP} stop strings, got {len(body.stop)}", param="stop")
    if isinstance(body, CompletionBody):
        if body.echo:
            raise invalid("echo is not supported", param="echo")
        if body.suffix:
            raise invalid("suffix is not supported", param="suffix")


def parse(model: type[Params], data: dict) -> Any:
    """A JSON object -> the endpoint's body, type-checked, with unsupported options refused."""
    try:
        body = model.model_validate(data)
    except ValidationError as exc:
        raise _validation_error(exc) from None
    _unsupported(body)
    return body


def completion_prompt(body: CompletionBody, *, n_vocab: int) -> str | list[int]:
    """The one prompt of a completion request: text, or token ids inside the vocabulary."""
    prompt = body.prompt
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], int):
        bad = next((t for t in prompt if not 0 <= t < n_vocab), None)
        if bad is not None:
            raise invalid(f"token id {bad} is outside the vocabulary [0, {n_vocab})", param="prompt")
        return list(prompt)
    if isinstance(prompt, list):
        if len(prompt) != 1:
            raise invalid(f"one prompt per request, got {len(prompt)}", param="prompt")
        prompt = prompt[0]
    return prompt  # type: ignore[return-value]


def chat_messages(body: ChatBody) -> list[dict[str, str]]:
    """The conversation as {role, content} text messages for the chat template."""
    messages = []
    for i, m in enumerate(body.messages):
        role = ROLES.get(m.role)
        if role is None:
            raise invalid(f"messages[{i}].role '{m.role}' is not supported; use system, user, assistant or developer",
                          param="messages")
        content = m.content
        if isinstance(content, list):
            texts = []
            for part in content:
                if part.type != "text" or part.text is None:
                    raise invalid(f"messages[{i}]: only text content parts are supported, got '{part.type}'",
                                  param="messages")
                texts.append(part.text)
            content = "\n".join(texts)
        messages.append({"role": role, "content": content or ""})
    return messages


def check_tokens(tokens: list[int], param: str, *, n_ctx: int) -> None:
    """The encoded prompt is not empty and leaves room in the context for one token."""
    if not tokens:
        raise invalid(f"the {param} is empty", param=param)
    if len(tokens) >= n_ctx:
        raise invalid(
            f"this model's context is {n_ctx} tokens, but the {param} is {len(tokens)} tokens; "
            "shorten it or restart the server with a larger --ctx",
            param=param, code="context_length_exceeded",
        )


async def read_json(request: Request, limit: int) -> dict:
    """The request body as a JSON object, or a 400: too large, not JSON, not an object."""
    too_large = invalid(f"the request body is larger than the limit of {limit} bytes", code="request_too_large")
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            n = int(declared)
        except ValueError:
            raise invalid("invalid Content-Length header", code="invalid_request") from None
        if n > 64 * limit:
            raise too_large  # far too big to be worth reading; the connection will be closed
    body = bytearray()
    received = 0
    try:
        async for chunk in request.stream():
            received += len(chunk)
            if received > 64 * limit:
                break
            if received <= limit:
                body += chunk
            # else keep reading (and dropping): the client then gets the 400, not a connection reset
    except ClientDisconnect:  # gone while sending: no traceback, counted as cancelled
        raise client_gone() from None
    if received > limit:
        raise too_large

    def no_constants(name: str) -> Any:
        raise ValueError(f"{name} is not valid JSON")

    too_deep = invalid(f"the request body nests deeper than {MAX_JSON_DEPTH} levels", code="invalid_json")
    try:
        data = json.loads(bytes(body), parse_constant=no_constants)
    except (ValueError, UnicodeDecodeError) as exc:
        raise invalid(f"the request body is not valid JSON: {exc}", code="invalid_json") from None
    except RecursionError:  # deeper than the parser's own stack
        raise too_deep from None
    if _depth(data) > MAX_JSON_DEPTH:
        raise too_deep
    if not isinstance(data, dict):
        raise invalid("the request body must be a JSON object", code="invalid_json")
    return data


#: Deepest nesting a body may have: a chat request with tool schemas nests about 10 deep; 1,000
#: levels hit Python's recursion limit in the parser or the validation (a 500, issue 42).
MAX_JSON_DEPTH = 64


def _depth(value: Any) -> int:
    """How deep lists and objects nest in `value` (iterative: any depth)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (list, dict)):
            deepest = max(deepest, level)
            if level > MAX_JSON_DEPTH:
                return level
            stack.extend((v, level + 1) for v in (item.values() if isinstance(item, dict) else item))
    return deepest
