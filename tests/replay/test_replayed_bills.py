"""Paid apart from replayed: a run that replayed 3 calls and sent 1 is billed for 1, and says it
replayed 3 and what they would have cost; the stored bill says the same."""

from __future__ import annotations

from fixtures.capture_store import expected_cost

import workbench
from workbench.demo.fake_provider import FakeProvider, FakeTransport

URL = "http://fake.test/v1/chat/completions"
USAGE = {"input_tokens": 1000, "cache_read_tokens": 0, "cache_write_tokens": 0, "output_tokens": 10,
         "reasoning_tokens": 0}


def _ask(client, text: str) -> None:
    client.post(URL, json={"model": "wbt-gpt", "messages": [{"role": "user", "content": text}]}).raise_for_status()


def test_a_run_bills_live_calls_and_counts_replayed_ones_apart(tmp_path, store):
    path = tmp_path / "c.json"
    recording = workbench.http_client(cassette=path, mode="record", transport=FakeTransport(FakeProvider()))
    for text in ("a", "b", "c"):
        _ask(recording, text)
    recording.close()

    replaying = workbench.http_client(cassette=path, mode="replay", transport=FakeTransport(FakeProvider()))
    live = workbench.http_client(transport=FakeTransport(FakeProvider()))
    with workbench.run("mixed") as run:
        for text in ("a", "b", "c"):
            _ask(replaying, text)
        _ask(live, "d")

    calls = {call.replayed: call for call in run.calls}
    one = calls[False].cost_micros
    assert one == expected_cost("wbt-gpt", {**USAGE, "input_tokens": calls[False].input_tokens,
                                            "output_tokens": calls[False].output_tokens})
    billed = run.billed
    assert (billed.calls, billed.replayed_calls, billed.unpriced_calls) == (1, 3, 0)
    assert billed.cost_micros == one  # only the live call was paid
    assert billed.replayed_cost_micros == sum(call.cost_micros for call in run.calls if call.replayed) > 0
    assert billed.full_cost_micros == billed.cost_micros + billed.replayed_cost_micros
    assert run.full_cost_micros == billed.full_cost_micros  # what an eval's sample reads, without a Billed
    assert billed.input_tokens == calls[False].input_tokens  # replayed usage is not billed usage
    assert "1 live call" in str(billed) and "3 replayed calls: would cost" in str(billed)

    row = store.one("SELECT * FROM runs WHERE run_id = ?", [run.run_id])
    assert (row["billed_calls"], row["billed_replayed_calls"], row["billed_cost_micros"],
            row["billed_replayed_cost_micros"]) == (1, 3, one, billed.replayed_cost_micros)
