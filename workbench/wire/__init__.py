"""Pure parsers: a provider request and response, as bytes, become one normalized `Call`.

`parse_exchange` never raises: whatever it cannot read yields a `Call` with
`error_type="unparseable"` and the reason in `error_message`.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import json
import operator
from urllib.parse import urlsplit

import orjson

from workbench.models import ModelRegistry, price_with
from workbench.wire import gemini
from workbench.wire.call import Call, Exchange, ToolCall, Wire
from workbench.wire.canonical import request_hash
from workbench.wire.decode import decode_body
from workbench.wire.redact import cap_text, mask_secrets, mask_stream_secrets, redact_url
from workbench.wire.sse import looks_like_sse, parse_events

__all__ = [
    "Call", "Exchange", "ToolCall", "Wire", "is_complete", "masked_call", "parse_exchange", "priced", "provider_of", "wire_of",
]

# wire -> its parser's module, imported at its first call: a process reading one wire loads one parser
_PARSERS = {
    "openai.chat": "openai_chat",
    "openai.responses": "openai_responses",
    "anthropic.messages": "anthropic_messages",
    "openai.embeddings": "openai_embeddings",
    "google.gemini": "gemini",
    "openai.completions": "openai_completions",
    "anthropic.complete": "anthropic_complete",
}
# host suffix -> provider; anything else is named by its host
_HOSTS = {
    "api.openai.com": "openai",
    "openai.azure.com": "azure",
    "api.anthropic.com": "anthropic",
    "openrouter.ai": "openrouter",
    "api.groq.com": "groq",
    "api.mistral.ai": "mistral",
    "api.deepseek.com": "deepseek",
    "generativelanguage.googleapis.com": "google",
}
_DEFAULT_CAP = 65536


def wire_of(method: str, url: str) -> Wire:
    if method.upper() != "POST":
        return "unknown"
    path = urlsplit(url).path.rstrip("/")
    if path.endswith("/chat/completions"):
        return "openai.chat"
    if path.endswith("/responses"):
        return "openai.responses"
    if path.endswith("/messages"):
        return "anthropic.messages"
    if path.endswith("/embeddings"):
        return "openai.embeddings"
    if gemini.is_gemini_path(path):
        return "google.gemini"
    if path.endswith("/completions"):  # after /chat/completions: the legacy text completions
        return "openai.completions"
    if path.endswith("/complete"):
        return "anthropic.complete"
    return "unknown"


def provider_of(url: str, wire: Wire) -> str:
    host = (urlsplit(url).hostname or "").lower()
    for suffix, name in _HOSTS.items():
        if host == suffix or host.endswith("." + suffix):
            return name
    if host in {"127.0.0.1", "localhost", "::1"} or not host:
        return {"anthropic.messages": "anthropic", "anthropic.complete": "anthropic", "google.gemini": "google",
                "unknown": "unknown"}.get(wire, "openai")
    return host


@functools.cache  # a dictionary lookup per call, not import machinery
def _parser(wire: Wire):
    name = _PARSERS.get(wire)
    return importlib.import_module(f"workbench.wire.{name}") if name else None


def _headers(headers: dict[str, str]) -> dict[str, str]:
    return {name.lower(): value for name, value in headers.items()}


def is_complete(wire: Wire, body: bytes, content_encoding: str | None = None) -> bool:
    """Did a streamed body reach its protocol's end, or the point where its usage is final (each
    wire module's `is_complete` says where: an Anthropic `message_delta` with usage, an OpenAI chat
    usage chunk after the finish reason, a Responses `response.completed`, a Gemini chunk with its
    `finishReason` and usage)?"""
    parser = _parser(wire)
    if parser is None:
        return True
    text = decode_body(body, content_encoding).decode("utf-8", "replace")
    return parser.is_complete(parse_events(text))


def parse_exchange(exchange: Exchange, body_cap: int = _DEFAULT_CAP, hash_request: bool = True) -> Call:
    """The normalized call. `hash_request=False` leaves `request_hash` to the caller (the recorder
    computes it off the application's thread)."""
    call = Call(url=redact_url(exchange.url), method=exchange.method.upper(), http_status=exchange.status)
    try:
        _parse(call, exchange, body_cap, hash_request)
    except Exception as exc:  # noqa: BLE001 - a parser never breaks the caller; the reason is kept
        call.error_type = "unparseable"
        call.error_message = f"{type(exc).__name__}: {exc}"[:500]
        call.settled = False
    return call


def _parse(call: Call, exchange: Exchange, body_cap: int, hash_request: bool) -> None:
    call.wire = wire_of(exchange.method, exchange.url)
    call.provider = provider_of(exchange.url, call.wire)
    if hash_request:
        call.request_hash = request_hash(exchange.method, exchange.url, exchange.request_body)
    request_headers = _headers(exchange.request_headers)
    response_headers = _headers(exchange.response_headers)
    request_text = decode_body(exchange.request_body, request_headers.get("content-encoding")).decode("utf-8", "replace")
    call.request_json = cap_text(request_text or None, body_cap)
    request = _request_json(request_text) if request_text.lstrip().startswith("{") else {}
    if isinstance(request, dict):
        model = request.get("model")
        call.model_requested = model if isinstance(model, str) else None
        call.stream = request.get("stream") is True
    if call.wire == "google.gemini":  # the model and the stream flag are in its URL
        gemini.fill_request(call, exchange.url)
    call.request_id = response_headers.get("request-id") or response_headers.get("x-request-id")
    body = decode_body(exchange.response_body, response_headers.get("content-encoding"))
    text = body.decode("utf-8", "replace")
    call.response_json = cap_text(text or None, body_cap)
    if exchange.status is None:
        call.error_type = "transport_error"
        return
    parser = _parser(call.wire)
    if parser is None:
        return
    if looks_like_sse(body, response_headers.get("content-type", "")):
        events = parse_events(text)
        parser.fill_stream(call, events)
        if exchange.status >= 400 and not call.error_type:
            call.error_type = f"http_{exchange.status}"
    else:
        data = json.loads(text) if text.strip() else None
        if exchange.status >= 400:
            _fill_error(call, data, exchange.status)
        elif isinstance(data, dict):
            parser.fill_json(call, data)
        elif isinstance(data, list) and call.wire == "google.gemini":  # a stream asked for without alt=sse
            gemini.fill_chunks(call, data)
        else:
            raise ValueError(f"expected a JSON object, got {type(data).__name__}")
    if exchange.status >= 400:
        call.settled = False


def _request_json(text: str):
    """A request body, read for its model and stream flag: orjson where it reads the text (several
    times the stdlib's speed), else the stdlib, which also reads what JSON does not allow (NaN, a
    lone surrogate) or raises as before. Where both read it, the two strings and flags agree."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def _fill_error(call: Call, data, status: int) -> None:
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict) and call.wire == "google.gemini":
        gemini.error_of(call, error)
    elif isinstance(error, dict):
        call.error_type = error.get("type") or (str(error["code"]) if error.get("code") is not None else None)
        call.error_message = error.get("message")
    elif isinstance(error, str):
        call.error_message = error
    call.error_type = call.error_type or f"http_{status}"


def priced(call: Call, registry: ModelRegistry) -> Call:
    """`call` with its cost: from the project's row for the served model, else the requested one,
    else the price library's price in force when the call started (`ModelRegistry.sheet_for`).
    A call nothing prices keeps `price_source = None` (unpriced, never zero)."""
    if not call.settled:
        return call
    sheet = registry.sheet_for(call)
    if sheet is not None:
        result = price_with(sheet, call.usage)
        call.cost_micros, call.currency, call.price_source = result.cost_micros, result.currency, result.price_source
    return call


_CALL_FIELDS = operator.attrgetter(*(item.name for item in dataclasses.fields(Call)))  # in __init__'s order


def masked_call(call: Call, known: list[str] | tuple[str, ...] = ()) -> Call:
    """A copy of `call` whose text holds no secret: secret-shaped values (a key pasted into a prompt)
    and the `known` credential values the request sent (a key a provider echoes in its 401 body)
    masked. A copy, because the caller may still be reading the original (the runtime reads a
    run's call while the recorder writes it)."""
    copy = Call(*_CALL_FIELDS(call))  # `dataclasses.replace(call)`, without its walk of the fields each call
    # a key given as the model name (`model="sk-proj-…"`) is a secret-shaped value like any other
    for name in ("request_json", "response_json", "error_message", "output_text", "refusal", "model_requested",
                 "model_served"):
        setattr(copy, name, mask_secrets(getattr(call, name), known))
    if call.stream:
        copy.response_json = mask_stream_secrets(copy.response_json, known)
    copy.tool_calls = [
        ToolCall(name=tool.name, id=tool.id, arguments=mask_secrets(tool.arguments, known) or "")
        for tool in call.tool_calls
    ]
    return copy
