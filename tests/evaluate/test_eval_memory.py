"""What a gated eval of the runtime's own path holds per case (prompt -> runtime -> replayed provider
call -> scorers -> the gate): the fake provider's classifier suite, recorded over HTTP on
127.0.0.1, then gated from its cassette. The outcome is held as the CLI holds it until the reports
are written; what it keeps of a case must not be the case's scores and explanations again and again
(the same few outcomes repeat across a large suite), so the eval's memory stays a small record per
case from 200 to 2,000 cases."""

from __future__ import annotations

import gc
import tracemalloc

from workbench.demo.answers import respond
from workbench.demo.fake_provider import FakeProvider
from workbench.demo.fake_server import serve
from workbench.evaluate import define_eval, define_prompt, exact, json_valid
from workbench.evaluate.gate import evaluate

MODEL = "gpt-4o-mini"


def _suite(tmp_path, url: str, cases: int):
    from pydantic import BaseModel

    from workbench.runtime import OpenAIProvider

    class Ticket(BaseModel):
        category: str

    name = f"tickets{cases}"
    prompt = define_prompt(name, "v1", system="You classify support tickets into exactly one category: billing, account, bug or other.",
                           template="<ticket>{{ticket}}</ticket>", output=Ticket, model=MODEL)
    rows = [{"id": f"t{n}", "vars": {"ticket": f"I was charged twice for order {n}"},
             "expected": {"category": "billing"}} for n in range(cases)]
    return define_eval(name, prompt, rows, [exact("category"), json_valid()],
                       providers=lambda transport: [OpenAIProvider(url, "sk-test", [MODEL], transport=transport)],
                       baseline=tmp_path / f"{name}.baseline.json", cassette=tmp_path / f"{name}.json")


def _held_after_gate(tmp_path, url: str, cases: int) -> int:
    """Bytes Python holds once the suite is gated, its outcome still held and its rows spooled,
    over what it held before the gate ran."""
    from workbench.capture.recorder import recorder

    suite = _suite(tmp_path, url, cases)
    assert evaluate(suite, mode="record", record_baseline=True).recorded
    recorder().spool.flush(ingest=False)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        outcome = evaluate(suite, mode="replay")
        recorder().spool.flush(ingest=False)
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert outcome.status == "pass" and len(outcome.verdict.cases) == cases
    assert all(result.scores["exact[category]"].value == 1.0 for result in outcome.eval_run.results)
    return after - before


# what a gated case holds: its sample (numbers, the run's id, where its output is), the case's
# result, the gate's verdict on it and the baseline's entry (read by the gate). Measured on this
# suite: 1,507 bytes a case when each sample held its own scores dict, Score objects and their
# explanations; 1,115 with them shared
GATED_CASE = 1_300


def test_a_gated_case_of_the_runtime_path_holds_a_small_record_not_its_scores_again(tmp_path, store):
    with serve(FakeProvider(responder=respond)) as url:
        _held_after_gate(tmp_path, f"{url}/v1", 20)  # what a first run sets up once is not a case's
        small = _held_after_gate(tmp_path, f"{url}/v1", 200)
        large = _held_after_gate(tmp_path, f"{url}/v1", 2000)
    per_case = (large - small) / 1800
    assert per_case < GATED_CASE, per_case
