"""OpenAI legacy completions (`POST /v1/completions`: `gpt-3.5-turbo-instruct`, `davinci-002`,
`babbage-002`, and the compatible hosts that still answer it: Azure's `.../deployments/{name}/completions`,
vLLM, Together, Fireworks, DeepSeek's FIM beta).

The answer is a `text_completion` object: `choices[].text` with `finish_reason` (`stop`, `length`,
`content_filter`) and `usage` with `prompt_tokens` and `completion_tokens`, the same counters as chat,
with the same meaning: `prompt_tokens` INCLUDES `prompt_tokens_details.cached_tokens` where a
compatible host reports a prompt cache, so the uncached input is what is left after it is taken out
(`openai_chat.usage_of`). `output_text` and `stop_reason` are those of choice 0.

Usage is what the provider billed, never counted from the text: with `n` > 1 every choice is in
`completion_tokens`; with `best_of` the server generates `best_of` completions, returns the best `n`,
and bills them all, so `completion_tokens` is larger than the returned texts' tokens; with `echo` the
returned text starts with the prompt, which is billed once, as prompt tokens. A body without `usage`
leaves the call unsettled.

A stream (`data:` chunks of the same object, each choice's text a delta, then `data: [DONE]`) carries
usage only when `stream_options.include_usage` asks, in a last chunk with no choices: without it the
call is unsettled, never guessed. It is complete where a chat stream is: at `[DONE]`, or at a usage
chunk at or after the finish reason (`openai_chat.is_complete`)."""

from __future__ import annotations

from workbench.wire.call import Call
from workbench.wire.openai_chat import _settle, is_complete, usage_of
from workbench.wire.sse import Event

__all__ = ["fill_json", "fill_stream", "is_complete", "usage_of"]


def _error(call: Call, body: dict) -> None:
    if isinstance(body.get("error"), dict):  # compatible hosts answer 200 with an error, or send one mid-stream
        call.error_type = body["error"].get("type") or str(body["error"].get("code"))
        call.error_message = body["error"].get("message")


def fill_json(call: Call, body: dict) -> None:
    call.response_id = body.get("id")
    call.model_served = body.get("model")
    choices = body.get("choices") or []
    if choices and isinstance(choices[0], dict):
        call.stop_reason = choices[0].get("finish_reason")
        text = choices[0].get("text")
        call.output_text = text if isinstance(text, str) else None
    _settle(call, body.get("usage"))
    _error(call, body)


def fill_stream(call: Call, events: list[Event]) -> None:
    text: list[str] = []
    for event in events:
        if event.data.strip() == "[DONE]":
            continue
        chunk = event.json()
        if not isinstance(chunk, dict):
            continue
        _error(call, chunk)
        call.response_id = call.response_id or chunk.get("id")
        call.model_served = call.model_served or chunk.get("model")
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            if isinstance(choice.get("text"), str):
                text.append(choice["text"])
            if choice.get("finish_reason"):
                call.stop_reason = choice["finish_reason"]
        _settle(call, chunk.get("usage"))
    call.output_text = "".join(text) if text else None
