"""The two peer providers: OpenAI chat completions (any compatible server) and Anthropic Messages.

A provider turns a `ModelRequest` into its wire body and sends it through capture's httpx2 client,
so every call is recorded like anyone else's; the answer is read back with the same wire parser the
recorder uses (`workbench.wire.parse_exchange`), never a second one."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fnmatch
import json
import os
import weakref
from typing import AsyncIterator
from urllib.parse import urlsplit

import httpx2

from workbench.capture import async_http_client, recorder
from workbench.capture.transport import RECORDED_CALL
from workbench.models import ModelRegistry
from workbench.runtime.caching import CacheRule, cache_rule, mark_anthropic, mark_chat_tail, session_header, session_key
from workbench.runtime.messages import (
    AssistantMessage, Completion, Document, Image, ModelRequest, ToolResults, ToolUse, UserMessage, stop_of,
)
from workbench.wire import Exchange, parse_exchange, priced
from workbench.wire.call import Call
from workbench.wire.sse import Event


_BODY_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)  # one, not one a call


def dumps(body: dict) -> bytes:
    """The request bytes: compact and deterministic, so equal requests are equal bytes."""
    return _BODY_ENCODER.encode(body).encode("utf-8")


def estimate_tokens(body: bytes) -> int:
    """A raw estimate: 4 bytes per token over the request body (later scaled by what the
    provider reported for an earlier request of the same conversation)."""
    return -(-len(body) // 4)


class Provider:
    """Base class: where to send, with which key, which models it serves (names or globs)."""

    wire = "unknown"
    path = ""
    key_env = ""
    # like the official SDKs: the URL given, else this environment variable, else the public API
    url_env = ""
    default_url = ""
    sampling = frozenset({"temperature", "seed"})  # the sampling parameters the wire has at all

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        models: list[str] | tuple[str, ...] = (),
        *,
        name: str | None = None,
        transport: httpx2.AsyncBaseTransport | None = None,
        timeout: float = 600.0,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.base_url = (base_url or os.environ.get(self.url_env) or self.default_url).rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get(self.key_env, "")
        self.models = list(models)
        self.host = (urlsplit(self.base_url).hostname or "").lower()
        self.name = name or self.host or self.wire
        self.timeout = timeout
        self.extra_headers = dict(headers or {})
        self._transport = transport
        self._clients: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._url: tuple[str, httpx2.URL] | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, base_url={self.base_url!r}, models={self.models!r})"

    def serves(self, model: str) -> bool:
        return any(model == pattern or fnmatch.fnmatchcase(model, pattern) for pattern in self.models)

    @property
    def url(self) -> str:
        return self.base_url + self.path

    def headers(self, request: ModelRequest | None = None) -> dict[str, str]:
        raise NotImplementedError

    def body(self, request: ModelRequest) -> dict:
        raise NotImplementedError

    def is_context_overflow(self, status: int, body: bytes) -> bool:
        raise NotImplementedError

    def text_delta(self, event: Event) -> str:
        """The text a streamed event adds to the answer ("" for any other event)."""
        raise NotImplementedError

    def rule(self, request: ModelRequest) -> CacheRule:
        return cache_rule(self.wire, self.host, request.model)

    # -- HTTP: one capture client per event loop (the sync wrappers run each call on a fresh loop)
    def _client(self) -> httpx2.AsyncClient:
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            client = async_http_client(transport=self._transport, timeout=self.timeout)
            self._clients[loop] = client
        return client

    async def send(self, content: bytes, request: ModelRequest | None = None) -> httpx2.Response:
        client = self._client()
        url, headers = self._parsed_url(), self.headers(request)
        # a cassette's replay transport answers from its index, recorded as capture records it,
        # without httpx2's request and response machinery (a quarter of a replayed eval's time)
        direct = getattr(self._transport, "answer_directly", None)
        if direct is not None:
            response = await direct(client, "POST", url, content, headers)
            if response is not None:
                return response
        return await client.post(url, content=content, headers=headers)

    @contextlib.asynccontextmanager
    async def send_stream(self, content: bytes, request: ModelRequest) -> AsyncIterator[httpx2.Response]:
        """The response with its body unread: the caller iterates it, and leaving the block early
        closes the connection (the rest of the generation is cut, never drained)."""
        client = self._client()
        async with client.stream("POST", self._parsed_url(), content=content, headers=self.headers(request)) as response:
            yield response

    def _parsed_url(self) -> httpx2.URL:
        # parsed once, not on every call (a URL parse is a tenth of httpx2's cost per request)
        url = self.url
        if self._url is None or self._url[0] != url:
            self._url = (url, httpx2.URL(url))
        return self._url[1]

    async def release_loop(self) -> None:
        """Close the client of the running loop (called by the sync wrappers before the loop ends)."""
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None and self._transport is None:
            await client.aclose()

    def completion(self, content: bytes, response: httpx2.Response, registry: ModelRegistry, estimate: int,
                   body: bytes | None = None) -> Completion:
        """The answer of a read response (`body`: a streamed one's bytes, as received)."""
        call: Call | None = response.extensions.get(RECORDED_CALL)
        if call is None or registry is not recorder().registry:  # not recorded, or priced otherwise
            exchange = Exchange(
                method="POST", url=self.url, request_body=content, status=response.status_code,
                response_headers=dict(response.headers), response_body=response.content if body is None else body,
            )
            call = priced(parse_exchange(exchange, body_cap=1 << 30, hash_request=False), registry)
        tool_uses = [ToolUse(id=tool.id or f"call_{index}", name=tool.name, arguments=tool.arguments)
                     for index, tool in enumerate(call.tool_calls)]
        return Completion(
            text=call.output_text, tool_uses=tool_uses,
            stop=stop_of(call.stop_reason, call.refusal, bool(tool_uses)), stop_reason=call.stop_reason,
            refusal=call.refusal, usage=call.usage, cost_micros=call.cost_micros,
            model=call.model_served or call.model_requested or "", provider=self.name, call=call,
            estimate=estimate,
        )


def _error_of(body: bytes) -> dict:
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return {}
    error = data.get("error") if isinstance(data, dict) else None
    return error if isinstance(error, dict) else {}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


class OpenAIProvider(Provider):
    """OpenAI chat completions, or any server speaking it. `base_url` includes `/v1`, as in the
    `openai` SDK. What is cache-marked and where a `session` goes depends on the host
    (`workbench.runtime.caching`): OpenAI caches long prefixes by itself."""

    wire = "openai.chat"
    path = "/chat/completions"
    key_env = "OPENAI_API_KEY"
    url_env, default_url = "OPENAI_BASE_URL", "https://api.openai.com/v1"

    def __init__(self, base_url: str | None = None, api_key: str | None = None,
                 models: list[str] | tuple[str, ...] = (), *, max_tokens_param: str = "max_completion_tokens",
                 **options) -> None:
        super().__init__(base_url, api_key, models, **options)
        self.max_tokens_param = max_tokens_param

    def headers(self, request: ModelRequest | None = None) -> dict[str, str]:
        headers = {"authorization": f"Bearer {self.api_key}", "content-type": "application/json", **self.extra_headers}
        if request is not None and request.session and self.rule(request).session == "header":
            headers["x-session-id"] = session_header(request.session)
        return headers

    @staticmethod
    def _user_content(parts) -> str | list[dict]:
        parts = [part for part in parts if part]
        if len(parts) == 1 and isinstance(parts[0], str):
            return parts[0]
        content = []
        for part in parts:
            if isinstance(part, str):
                content.append({"type": "text", "text": part})
            elif isinstance(part, Image):
                url = part.url or f"data:{part.media_type};base64,{_b64(part.data or b'')}"
                content.append({"type": "image_url", "image_url": {"url": url}})
            elif isinstance(part, Document):
                content.append({"type": "file", "file": {"filename": part.title or "document.pdf",
                                                         "file_data": f"data:{part.media_type};base64,{_b64(part.data)}"}})
        return content

    def body(self, request: ModelRequest) -> dict:
        messages: list[dict] = []
        for text in (request.system, request.system_dynamic):
            if text:
                messages.append({"role": "system", "content": text})
        for message in request.messages:
            if isinstance(message, UserMessage):
                messages.append({"role": "user", "content": self._user_content(message.parts)})
            elif isinstance(message, AssistantMessage):
                entry: dict = {"role": "assistant", "content": message.text or (None if message.tool_uses else "")}
                if message.tool_uses:
                    entry["tool_calls"] = [
                        {"id": use.id, "type": "function", "function": {"name": use.name, "arguments": use.arguments}}
                        for use in message.tool_uses
                    ]
                messages.append(entry)
            elif isinstance(message, ToolResults):
                for result in message.results:
                    content = f"Error: {result.content}" if result.is_error else result.content
                    messages.append({"role": "tool", "tool_call_id": result.call_id, "content": content})
                if message.parts:
                    messages.append({"role": "user", "content": self._user_content(message.parts)})
        body: dict = {"model": request.model, "messages": messages, self.max_tokens_param: request.max_tokens}
        if request.tools:
            body["tools"] = [
                {"type": "function", "function": {"name": tool.name, "description": tool.description,
                                                  "parameters": tool.schema}}
                for tool in request.tools
            ]
            if request.tool_choice == "any":
                body["tool_choice"] = "required"
            elif request.tool_choice:
                body["tool_choice"] = {"type": "function", "function": {"name": request.tool_choice}}
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.seed is not None:
            body["seed"] = request.seed
        if request.effort is not None:
            body["reasoning_effort"] = request.effort
        elif request.thinking is False:
            body["reasoning_effort"] = "none"
        if request.stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}  # else the last chunk carries no usage
        rule = self.rule(request)
        if request.cache and rule.marks == "tail":
            mark_chat_tail(body, stable_system=bool(request.system))
        if request.session and rule.session == "body":  # a routing key: sent even below the cacheable minimum
            body["prompt_cache_key"] = session_key(request.session)
        return body

    def is_context_overflow(self, status: int, body: bytes) -> bool:
        if status not in (400, 413):
            return False
        error = _error_of(body)
        message = str(error.get("message") or "").lower()
        return error.get("code") == "context_length_exceeded" or "maximum context length" in message or (
            "context window" in message and "exceed" in message
        )

    def text_delta(self, event: Event) -> str:
        data = event.json()
        if not isinstance(data, dict):
            return ""
        choices = data.get("choices") or [{}]
        delta = choices[0].get("delta") if isinstance(choices[0], dict) else None
        return str((delta or {}).get("content") or "")


