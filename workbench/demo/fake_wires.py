"""How the fake provider writes one turn on each wire: OpenAI chat completions, OpenAI Responses,
Anthropic Messages, Gemini's generateContent and the two legacy text completions (OpenAI's
`/v1/completions`, Anthropic's `/v1/complete`), JSON or a stream of server-sent events, byte for byte
the shapes the real APIs send (see `fake_provider` for what a turn holds and how its tokens are counted)."""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass
from typing import Any

CREATED = 1_700_000_000  # fixed clock: identical scripts give identical bytes


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, sort_keys=True)


# ---------------------------------------------------------------- stop reasons

_STOP_ALIASES = {
    "end": {"end_turn", "stop", "completed", "stop_sequence", "STOP"},
    "tool": {"tool_use", "tool_calls"},
    "length": {"max_tokens", "length", "max_output_tokens", "incomplete", "MAX_TOKENS"},
}
_STOP_SPELLING = {  # canonical -> per-wire spelling (Responses: the incomplete reason, or None)
    "openai.chat": {"end": "stop", "tool": "tool_calls", "length": "length"},
    "anthropic.messages": {"end": "end_turn", "tool": "tool_use", "length": "max_tokens"},
    "openai.responses": {"end": None, "tool": None, "length": "max_output_tokens"},
    "google.gemini": {"end": "STOP", "tool": "STOP", "length": "MAX_TOKENS"},  # a function call ends with STOP
    "openai.completions": {"end": "stop", "tool": "stop", "length": "length"},
    "anthropic.complete": {"end": "stop_sequence", "tool": "stop_sequence", "length": "max_tokens"},
}


def _stop_for(wire: str, raw: str) -> str | None:
    for canon, names in _STOP_ALIASES.items():
        if raw in names:
            return _STOP_SPELLING[wire][canon]
    return raw  # e.g. "refusal", "content_filter", "pause_turn": passed through


@dataclass
class Turn:
    """Everything a wire renderer needs; computed once, wire-independently."""

    n: int
    model: str
    text: str | None
    refusal: str | None
    calls: list[tuple[str, str, str]]  # (call id, name, JSON arguments)
    stop: str  # raw, any wire's spelling
    usage: dict[str, int]  # input_tokens (uncached), cache_read/write_tokens, output/reasoning_tokens
    usage_reported: bool = True



def _sse(event: str | None, data: Any) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return ((f"event: {event}\n" if event else "") + f"data: {payload}\n\n").encode()


def _pieces(text: str) -> list[str]:
    """Word-sized stream deltas; joined they are exactly the text."""
    return re.findall(r"\S+\s*|\s+", text)


def _loads_or_empty(args: str) -> Any:
    try:
        return json.loads(args)
    except json.JSONDecodeError:
        return {}


