"""Google Gemini's native API (`POST .../v1beta/models/{model}:generateContent` and
`:streamGenerateContent`), as the `google-genai` SDK and the other clients of the Gemini API send it
to `generativelanguage.googleapis.com`; Vertex AI's `.../publishers/google/models/{model}:...`
answers in the same shape.

The request names no model and no stream flag in its body: the model is the URL path's segment
before the colon (`models/gemini-2.5-flash:generateContent` -> `gemini-2.5-flash`), and the call is
a stream when the method is `streamGenerateContent`. The served model is the response's
`modelVersion`, its id `responseId`. The key travels as the `x-goog-api-key` header or the `?key=`
query parameter: both are secret by name (`workbench.wire.redact`), and neither the query nor a
header enters the request hash.

`usageMetadata` counts differently from both OpenAI and Anthropic:
- `promptTokenCount` INCLUDES `cachedContentTokenCount` (implicit or explicit cache hits), so
  `input_tokens = promptTokenCount - cachedContentTokenCount` and `cache_read_tokens =
  cachedContentTokenCount`. Gemini reports no cache write: storing an explicit cache is billed per
  hour of storage, outside any call, so `cache_write_tokens` is 0.
- `toolUsePromptTokenCount` (the pages a URL-context or search tool fetched into the prompt) is
  NOT inside `promptTokenCount`, and is billed as input: it is added to `input_tokens`.
- `thoughtsTokenCount` is NOT inside `candidatesTokenCount`, and thinking is billed as output:
  `output_tokens = candidatesTokenCount + thoughtsTokenCount`, `reasoning_tokens =
  thoughtsTokenCount`. So `totalTokenCount` is the sum of prompt, tool-use prompt, candidates and
  thoughts, and equals the disjoint counters' total.
- An absent counter is 0 (a reply with no candidates has no `candidatesTokenCount`).

Only the first candidate is read for the text and the stop reason (`finishReason`, verbatim:
`STOP`, `MAX_TOKENS`, `SAFETY`, ...; a function call also ends with `STOP`); function calls are
counted from every candidate, in order, their `args` kept as JSON text (the API gives no call id
unless the request did; `id` is kept when present). Parts marked `thought` (thought summaries) are
not output text. A prompt blocked before generation answers with `promptFeedback.blockReason` and
no candidates: that reason is the stop reason and the refusal; so is a candidate stopped for
`SAFETY`, `PROHIBITED_CONTENT`, `BLOCKLIST`, `SPII` or `IMAGE_SAFETY`. An error is
`{"error": {"code": 404, "message": ..., "status": "NOT_FOUND"}}`: its type is the `status`.

A stream (`?alt=sse`, what the SDKs ask for) is one `data:` event per chunk, each a whole
`GenerateContentResponse`; without `alt=sse` the same chunks come as one JSON array, read the same
way. Every chunk may carry `usageMetadata`, a running count; the latest wins, and it is final at
the chunk that carries the `finishReason` (the last one; a blocked prompt's chunk carries
`promptFeedback` instead). A stream is complete there: usage seen only before any finish reason is
a running count, and such a call stays unsettled. A JSON answer's usage is final whatever it holds."""

from __future__ import annotations

import json
import re
from urllib.parse import urlsplit

from workbench.models import Usage
from workbench.wire.call import Call, ToolCall
from workbench.wire.openai_chat import _int
from workbench.wire.sse import Event

_METHOD = re.compile(r"/(?:models|tunedModels)/([^/:]+):(generateContent|streamGenerateContent)$")
_REFUSED = frozenset({"SAFETY", "PROHIBITED_CONTENT", "BLOCKLIST", "SPII", "IMAGE_SAFETY"})


def is_gemini_path(path: str) -> bool:
    return path.endswith((":generateContent", ":streamGenerateContent"))


def fill_request(call: Call, url: str) -> None:
    """The model and the stream flag, which this API puts in the URL, not the body."""
    match = _METHOD.search(urlsplit(url).path.rstrip("/"))
    if match:
        call.model_requested = match.group(1)
        call.stream = match.group(2) == "streamGenerateContent"


def usage_of(usage: dict) -> Usage:
    cached = _int(usage.get("cachedContentTokenCount"))
    thoughts = _int(usage.get("thoughtsTokenCount"))
    return Usage(
        input_tokens=max(_int(usage.get("promptTokenCount")) - cached, 0) + _int(usage.get("toolUsePromptTokenCount")),
        cache_read_tokens=cached,
        output_tokens=_int(usage.get("candidatesTokenCount")) + thoughts,
        reasoning_tokens=thoughts,
    )


def error_of(call: Call, error: dict) -> None:
    code = error.get("code")
    call.error_type = error.get("status") or (str(code) if code is not None else None)
    call.error_message = error.get("message")


def fill_json(call: Call, body: dict) -> None:
    fill_chunks(call, [body])
    if isinstance(body.get("usageMetadata"), dict):  # a whole answer's usage is final, finish reason or not
        call.usage = usage_of(body["usageMetadata"])
        call.settled = True


def fill_stream(call: Call, events: list[Event]) -> None:
    fill_chunks(call, [event.json() for event in events])


def fill_chunks(call: Call, chunks: list) -> None:
    """Every chunk of a response in order (a JSON answer is one chunk)."""
    texts: list[str] = []
    finished = False
    for chunk in chunks:
        if not isinstance(chunk, dict):
            continue
        if isinstance(chunk.get("error"), dict):  # an error inside a 200 stream
            error_of(call, chunk["error"])
        call.response_id = call.response_id or chunk.get("responseId")
        call.model_served = call.model_served or chunk.get("modelVersion")
        candidates = [item for item in chunk.get("candidates") or [] if isinstance(item, dict)]
        for candidate in candidates:
            for part in (candidate.get("content") or {}).get("parts") or []:
                if not isinstance(part, dict):
                    continue
                function = part.get("functionCall")
                if isinstance(function, dict):
                    call.tool_calls.append(ToolCall(id=function.get("id"), name=function.get("name") or "",
                                                    arguments=json.dumps(function.get("args") or {})))
                elif candidate.get("index", 0) == 0 and isinstance(part.get("text"), str) and not part.get("thought"):
                    texts.append(part["text"])
        first = next((item for item in candidates if item.get("index", 0) == 0), None)
        if first is not None and first.get("finishReason"):
            call.stop_reason = first["finishReason"]
            finished = True
        blocked = (chunk.get("promptFeedback") or {}).get("blockReason")
        if blocked:
            call.stop_reason = call.refusal = blocked
            finished = True
        if finished and isinstance(chunk.get("usageMetadata"), dict):
            call.usage = usage_of(chunk["usageMetadata"])
            call.settled = True
    call.output_text = "".join(texts) if texts else None
    if call.stop_reason in _REFUSED:
        call.refusal = call.output_text or call.stop_reason


def is_complete(events: list[Event]) -> bool:
    finished = False
    for event in events:
        chunk = event.json()
        if not isinstance(chunk, dict):
            continue
        candidates = chunk.get("candidates") or []
        finished = finished or bool((chunk.get("promptFeedback") or {}).get("blockReason")) or any(
            isinstance(candidate, dict) and candidate.get("finishReason") for candidate in candidates)
        if finished and isinstance(chunk.get("usageMetadata"), dict):
            return True
    return False