class AnthropicProvider(Provider):
    """Anthropic Messages. `base_url` excludes `/v1`, as in the `anthropic` SDK. With caching on,
    the stable system block and the tail are cache-marked (see `workbench.runtime.caching`)."""

    wire = "anthropic.messages"
    path = "/v1/messages"
    key_env = "ANTHROPIC_API_KEY"
    url_env, default_url = "ANTHROPIC_BASE_URL", "https://api.anthropic.com"
    version = "2023-06-01"
    sampling = frozenset({"temperature"})  # the Messages API has no seed

    def __init__(self, base_url: str | None = None, api_key: str | None = None,
                 models: list[str] | tuple[str, ...] = (), **options) -> None:
        super().__init__(base_url, api_key, models, **options)

    def headers(self, request: ModelRequest | None = None) -> dict[str, str]:
        return {"x-api-key": self.api_key, "anthropic-version": self.version, "content-type": "application/json",
                **self.extra_headers}

    @staticmethod
    def _blocks(parts) -> list[dict]:
        blocks = []
        for part in parts:
            if isinstance(part, str):
                if part:
                    blocks.append({"type": "text", "text": part})
            elif isinstance(part, Image):
                source = ({"type": "url", "url": part.url} if part.url else
                          {"type": "base64", "media_type": part.media_type, "data": _b64(part.data or b"")})
                blocks.append({"type": "image", "source": source})
            elif isinstance(part, Document):
                block = {"type": "document", "source": {"type": "base64", "media_type": part.media_type,
                                                         "data": _b64(part.data)}}
                if part.title:
                    block["title"] = part.title
                blocks.append(block)
        return blocks

    def body(self, request: ModelRequest) -> dict:
        system = [{"type": "text", "text": text} for text in (request.system, request.system_dynamic) if text]
        messages: list[dict] = []
        for message in request.messages:
            if isinstance(message, UserMessage):
                messages.append({"role": "user", "content": self._blocks(message.parts)})
            elif isinstance(message, AssistantMessage):
                blocks = [{"type": "text", "text": message.text}] if message.text else []
                blocks += [{"type": "tool_use", "id": use.id, "name": use.name, "input": use.args()}
                           for use in message.tool_uses]
                messages.append({"role": "assistant", "content": blocks})
            elif isinstance(message, ToolResults):
                blocks = []
                for result in message.results:
                    block = {"type": "tool_result", "tool_use_id": result.call_id, "content": result.content}
                    if result.is_error:
                        block["is_error"] = True
                    blocks.append(block)
                messages.append({"role": "user", "content": blocks + self._blocks(message.parts)})
        body: dict = {"model": request.model, "max_tokens": request.max_tokens}
        if system:
            body["system"] = system
        body["messages"] = messages
        if request.tools:
            body["tools"] = [{"name": tool.name, "description": tool.description, "input_schema": tool.schema}
                             for tool in request.tools]
            if request.tool_choice == "any":
                body["tool_choice"] = {"type": "any"}
            elif request.tool_choice:
                body["tool_choice"] = {"type": "tool", "name": request.tool_choice}
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.thinking is not None:
            body["thinking"] = {"type": "adaptive" if request.thinking else "disabled"}
        if request.effort is not None:
            body["output_config"] = {"effort": request.effort}
        if request.stream:
            body["stream"] = True
        if request.cache:
            mark_anthropic(body, stable_system=bool(request.system))
        return body

    def is_context_overflow(self, status: int, body: bytes) -> bool:
        if status == 413:
            return True
        message = str(_error_of(body).get("message") or "").lower()
        return status == 400 and ("prompt is too long" in message or "context window" in message)

    def text_delta(self, event: Event) -> str:
        data = event.json()
        if not isinstance(data, dict) or data.get("type") != "content_block_delta":
            return ""
        delta = data.get("delta") or {}
        return str(delta.get("text") or "") if delta.get("type") == "text_delta" else ""
