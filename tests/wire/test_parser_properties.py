"""Whatever bytes arrive, every parser returns a Call and never raises."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.models import Usage
from workbench.wire import Call, Exchange, ToolCall, masked_call, parse_exchange

URLS = [
    "https://api.openai.com/v1/chat/completions",
    "https://api.openai.com/v1/responses",
    "https://api.anthropic.com/v1/messages",
    "https://example.com/other",
]
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=5),
    max_leaves=25,
)
usage_keys = st.sampled_from(
    ["usage", "choices", "output", "content", "model", "status", "error", "type", "message", "delta", "x_groq"]
)
shaped = st.dictionaries(usage_keys, json_values, max_size=6)


@settings(max_examples=300, deadline=None)
@given(url=st.sampled_from(URLS), status=st.sampled_from([200, 400, 429, 500, None]), body=st.binary(max_size=400))
def test_arbitrary_bytes_give_a_call(url, status, body):
    call = parse_exchange(Exchange(url=url, request_body=body, status=status, response_body=body))
    assert call.http_status == status


@settings(max_examples=300, deadline=None)
@given(url=st.sampled_from(URLS), request=shaped, response=shaped)
def test_wrong_typed_json_gives_a_call(url, request, response):
    call = parse_exchange(
        Exchange(url=url, request_body=json.dumps(request).encode(), status=200, response_body=json.dumps(response).encode())
    )
    assert call.input_tokens >= 0 and call.output_tokens >= 0


@settings(max_examples=200, deadline=None)
@given(url=st.sampled_from(URLS[:3]), events=st.lists(shaped, max_size=6), cut=st.integers(min_value=0, max_value=2000))
def test_truncated_sse_gives_a_call(url, events, cut):
    stream = "".join(f"event: x\ndata: {json.dumps(event)}\n\n" for event in events).encode()[:cut]
    call = parse_exchange(
        Exchange(
            url=url,
            request_body=b'{"stream": true}',
            status=200,
            response_headers={"content-type": "text/event-stream"},
            response_body=stream,
            complete=False,
        )
    )
    assert call.stream is True


def test_a_stream_cut_before_its_usage_is_unsettled():
    text = (
        'event: message_start\ndata: {"type":"message_start","message":{"id":"m","model":"claude-x",'
        '"usage":{"input_tokens":10,"output_tokens":1}}}\n\n'
        'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}\n\n'
    )
    call = parse_exchange(
        Exchange(
            url=URLS[2],
            request_body=b'{"model":"claude-x","stream":true}',
            status=200,
            response_headers={"content-type": "text/event-stream"},
            response_body=text.encode(),
        )
    )
    assert (call.settled, call.output_text, call.model_served) == (False, "Hi", "claude-x")


def test_unparseable_json_is_reported_not_raised():
    call = parse_exchange(Exchange(url=URLS[0], status=200, response_body=b"{not json"))
    assert call.error_type == "unparseable" and "JSONDecodeError" in call.error_message


def test_a_request_only_the_standard_library_reads_still_names_its_model():
    # NaN and a lone surrogate are refused by orjson, which reads most request bodies: the stdlib
    # reads these, as it always has, and the call keeps its model and stream flag
    bodies = (b'{"model":"gpt-x","stream":true,"temperature":NaN}', b'{"model":"gpt-x","stream":true,"x":"\\ud800"}')
    for body in bodies:
        call = parse_exchange(Exchange(url=URLS[0], request_body=body, status=200, response_body=b"{}"))
        assert (call.model_requested, call.stream) == ("gpt-x", True)
    call = parse_exchange(Exchange(url=URLS[0], request_body=b'{"model": 1e999', status=200, response_body=b"{}"))
    assert call.error_type == "unparseable" and "JSONDecodeError" in call.error_message  # as the stdlib says it


def test_a_masked_call_is_a_copy_of_every_field_with_its_texts_masked():
    key = "sk-" + "A" * 40
    values = {}
    for number, item in enumerate(dataclasses.fields(Call)):  # a distinct value in every field
        kind = str(item.type)
        values[item.name] = (
            [ToolCall(name="t", id="i", arguments=key)] if item.name == "tool_calls"
            else Usage(input_tokens=3) if item.name == "usage"
            else datetime(2026, 1, 1 + number % 28, tzinfo=timezone.utc) if "datetime" in kind
            else number % 2 == 0 if kind.startswith("bool")
            else number if kind.startswith("int")
            else f"{item.name} {key}"
        )
    call = Call(**values)
    masked = masked_call(call)
    assert masked is not call and call.request_json == f"request_json {key}"  # the original is left as it was
    texts = ("request_json", "response_json", "error_message", "output_text", "refusal", "model_requested", "model_served")
    for name, value in values.items():
        if name in texts:
            assert getattr(masked, name) == f"{name} [redacted]"
        elif name != "tool_calls":
            assert getattr(masked, name) == value, name
    assert masked.tool_calls == [ToolCall(name="t", id="i", arguments="[redacted]")]
