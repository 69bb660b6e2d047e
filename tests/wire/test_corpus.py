"""Every file of the shared corpus loads and every interaction parses to the normalized call that
was written down, by reading the bodies, in corpus_expectations.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workbench.errors import WorkbenchError
from workbench.replay.cassette import load_cassette
from workbench.wire import parse_exchange

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "corpus"
EXPECTATIONS = json.loads((Path(__file__).parent / "corpus_expectations.json").read_text())
FIELDS = (
    "wire", "stream", "http_status", "model_served", "stop_reason", "settled", "input_tokens",
    "cache_read_tokens", "cache_write_tokens", "output_tokens", "reasoning_tokens", "cache_write_1h_tokens",
)


def test_every_corpus_file_has_an_expectation():
    files = sorted(str(path.relative_to(CORPUS)) for path in CORPUS.glob("*/*.yaml"))
    assert len(files) == 110
    assert files == sorted(EXPECTATIONS)


def _observed(call) -> dict:
    flat = call.flat()
    observed = {name: flat[name] for name in FIELDS}
    observed["tool_calls"] = len(call.tool_calls)
    observed["error_type"] = None if call.error_type is None else str(call.error_type)
    return observed


@pytest.mark.parametrize("name", sorted(name for name, want in EXPECTATIONS.items() if not want.get("invalid")))
def test_corpus_file_parses_to_its_expectation(name):
    interactions = load_cassette(CORPUS / name)
    expected = EXPECTATIONS[name]["interactions"]
    assert len(interactions) == len(expected)
    for index, (interaction, want) in enumerate(zip(interactions, expected, strict=True)):
        call = parse_exchange(interaction.exchange())
        assert call.error_type != "unparseable", call.error_message
        want = {**want, "error_type": None if want["error_type"] is None else str(want["error_type"])}
        assert _observed(call) == want, f"interaction {index}"


@pytest.mark.parametrize("name", sorted(name for name, want in EXPECTATIONS.items() if want.get("invalid")))
def test_python_tagged_yaml_is_refused_with_a_clear_error(name):
    with pytest.raises(WorkbenchError) as caught:
        load_cassette(CORPUS / name)
    assert caught.value.code == "WB_CASSETTE_INVALID"
    assert name.split("/")[-1] in caught.value.cause
