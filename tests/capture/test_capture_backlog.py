"""A burst of calls (an eval replayed from a cassette answers hundreds a second) is not held in
memory until the spool's interval ends: past a few hundred calls waiting, the spool thread is woken
to record them, and every one still reaches the store."""

from __future__ import annotations

import json
import time

import httpx2

import workbench
from fixtures.capture_store import Store
from workbench.capture import recorder
from workbench.capture.transport import record_answered
from workbench.store.spool import WAKE_AFTER_DEFERRED


def _answer(n: int) -> tuple[httpx2.Request, httpx2.Response, bytes]:
    body = json.dumps({"id": f"chatcmpl-{n}", "object": "chat.completion", "model": "gpt-test",
                       "choices": [{"index": 0, "message": {"role": "assistant", "content": f"answer {n}"},
                                    "finish_reason": "stop"}],
                       "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}}).encode()
    request = httpx2.Request("POST", "http://127.0.0.1:9/v1/chat/completions",
                             content=json.dumps({"model": "gpt-test", "messages": [{"role": "user", "content": str(n)}]}))
    response = httpx2.Response(200, headers={"content-type": "application/json"}, content=body)
    return request, response, body


def test_a_burst_of_calls_wakes_the_spool_before_its_interval(tmp_path):
    workbench.configure(db=tmp_path / "wb.duckdb", flush_interval_s=60)  # the interval alone: a minute
    spool = recorder().spool
    assert spool.flush_interval_s == 60
    calls = WAKE_AFTER_DEFERRED * 3
    for n in range(calls):
        record_answered(*_answer(n))
    waited = time.monotonic()
    while len(spool._deferred) >= WAKE_AFTER_DEFERRED and time.monotonic() - waited < 30:
        time.sleep(0.05)
    assert len(spool._deferred) < WAKE_AFTER_DEFERRED  # woken: recorded long before the minute is up
    workbench.flush()
    assert Store(tmp_path / "wb.duckdb").rows("SELECT count(*) AS n FROM calls")[0]["n"] == calls  # nothing recorded is lost
