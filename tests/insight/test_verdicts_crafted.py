"""Crafted traffic with a known answer, through the official Anthropic SDK against the fake
provider over HTTP: every verdict is the one the provider's cache state says."""

from __future__ import annotations

import workbench
from insight_traffic import DOCS, SHORT, Clock, ask, claude, provider


def verdicts(store) -> list[tuple]:
    workbench.flush()  # the spool thread may still hold calls it has not written
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


def test_a_timestamp_in_the_system_prompt_is_a_changed_prefix_named_with_its_diff(store, fake_url, _fake_server):
    clock = Clock()
    _fake_server.provider = provider(clock)
    client = claude(fake_url)
    with workbench.run("chat"):
        for question in ("What is replay?", "What is a gate?"):
            ask(client, question, system=f"Now: 2025-10-09 10:{int(clock.now) % 60:02d}:00 UTC.\n{DOCS}")
            clock.advance(7)
    assert verdicts(store) == [("cold", None), ("prefix_changed", "system block 0")]
    diff = store.one("SELECT p.diff FROM call_prefixes p JOIN calls c USING (call_id) "
                     "WHERE c.cache_verdict = 'prefix_changed'")["diff"]
    assert diff.startswith("Now: 2025-10-09 10:2[-0-]{+7+}:00 UTC.")  # the bytes that moved, in context


def test_a_prompt_under_the_minimum_and_an_unmarked_one(store, fake_url, _fake_server):
    clock = Clock()
    _fake_server.provider = provider(clock)
    client = claude(fake_url)
    with workbench.run("chat"):
        ask(client, "Yes or no?", system=SHORT)
        ask(client, "Yes or no?", system=DOCS, marked=False)
    assert verdicts(store) == [("below_minimum", None), ("not_requested", None)]


def test_an_identical_prefix_within_its_life_that_read_nothing_is_unexplained(store, fake_url, _fake_server):
    clock = Clock()
    fake = provider(clock)
    _fake_server.provider = fake
    client = claude(fake_url)
    with workbench.run("chat"):
        ask(client, "What is replay?")
        clock.advance(30)
        fake.evict()  # the provider dropped the entry: nothing in the prompt changed
        ask(client, "What is a gate?")
    assert verdicts(store) == [("cold", None), ("unexplained", None)]
    first, second = store.rows("SELECT call_id, cache_entry_call_id, cache_miss_micros, cache_write_tokens "
                               "FROM calls ORDER BY started_at")
    assert second["cache_entry_call_id"] == first["call_id"]  # the entry it should have read
    assert second["cache_miss_micros"] > 0


def test_a_replay_gets_the_verdicts_the_live_traffic_got(store, fake_url, _fake_server, tmp_path):
    import anthropic

    clock = Clock()
    fake = provider(clock)
    _fake_server.provider = fake
    path = tmp_path / "chat.json"

    def session(cassette) -> None:
        client = anthropic.Anthropic(base_url=fake_url, api_key="test-key", max_retries=0,
                                     http_client=cassette.http_client())
        with workbench.run("chat"):
            ask(client, "What is replay?")
            clock.advance(20)
            ask(client, "What is a gate?")
            clock.advance(400)
            ask(client, "What is a cassette?")
            clock.advance(5)
            fake.evict()
            ask(client, "What is a baseline?")
            ask(client, "Yes or no?", system=SHORT)
        cassette.save()

    session(workbench.Cassette(path, mode="record"))
    live = verdicts(store)
    assert live == [("cold", None), ("hit", None), ("expired", None), ("unexplained", None), ("below_minimum", None)]
    for _ in range(2):  # each load of the cassette is its own lineage: the second replay is not warmed by the first
        session(workbench.Cassette(path, mode="replay"))
    workbench.flush()
    rows = store.rows("SELECT c.replayed, c.cache_verdict FROM calls c JOIN call_prefixes p USING (call_id) "
                      "ORDER BY p.session NULLS FIRST, c.started_at")
    assert [row["cache_verdict"] for row in rows] == [verdict for verdict, _ in live] * 3
    assert sum(row["replayed"] for row in rows) == 10
