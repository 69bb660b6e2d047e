"""The demo store's cache verdicts and compactions are the known ones: the demo's fake provider
caches like Anthropic and OpenAI but never expires or evicts an entry, and its one compacting agent
reports every compaction it makes."""

from __future__ import annotations

import duckdb
import pytest

from test_demo import demo, settled

from workbench.runtime.compaction import INSTRUCTIONS


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    db = tmp_path_factory.mktemp("demo-insight") / "wb.duckdb"
    result = demo(db)
    assert result.returncode == 0, result.stderr
    con = duckdb.connect(str(settled(db)), read_only=True)
    yield con
    con.close()


def rows(con, sql: str) -> list[tuple]:
    return con.execute(sql).fetchall()


def test_every_settled_call_has_its_known_verdict(store):
    # every call on a wire with a prompt cache is judged, and every read is a hit
    assert rows(store, "SELECT count(*) FROM calls WHERE settled AND cache_verdict IS NULL") == [(0,)]
    assert rows(store, "SELECT count(*) FROM calls WHERE settled AND (cache_read_tokens > 0) <> "
                       "(cache_verdict = 'hit')") == [(0,)]
    # the fake never evicts, so nothing is unexplained; it expires an entry five minutes after its
    # last use, as the real APIs do: the shop's quiet hours expire some, each named with the entry
    # it outlived
    assert rows(store, "SELECT count(*) FROM calls WHERE cache_verdict = 'unexplained'") == [(0,)]
    expired, youngest = rows(store, "SELECT count(*), min(epoch(c.started_at) - epoch(e.started_at)) FROM calls c "
                                    "JOIN calls e ON e.call_id = c.cache_entry_call_id WHERE c.cache_verdict = 'expired'")[0]
    assert expired == rows(store, "SELECT count(*) FROM calls WHERE cache_verdict = 'expired'")[0][0] > 0
    assert youngest > 300
    # the docs questions share one marked system prompt: the first of the five weeks writes it
    assert rows(store, "SELECT c.cache_verdict FROM calls c JOIN runs r USING (run_id) WHERE r.name = 'docs-qa' "
                       "AND c.settled ORDER BY c.started_at LIMIT 1") == [("cold",)]
    assert {verdict for (verdict,) in rows(store, "SELECT DISTINCT c.cache_verdict FROM calls c JOIN runs r "
                                                  "USING (run_id) WHERE r.name = 'docs-qa' AND c.settled")} == {
        "cold", "hit", "expired"}
    # the runtime's triage prompts are under Haiku's cacheable minimum: the gateway sends them
    # without a cache mark, so they asked for nothing (not a miss below the minimum)
    assert rows(store, "SELECT DISTINCT c.cache_verdict FROM calls c JOIN runs r USING (run_id) "
                       "WHERE r.name = 'ticket-classifier' AND NOT c.replayed") == [("not_requested",)]
    # the nightly invoice batch's prompts are marked but short: below the minimum, never a miss
    assert rows(store, "SELECT DISTINCT c.cache_verdict FROM calls c JOIN runs r USING (run_id) "
                       "WHERE r.name = 'invoice-extractor' AND c.settled") == [("below_minimum",)]
    assert rows(store, "SELECT count(*) FROM calls WHERE cache_verdict <> 'hit' AND cost_micros IS NOT NULL "
                       "AND cache_miss_micros IS NULL") == [(0,)]  # every priced miss has its cost


def test_every_compaction_is_reported_and_seen_in_the_traffic_once(store):
    reported = rows(store, "SELECT count(*) FROM compactions WHERE outcome = 'ok'")[0][0]
    assert reported >= 1
    assert rows(store, "SELECT source, detected, count(*) FROM compactions WHERE outcome = 'ok' GROUP BY ALL") == [
        ("reported", True, reported)]
    # the call that wrote each summary is the runtime's summarising call (its instructions open the request)
    summaries = rows(store, "SELECT b.request_json FROM compactions x JOIN call_bodies b ON b.call_id = x.summary_call_id")
    assert len(summaries) == reported and all(INSTRUCTIONS[:40] in body for (body,) in summaries)
