"""The normalized call: one row per provider call, live or replayed, whoever made it."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from workbench.models import Usage

Wire = Literal["openai.chat", "openai.responses", "anthropic.messages", "openai.embeddings", "openai.completions",
               "anthropic.complete", "google.gemini", "unknown"]


@dataclass(slots=True)
class ToolCall:
    name: str
    id: str | None = None
    arguments: str = ""  # the raw JSON text the model produced


class Exchange(BaseModel):
    """One HTTP request and its response as bytes: what every wire parser reads."""

    model_config = ConfigDict(defer_build=True)  # see `workbench.models.PriceTier`

    method: str = "POST"
    url: str
    request_headers: dict[str, str] = Field(default_factory=dict)
    request_body: bytes = b""
    status: int | None = None  # None: no response (transport failure)
    response_headers: dict[str, str] = Field(default_factory=dict)
    response_body: bytes = b""  # possibly compressed; for a stream, the whole SSE text so far
    complete: bool = True  # False: the body was cut (stream abandoned, connection lost)


NO_USAGE = Usage()


@dataclass(slots=True)
class Call:
    """A plain dataclass, not a model: a parser sets some thirty fields one by one per call, on the
    caller's thread, and a model's checked attribute set costs ten times a slot's."""

    # identity
    call_id: str = ""
    run_id: str | None = None
    trace_id: str | None = None
    span_id: str | None = None
    parent_span_id: str | None = None
    # the provider's own ids
    response_id: str | None = None
    request_id: str | None = None
    # where
    wire: Wire = "unknown"
    provider: str = "unknown"
    url: str = ""
    method: str = "POST"
    model_requested: str | None = None
    model_served: str | None = None
    stream: bool = False
    # outcome
    http_status: int | None = None
    stop_reason: str | None = None
    error_type: str | None = None
    error_message: str | None = None
    settled: bool = False  # the provider reported usage
    replayed: bool = False
    cassette: str | None = None
    resumed_from_call_id: str | None = None  # answered from the store on a resume: the call that paid
    refusal: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    output_text: str | None = None
    # usage: four disjoint counters plus informative ones
    usage: Usage = NO_USAGE  # frozen: one for every call until its parser reads the usage
    # money
    cost_micros: int | None = None
    currency: str | None = None
    price_source: str | None = None
    provider_cost: str | None = None  # what the host itself reported (OpenRouter `cost`), verbatim
    # time
    started_at: datetime | None = None
    first_byte_at: datetime | None = None
    ended_at: datetime | None = None
    # content
    request_json: str | None = None
    response_json: str | None = None
    request_hash: str | None = None
    # prompt
    prompt_id: str | None = None
    prompt_version: str | None = None
    prompt_hash: str | None = None

    # the four counters and reasoning, flat, for tables and JSON output
    @property
    def input_tokens(self) -> int:
        return self.usage.input_tokens

    @property
    def cache_read_tokens(self) -> int:
        return self.usage.cache_read_tokens

    @property
    def cache_write_tokens(self) -> int:
        return self.usage.cache_write_tokens

    @property
    def output_tokens(self) -> int:
        return self.usage.output_tokens

    @property
    def reasoning_tokens(self) -> int:
        return self.usage.reasoning_tokens

    def flat(self) -> dict:
        """The call as one flat mapping of DESIGN.md's column names (usage spread out), JSON-ready."""
        data = {name: getattr(self, name) for name in _COLUMNS}
        for name in _TIMES:
            if data[name] is not None:
                data[name] = data[name].isoformat()
        data["tool_calls"] = [{"id": tool.id, "name": tool.name, "arguments": tool.arguments} for tool in self.tool_calls]
        data.update(self.usage.model_dump())
        data["tool_call_count"] = len(self.tool_calls)
        return data


_COLUMNS = tuple(item.name for item in fields(Call) if item.name not in ("usage", "tool_calls"))
_TIMES = ("started_at", "first_byte_at", "ended_at")
