"""Real recorded traffic on the billable endpoints besides chat (the corpus's embeddings and legacy
completions files): every interaction parses to its wire, and its counters are the ones in its
response body, read here apart from the parser; a body with no usage is an unsettled call."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from workbench.replay.cassette import load_cassette
from workbench.wire import parse_exchange
from workbench.wire.decode import decode_body
from workbench.wire.sse import parse_events

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "corpus"
MANIFEST = json.loads((CORPUS / "manifest.json").read_text())
WIRES = {"embeddings": "openai.embeddings", "completions(legacy)": "openai.completions",
         "complete(legacy)": "anthropic.complete"}
FILES = {entry["file"]: WIRES[entry["apis"][0]] for entry in MANIFEST if entry["apis"][0] in WIRES}


def test_each_endpoint_has_real_recordings():
    counts = Counter(FILES.values())  # no streamed /v1/complete recording was found anywhere
    assert counts == {"openai.embeddings": 3, "openai.completions": 8, "anthropic.complete": 1}


def _usage_in(body: str) -> dict | None:
    """The last usage object the body carries (a JSON answer, or any chunk of a stream)."""
    chunks = [event.json() for event in parse_events(body)] if body.lstrip().startswith("data:") else [json.loads(body)]
    found = [chunk["usage"] for chunk in chunks if isinstance(chunk, dict) and isinstance(chunk.get("usage"), dict)]
    return found[-1] if found else None


@pytest.mark.parametrize("name", sorted(FILES))
def test_counters_are_the_bodys_own(name):
    for interaction in load_cassette(CORPUS / name):
        exchange = interaction.exchange()
        call = parse_exchange(exchange)
        assert call.wire == FILES[name] and call.error_type != "unparseable"
        body = decode_body(exchange.response_body, {k.lower(): v for k, v in exchange.response_headers.items()}
                           .get("content-encoding")).decode()
        usage = _usage_in(body) if exchange.status == 200 else None
        if usage is None:  # Anthropic's /v1/complete, streams without include_usage, errors
            assert (call.settled, call.usage.total_input, call.usage.output_tokens, call.cost_micros) == (False, 0, 0, None)
            continue
        assert call.settled
        assert call.usage.input_tokens + call.usage.cache_read_tokens == usage["prompt_tokens"]
        assert call.usage.output_tokens == usage.get("completion_tokens", 0)
        assert call.usage.output_tokens + call.usage.total_input == usage["total_tokens"]