def _halves(s: str) -> list[str]:
    return [p for p in (s[: len(s) // 2], s[len(s) // 2:]) if p]


# ---------------------------------------------------------------- OpenAI chat completions

def _chat_usage(u: dict[str, int]) -> dict:
    prompt = u["input_tokens"] + u["cache_read_tokens"] + u["cache_write_tokens"]  # INCLUDES cached
    return {"prompt_tokens": prompt, "completion_tokens": u["output_tokens"],
            "total_tokens": prompt + u["output_tokens"],
            "prompt_tokens_details": {"cached_tokens": u["cache_read_tokens"], "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": u["reasoning_tokens"], "audio_tokens": 0,
                                          "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}}


def _render_chat(t: Turn, body: dict, stream: bool) -> Any:
    finish = _stop_for("openai.chat", t.stop)
    head = {"id": f"chatcmpl-fake{t.n:06d}", "created": CREATED, "model": t.model,
            "service_tier": "default", "system_fingerprint": "fp_fake"}
    if not stream:
        message: dict = {"role": "assistant", "content": t.text, "refusal": t.refusal, "annotations": []}
        if t.calls:
            message["tool_calls"] = [{"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
                                     for cid, name, args in t.calls]
        reported = {"usage": _chat_usage(t.usage)} if t.usage_reported else {}
        return {**head, "object": "chat.completion", **reported,
                "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}]}
    include_usage = bool((body.get("stream_options") or {}).get("include_usage")) and t.usage_reported
    head = {**head, "object": "chat.completion.chunk", **({"usage": None} if include_usage else {})}

    def chunk(delta: dict, finish_reason: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return _sse(None, {**head, "choices": [choice]})

    events = [chunk({"role": "assistant", "content": "", "refusal": None})]
    events += [chunk({"content": p}) for p in _pieces(t.text or "")]
    events += [chunk({"refusal": p}) for p in _pieces(t.refusal or "")]
    for i, (cid, name, args) in enumerate(t.calls):
        events.append(chunk({"tool_calls": [{"index": i, "id": cid, "type": "function",
                                             "function": {"name": name, "arguments": ""}}]}))
        events += [chunk({"tool_calls": [{"index": i, "function": {"arguments": p}}]}) for p in _halves(args)]
    events.append(chunk({}, finish))
    if include_usage:  # as OpenAI: usage only on request, in a last chunk with no choices
        events.append(_sse(None, {**head, "choices": [], "usage": _chat_usage(t.usage)}))
    events.append(_sse(None, "[DONE]"))
    return events


# ---------------------------------------------------------------- OpenAI Responses

def _render_responses(t: Turn, body: dict, stream: bool) -> Any:
    reason = _stop_for("openai.responses", t.stop)
    u = t.usage
    inp = u["input_tokens"] + u["cache_read_tokens"] + u["cache_write_tokens"]  # INCLUDES cached
    usage = {"input_tokens": inp, "input_tokens_details": {"cached_tokens": u["cache_read_tokens"]},
             "output_tokens": u["output_tokens"],
             "output_tokens_details": {"reasoning_tokens": u["reasoning_tokens"]},
             "total_tokens": inp + u["output_tokens"]}
    items: list[dict] = []
    if u["reasoning_tokens"]:
        items.append({"id": f"rs_fake{t.n:06d}", "type": "reasoning", "summary": []})
    parts = []
    if t.text is not None:
        parts.append({"type": "output_text", "text": t.text, "annotations": [], "logprobs": []})
    if t.refusal is not None:
        parts.append({"type": "refusal", "refusal": t.refusal})
    if parts:
        items.append({"id": f"msg_fake{t.n:06d}", "type": "message", "status": "completed",
                      "role": "assistant", "content": parts})
    items += [{"id": f"fc_fake{t.n:06d}_{i}", "type": "function_call", "status": "completed", "call_id": cid,
               "name": name, "arguments": args} for i, (cid, name, args) in enumerate(t.calls)]
    status = "incomplete" if reason else "completed"
    final = {"id": f"resp_fake{t.n:06d}", "object": "response", "created_at": CREATED, "status": status,
             "model": t.model, "output": items, "usage": usage, "error": None,
             "incomplete_details": {"reason": reason} if reason else None,
             "instructions": body.get("instructions"), "max_output_tokens": body.get("max_output_tokens"),
             "parallel_tool_calls": body.get("parallel_tool_calls", True), "previous_response_id": None,
             "temperature": body.get("temperature", 1.0), "top_p": body.get("top_p", 1.0),
             "tool_choice": body.get("tool_choice", "auto"), "tools": body.get("tools", []),
             "text": {"format": {"type": "text"}}, "reasoning": {"effort": None, "summary": None},
             "truncation": "disabled", "store": True, "metadata": {}, "service_tier": "default"}
    if not stream:
        return final
    seq = itertools.count(0)
    events: list[bytes] = []

    def ev(etype: str, **data: Any) -> None:
        events.append(_sse(etype, {"type": etype, "sequence_number": next(seq), **data}))

    pending = {**final, "status": "in_progress", "output": [], "usage": None, "incomplete_details": None}
    ev("response.created", response=pending)
    ev("response.in_progress", response=pending)
    for oi, item in enumerate(items):
        iid = item["id"]
        if item["type"] == "message":
            ev("response.output_item.added", output_index=oi, item={**item, "status": "in_progress", "content": []})
            for ci, part in enumerate(item["content"]):
                loc = {"item_id": iid, "output_index": oi, "content_index": ci}
                if part["type"] == "output_text":
                    ev("response.content_part.added", **loc, part={**part, "text": ""})
                    for p in _pieces(part["text"]):
                        ev("response.output_text.delta", **loc, delta=p, logprobs=[])
                    ev("response.output_text.done", **loc, text=part["text"], logprobs=[])
                else:
                    ev("response.content_part.added", **loc, part={**part, "refusal": ""})
                    for p in _pieces(part["refusal"]):
                        ev("response.refusal.delta", **loc, delta=p)
                    ev("response.refusal.done", **loc, refusal=part["refusal"])
                ev("response.content_part.done", **loc, part=part)
        elif item["type"] == "function_call":
            ev("response.output_item.added", output_index=oi,
               item={**item, "status": "in_progress", "arguments": ""})
            for p in _halves(item["arguments"]):
                ev("response.function_call_arguments.delta", item_id=iid, output_index=oi, delta=p)
            ev("response.function_call_arguments.done", item_id=iid, output_index=oi,
               name=item["name"], arguments=item["arguments"])
        else:
            ev("response.output_item.added", output_index=oi, item=item)
        ev("response.output_item.done", output_index=oi, item=item)
    ev(f"response.{status}", response=final)  # response.incomplete when cut short, as OpenAI
    return events


# ---------------------------------------------------------------- Anthropic Messages

def _render_anthropic(t: Turn, body: dict, stream: bool) -> Any:
    u = t.usage
    usage = {"input_tokens": u["input_tokens"],  # EXCLUDES cache reads and writes
             "cache_creation_input_tokens": u["cache_write_tokens"],
             "cache_read_input_tokens": u["cache_read_tokens"],
             "cache_creation": {"ephemeral_5m_input_tokens": u["cache_write_tokens"], "ephemeral_1h_input_tokens": 0},
             "output_tokens": u["output_tokens"], "service_tier": "standard"}
    blocks: list[dict] = []
    if t.text is not None or t.refusal is not None:
        blocks.append({"type": "text", "text": t.text if t.text is not None else t.refusal})
    blocks += [{"type": "tool_use", "id": cid, "name": name, "input": _loads_or_empty(args)}
               for cid, name, args in t.calls]
    stop = _stop_for("anthropic.messages", t.stop)
    msg = {"id": f"msg_fake{t.n:06d}", "type": "message", "role": "assistant", "model": t.model,
           "content": blocks, "stop_reason": stop, "stop_sequence": None, "usage": usage}
    if not stream:
        return msg

    def ev(etype: str, **data: Any) -> bytes:
        return _sse(etype, {"type": etype, **data})

    start_usage = {**usage, "output_tokens": 1}  # as Anthropic: a placeholder until message_delta
    events = [ev("message_start", message={**msg, "content": [], "stop_reason": None, "usage": start_usage}),
              ev("ping")]
    for i, b in enumerate(blocks):
        if b["type"] == "text":
            events.append(ev("content_block_start", index=i, content_block={"type": "text", "text": ""}))
            events += [ev("content_block_delta", index=i, delta={"type": "text_delta", "text": p})
                       for p in _pieces(b["text"])]
        else:
            events.append(ev("content_block_start", index=i, content_block={**b, "input": {}}))
            events += [ev("content_block_delta", index=i, delta={"type": "input_json_delta", "partial_json": p})
                       for p in _halves(dumps(b["input"]))]
        events.append(ev("content_block_stop", index=i))
    final_usage = {k: usage[k] for k in ("input_tokens", "cache_creation_input_tokens",
                                         "cache_read_input_tokens", "output_tokens")}
    events.append(ev("message_delta", delta={"stop_reason": stop, "stop_sequence": None}, usage=final_usage))
    events.append(ev("message_stop"))
    return events


# ---------------------------------------------------------------- Gemini generateContent

def _gemini_usage(u: dict[str, int], visible_so_far: int | None = None) -> dict:
    """`promptTokenCount` INCLUDES the cached tokens; thoughts are apart from the candidates. A
    stream's earlier chunks carry a running count (`visible_so_far`), as Gemini's do."""
    prompt = u["input_tokens"] + u["cache_read_tokens"] + u["cache_write_tokens"]
    candidates = u["output_tokens"] - u["reasoning_tokens"] if visible_so_far is None else visible_so_far
    usage = {"promptTokenCount": prompt, "candidatesTokenCount": candidates,
             "totalTokenCount": prompt + candidates + u["reasoning_tokens"],
             "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}]}
    if u["cache_read_tokens"]:
        usage["cachedContentTokenCount"] = u["cache_read_tokens"]
        usage["cacheTokensDetails"] = [{"modality": "TEXT", "tokenCount": u["cache_read_tokens"]}]
    if u["reasoning_tokens"]:
        usage["thoughtsTokenCount"] = u["reasoning_tokens"]
    return usage


def _render_gemini(t: Turn, body: dict, stream: bool) -> Any:
    finish = _stop_for("google.gemini", t.stop)
    text = t.text if t.text is not None else t.refusal
    calls = [{"functionCall": {"name": name, "args": _loads_or_empty(args)}} for _, name, args in t.calls]
    head = {"modelVersion": t.model, "responseId": f"fake{t.n:06d}gemini"}

    def chunk(parts: list[dict], finish_reason: str | None, usage: dict) -> dict:
        candidate: dict = {"content": {"parts": parts, "role": "model"}, "index": 0}
        if finish_reason:
            candidate["finishReason"] = finish_reason
        return {"candidates": [candidate], "usageMetadata": usage, **head}

    final_usage = _gemini_usage(t.usage)
    if not stream:
        return chunk(([{"text": text}] if text is not None else []) + calls, finish, final_usage)
    pieces = _pieces(text or "")
    events, so_far = [], ""
    for piece in pieces[:-1]:  # the last piece rides on the finishing chunk, as Gemini's does
        so_far += piece
        events.append(chunk([{"text": piece}], None, _gemini_usage(t.usage, -(-len(so_far.encode()) // 4))))
    last = [{"text": pieces[-1]}] if pieces else []
    events.append(chunk(last + calls, finish, final_usage))
    return [f"data: {json.dumps(event, ensure_ascii=False)}\r\n\r\n".encode() for event in events]
# ---------------------------------------------------------------- legacy text completions

LEGACY_WIRES = ("openai.completions", "anthropic.complete")


def legacy_prompts(body: dict) -> list[str] | None:
    """A legacy request's prompts (OpenAI takes a list, one answer each), or None when `prompt` is
    not a string or a list of strings (token arrays are not spoken here)."""
    value = body.get("prompt")
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(item, str) for item in value):
        return value
    return None


def legacy_copies(body: dict) -> int:
    """Completions generated, and billed, per prompt: `n`, or `best_of` when larger (the server
    generates `best_of` and returns the best `n`; all of them are billed)."""
    counts = [value for value in (body.get("n"), body.get("best_of")) if isinstance(value, int) and value > 0]
    return max(counts, default=1)


def _render_completions(t: Turn, body: dict, stream: bool) -> Any:
    prompts = legacy_prompts(body) or [""]
    n = body.get("n") if isinstance(body.get("n"), int) and body["n"] > 0 else 1
    finish = _stop_for("openai.completions", t.stop)
    # `echo` returns each prompt before its answer (billed once, as prompt tokens)
    texts = [(prompt if body.get("echo") else "") + (t.text or "") for prompt in prompts for _ in range(n)]
    prompt_tokens = t.usage["input_tokens"] + t.usage["cache_read_tokens"] + t.usage["cache_write_tokens"]
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": t.usage["output_tokens"],
             "total_tokens": prompt_tokens + t.usage["output_tokens"]}
    head = {"id": f"cmpl-fake{t.n:06d}", "object": "text_completion", "created": CREATED, "model": t.model}
    if not stream:
        choices = [{"text": text, "index": i, "logprobs": None, "finish_reason": finish} for i, text in enumerate(texts)]
        return {**head, "choices": choices, **({"usage": usage} if t.usage_reported else {})}
    include_usage = usage_sent("openai.completions", body, stream) and t.usage_reported
    head = {**head, **({"usage": None} if include_usage else {})}

    def chunk(index: int, text: str, finish_reason: str | None = None) -> bytes:
        return _sse(None, {**head, "choices": [{"text": text, "index": index, "logprobs": None,
                                                "finish_reason": finish_reason}]})

    events = [chunk(i, piece) for i, text in enumerate(texts) for piece in _pieces(text)]
    events += [chunk(i, "", finish) for i in range(len(texts))]
    if include_usage:  # as OpenAI: usage only on request, in a last chunk with no choices
        events.append(_sse(None, {**head, "choices": [], "usage": usage}))
    events.append(_sse(None, "[DONE]"))
    return events


def _render_anthropic_complete(t: Turn, body: dict, stream: bool) -> Any:
    head = {"type": "completion", "id": f"compl_fake{t.n:06d}"}
    stop = _stop_for("anthropic.complete", t.stop)
    if not stream:  # no usage: the Text Completions API never reports any
        return {**head, "completion": t.text or "", "stop_reason": stop, "model": t.model}
    events = [_sse("completion", {**head, "completion": piece, "stop_reason": None, "model": t.model})
              for piece in _pieces(t.text or "")]
    events.insert(min(1, len(events)), _sse("ping", {"type": "ping"}))
    events.append(_sse("completion", {**head, "completion": "", "stop_reason": stop, "model": t.model}))
    return events


def usage_sent(wire: str, body: dict, stream: bool) -> bool:
    """Does the answer on this wire carry usage? Anthropic's Text Completions never do; an OpenAI chat
    or completions stream only when `stream_options.include_usage` asks."""
    if wire == "anthropic.complete":
        return False
    if stream and wire in ("openai.chat", "openai.completions"):
        return bool((body.get("stream_options") or {}).get("include_usage"))
    return True


RENDERERS = {"openai.chat": ("x-request-id", _render_chat), "openai.responses": ("x-request-id", _render_responses),
              "anthropic.messages": ("request-id", _render_anthropic),
              "google.gemini": ("x-request-id", _render_gemini),
              "openai.completions": ("x-request-id", _render_completions),
              "anthropic.complete": ("request-id", _render_anthropic_complete)}
