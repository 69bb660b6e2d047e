"""Crafted traffic with a known answer, through the official Anthropic SDK against the fake
provider over HTTP: every verdict is the one the provider's cache state says."""

from __future__ import annotations

import workbench
from insight_traffic import DOCS, SHORT, Clock, ask, claude, provider


def verdicts(store) -> list[tuple]:
    return [(row["cache_verdict"], row["cache_region"]) for row in store.rows(
        "SELECT cache_verdict, cache_region FROM calls ORDER BY started_at")]


def test_cold_then_hit_then_expired_after_an_idle_gap(store, fake_url, _fake_server):
    clock = Clock()
    _fake_server.provider = provider(clock)
    client = claude(fake_url)
    with workbench.run("chat"):
        ask(client, "What is replay?")
        clock.advance(20)
        ask(client, "What is a gate?")
        clock.advance(301)  # idle past the 5-minute life
        ask(client, "What is a cassette?")
    assert verdicts(store) == [("cold", None), ("hit", None), ("expired", None)]
