"""Verdicts on real recorded traffic from the corpus (other projects' cassettes), replayed through
capture: the recorded `Date` headers are the clock, so a replay is judged on the recorded timeline."""

from __future__ import annotations

from pathlib import Path

import workbench
from workbench.replay.cassette import load_cassette
from workbench.wire.decode import decode_body

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "corpus"


def replay(path: Path) -> None:
    """Every interaction of a corpus cassette, in file order, through Workbench's client (capture
    around the replay transport), as the project's own test would send it."""
    client = workbench.http_client(cassette=path, mode="replay")
    for interaction in load_cassette(path):
        request = interaction.request
        encoding = ", ".join(v for k, vs in request.headers.items() if k.lower() == "content-encoding" for v in vs)
        response = client.request(request.method, request.uri, content=decode_body(request.body, encoding) or None,
                                  headers={"content-type": "application/json"})
        response.read()
    client.close()


def verdicts(store) -> list[tuple]:
    workbench.flush()  # the spool thread may still hold calls it has not written
    return [(row["cache_verdict"], row["cache_read_tokens"]) for row in store.rows(
        "SELECT cache_verdict, cache_read_tokens FROM calls ORDER BY started_at")]


def test_openai_automatic_caching_a_year_apart_and_a_miss_on_an_identical_prefix(store):
    # openllmetry recorded the same summary request twice in April 2025 (the second read 1,024
    # tokens), then twice again in March 2026: the first of those found its entry long expired, and
    # the second, 7 seconds later with the very same prefix, still read nothing
    replay(CORPUS / "traceloop__openllmetry" / ("packages__opentelemetry-instrumentation-openai__tests__traces__"
                                                 "cassettes__test_prompt_caching__test_openai_prompt_caching.yaml"))
    assert verdicts(store) == [("cold", 0), ("hit", 1024), ("expired", 0), ("unexplained", 0)]
    first, second, third, fourth = store.rows(
        "SELECT call_id, cache_entry_call_id, cache_miss_micros FROM calls ORDER BY started_at")
    assert second["cache_entry_call_id"] == first["call_id"]
    assert third["cache_entry_call_id"] == first["call_id"] or third["cache_entry_call_id"] == second["call_id"]
    assert fourth["cache_entry_call_id"] == third["call_id"]


def test_anthropic_explicit_marks_write_then_read(store):
    for name in ("test_anthropic_prompt_caching_legacy", "test_anthropic_prompt_caching_stream_legacy"):
        replay(CORPUS / "traceloop__openllmetry" / (
            f"packages__opentelemetry-instrumentation-anthropic__tests__cassettes__test_prompt_caching__{name}.yaml"))
    workbench.flush()
    rows = store.rows("SELECT c.cache_verdict, c.cache_entry_call_id, c.call_id, c.cache_write_tokens "
                      "FROM calls c JOIN call_prefixes p USING (call_id) ORDER BY p.clock_at")
    assert [row["cache_verdict"] for row in rows] == ["cold", "hit", "cold", "hit"]
    assert rows[1]["cache_entry_call_id"] == rows[0]["call_id"] and rows[3]["cache_entry_call_id"] == rows[2]["call_id"]


def test_a_cache_warmed_before_the_recording_and_a_host_with_no_minimum(store):
    # pydantic-ai's recording starts on a warm cache (its first call already reads); Mistral caches
    # the shared history of a conversation
    replay(CORPUS / "pydantic__pydantic-ai" / "tests__models__cassettes__test_anthropic__test_anthropic_cache_real_api.yaml")
    replay(CORPUS / "pydantic__pydantic-ai" / "tests__models__cassettes__test_mistral__test_mistral_history_uses_prompt_cache.yaml")
    assert verdicts(store) == [("hit", 1111), ("hit", 1111), ("cold", 0), ("hit", 224)]
