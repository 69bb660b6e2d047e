"""OpenAI embeddings (`POST /v1/embeddings`, and the compatible hosts that answer it).

The response is one JSON object, never a stream: `model`, `data` (one vector per input) and `usage`
with `prompt_tokens` and `total_tokens`, equal, since an embedding has no output. So
`input_tokens = prompt_tokens` and every other counter is 0: no cache is reported on this endpoint,
and there are no output or reasoning tokens. Pricing is the model's input price. The response has
no `id`, no stop reason and no text: those stay empty. A body without `usage` leaves the call
unsettled (some compatible servers omit it), never guessed from the input's length."""

from __future__ import annotations

from workbench.models import Usage
from workbench.wire.call import Call
from workbench.wire.openai_chat import _int
from workbench.wire.sse import Event


def usage_of(usage: dict) -> Usage:
    return Usage(input_tokens=_int(usage.get("prompt_tokens")))


def fill_json(call: Call, body: dict) -> None:
    call.model_served = body.get("model") if isinstance(body.get("model"), str) else None
    if isinstance(body.get("usage"), dict):
        call.usage = usage_of(body["usage"])
        call.settled = True
    if isinstance(body.get("error"), dict):  # some compatible hosts answer 200 with an error
        call.error_type = body["error"].get("type") or str(body["error"].get("code"))
        call.error_message = body["error"].get("message")


def fill_stream(call: Call, events: list[Event]) -> None:
    raise ValueError("an embeddings response is never a stream")


def is_complete(events: list[Event]) -> bool:
    return True  # never streamed: a body read to its end is the whole answer
