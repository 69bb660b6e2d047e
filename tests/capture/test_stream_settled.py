"""A stream is complete when its usage is final, per protocol: a client that stops reading right
after the event carrying the final usage (Anthropic's `message_delta`, OpenAI chat's usage chunk)
has its call settled with exact usage and cost, not `stream_abandoned`; a client that stops before
it leaves the call abandoned and unsettled, never drained. The fake provider's own log of what it
served is the reference."""

from __future__ import annotations

import anthropic
import openai
import pytest
from fixtures.capture_store import expected_cost

import workbench
from workbench.demo.fake_provider import Reply

MESSAGES = [{"role": "user", "content": "hello"}]
USAGE = {"input_tokens": 40, "cache_read_tokens": 8, "cache_write_tokens": 4, "output_tokens": 9,
         "reasoning_tokens": 0}


def _anthropic_until(url: str, last: str) -> None:
    client = anthropic.Anthropic(base_url=url, api_key="sk-ant-test", max_retries=0,
                                 http_client=workbench.http_client())
    stream = client.messages.create(model="wbt-claude", max_tokens=500, messages=MESSAGES, stream=True)
    for event in stream:
        if event.type == last:
            break
    stream.close()


def _chat_until(url: str, last: str) -> None:
    client = openai.OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0,
                           http_client=workbench.http_client())
    stream = client.chat.completions.create(model="wbt-gpt", messages=MESSAGES, stream=True,
                                            stream_options={"include_usage": True})
    for chunk in stream:
        if (last == "usage" and chunk.usage is not None) or (last == "finish" and chunk.choices
                                                               and chunk.choices[0].finish_reason):
            break
    stream.close()


@pytest.mark.parametrize(("stop", "model", "usage"), [
    (lambda url: _anthropic_until(url, "message_delta"), "wbt-claude", USAGE),
    (lambda url: _chat_until(url, "usage"), "wbt-gpt", {**USAGE, "cache_write_tokens": 0}),
], ids=["anthropic-message_delta", "chat-usage-chunk"])
def test_a_stream_stopped_once_its_usage_is_final_is_settled(store, fake_provider, fake_url, stop, model, usage):
    fake_provider.script(Reply(text="a whole answer, then the bill", usage=usage))
    with workbench.run("final usage") as run:
        stop(fake_url)
    [row] = store.calls()
    assert (row["stream"], row["settled"], row["error_type"]) == (True, True, None)
    assert {name: row[name] for name in usage} == usage
    assert row["cost_micros"] == expected_cost(model, usage)
    assert (run.billed.calls, run.billed.unsettled) == (1, 0)
    assert run.billed.cost_micros == row["cost_micros"]


@pytest.mark.parametrize("stop", [
    lambda url: _anthropic_until(url, "content_block_delta"),
    lambda url: _chat_until(url, "finish"),  # the finish reason, but not the usage chunk after it
], ids=["anthropic-before-message_delta", "chat-before-usage-chunk"])
def test_a_stream_stopped_before_its_usage_is_final_stays_abandoned(store, fake_provider, fake_url, stop):
    fake_provider.script(Reply(text="an answer cut short by its reader"))
    with workbench.run("no final usage") as run:
        stop(fake_url)
    [row] = store.calls()
    assert (row["stream"], row["settled"], row["error_type"]) == (True, False, "stream_abandoned")
    assert row["cost_micros"] is None
    assert (run.billed.calls, run.billed.unsettled) == (0, 1)
