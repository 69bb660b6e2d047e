"""What parsing one wire imports and builds: a pytest session replaying chat completions pays for
neither the other wires' parsers nor pydantic validators it never uses (#21)."""

from __future__ import annotations

import json
import subprocess
import sys

CODE = """
import json, sys
from workbench.wire import Exchange, parse_exchange
from workbench.models import ModelSpec, PriceSheet, PriceTier
from workbench.capture.runs import Billed
body = {"model": "gpt-4o-mini", "choices": [{"message": {"content": "hi"}}], "usage": {"prompt_tokens": 3, "completion_tokens": 1}}
call = parse_exchange(Exchange.model_construct(method="POST", url="https://api.openai.com/v1/chat/completions",
                      request_headers={}, request_body=b'{"model": "gpt-4o-mini"}', status=200,
                      response_headers={"content-type": "application/json"}, response_body=json.dumps(body).encode(),
                      complete=True))
print(json.dumps({
    "output": call.output_text, "input_tokens": call.usage.input_tokens,
    "parsers": sorted(name for name in sys.modules if name.startswith("workbench.wire.") and name.split(".")[2] in
                      ("openai_chat", "openai_responses", "anthropic_messages", "anthropic_complete", "openai_embeddings",
                       "openai_completions", "gemini")),
    "built": sorted(model.__name__ for model in (Exchange, PriceTier, ModelSpec, Billed) if model.__pydantic_complete__),
}))
"""


def test_parsing_one_wire_imports_its_parser_and_builds_no_unused_validator():
    answer = json.loads(subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, check=True).stdout)
    assert answer["output"] == "hi" and answer["input_tokens"] == 3
    assert answer["parsers"] == ["workbench.wire.gemini", "workbench.wire.openai_chat"]  # gemini: `wire_of` reads its paths
    assert answer["built"] == []


def test_every_wire_still_parses_and_a_deferred_model_still_validates():
    import pytest
    from pydantic import ValidationError

    from workbench.models import PriceTier
    from workbench.wire import Exchange, is_complete, parse_exchange

    for url in ("https://api.anthropic.com/v1/messages", "https://api.anthropic.com/v1/complete",
                "https://api.openai.com/v1/responses", "https://api.openai.com/v1/embeddings",
                "https://api.openai.com/v1/completions"):
        call = parse_exchange(Exchange(url=url, status=200, response_body=b'{"usage": {}}'))
        assert call.error_type != "unparseable", (url, call.error_message)
        assert is_complete(call.wire, b"data: [DONE]\n\n") in (True, False)
    with pytest.raises(ValidationError):
        PriceTier(input=True, output=1)  # a boolean is still no price
    with pytest.raises(ValidationError):
        Exchange(url=None)


REDACT = """
import json
from workbench.wire import redact
clean = redact.mask_secrets('{"messages": [{"role": "user", "content": "where is order #100001?"}]}', ["sk-known-value"])
compiled_clean = sorted(redact._COMPILED)
masked = redact.mask_secrets("key sk-proj-" + "a" * 30 + " and ghp_" + "b" * 36)
print(json.dumps({"clean": clean, "compiled_clean": compiled_clean, "masked": masked, "compiled": sorted(redact._COMPILED)}))
"""


def test_a_clean_body_compiles_no_secret_pattern_and_a_secret_is_still_masked():
    answer = json.loads(subprocess.run([sys.executable, "-c", REDACT], capture_output=True, text=True, check=True).stdout)
    assert answer["compiled_clean"] == []  # the twenty compiles were 12 M instructions of each recording process
    assert answer["clean"] == '{"messages": [{"role": "user", "content": "where is order #100001?"}]}'
    assert answer["masked"] == "key [redacted] and [redacted]"
    assert answer["compiled"] == ["API key (sk-…: OpenAI, OpenRouter, DeepSeek, …)", "GitHub token"]
