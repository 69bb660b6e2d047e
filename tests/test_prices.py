"""Prices out of the box: every price the `genai-prices` library holds becomes an exact integer price
sheet that charges what the library charges, to the micro-cent; the project's rows win over it; a
newcomer's first call is priced with no price file at all."""

from __future__ import annotations

from datetime import datetime, timezone
from decimal import ROUND_CEILING, Decimal
from pathlib import Path

import genai_prices
import openai
import pytest
from genai_prices import types as library

import workbench
from workbench import prices
from workbench.demo.fake_provider import Reply
from workbench.models import ModelRegistry, ModelSpec, Usage, price_with, read_models_toml
from workbench.wire import Call, priced

VERSION = genai_prices.__version__
MICROS_PER_USD = 10**8


def _usages(sheet) -> list[Usage]:
    """Usages that touch every counter, below and above each tier threshold of the sheet."""
    small = [Usage(input_tokens=1_234, output_tokens=567),
             Usage(input_tokens=300, cache_write_tokens=500, cache_read_tokens=200, output_tokens=100),
             Usage(input_tokens=17, cache_read_tokens=9_999, cache_write_tokens=1_001, cache_write_1h_tokens=400,
                   output_tokens=3, reasoning_tokens=2),
             Usage(cache_read_tokens=1)]
    above = [Usage(input_tokens=tier.above_input_tokens - 40, cache_read_tokens=29, cache_write_tokens=12,
                   cache_write_1h_tokens=5, output_tokens=777) for tier in sheet.long_context]
    at = [Usage(input_tokens=tier.above_input_tokens, output_tokens=1) for tier in sheet.long_context]
    return small + above + at


def _library_micros(model_price, usage: Usage) -> Decimal:
    """What the library charges, in micro-cents: its input INCLUDES cache reads and writes."""
    theirs = library.Usage(input_tokens=usage.total_input, cache_read_tokens=usage.cache_read_tokens,
                           cache_write_tokens=usage.cache_write_tokens,
                           cache_write_1h_tokens=usage.cache_write_1h_tokens, output_tokens=usage.output_tokens)
    return model_price.calc_price(theirs)["total_price"] * MICROS_PER_USD


def test_every_library_price_converts_exactly_and_charges_what_the_library_charges():
    checked, skipped = 0, 0
    for provider_id, info, model_price, start in prices.library_prices():
        sheet = prices.sheet_of(provider_id, info, model_price, start)
        if sheet is None:
            skipped += 1
            continue
        # every integer is the library's Decimal, exactly (no float on the way)
        assert Decimal(sheet.input).scaleb(-sheet.scale) == _base(model_price.input_mtok), (provider_id, info.id)
        for usage in _usages(sheet):
            exact = _library_micros(model_price, usage)
            ours = price_with(sheet, usage).cost_micros
            # ours is the library's exact figure, rounded up to the micro-cent only when finer
            assert ours == exact.to_integral_value(rounding=ROUND_CEILING), (provider_id, info.id, usage, ours, exact)
        checked += 1
    assert checked > 2000 and skipped < checked / 5


def _base(value) -> Decimal:
    return value.base if isinstance(value, library.TieredPrices) else value


def test_a_price_the_counters_cannot_express_stays_unpriced():
    per_request = library.ModelPrice(input_mtok=Decimal("1"), output_mtok=Decimal("2"), requests_kcount=Decimal("5"))
    info = library.ModelInfo(id="x", match=library.ClauseEquals(equals="x"), prices=per_request)
    assert prices.sheet_of("p", info, per_request, None) is None
    no_input = library.ModelPrice(output_mtok=Decimal("2"))
    assert prices.sheet_of("p", info, no_input, None) is None


def test_the_library_prices_cache_reads_writes_and_tiers_as_published():
    sheet = prices.library_sheet("claude-sonnet-4-5-20250929", "anthropic")
    assert sheet.price_source == f"genai-prices {VERSION}:anthropic/claude-sonnet-4-5"
    # the measured fact of DESIGN.md: $0.004335 = 300 x $3 + 500 x $3.75 + 200 x $0.30 + 100 x $15 per million
    usage = Usage(input_tokens=300, cache_write_tokens=500, cache_read_tokens=200, output_tokens=100)
    assert price_with(sheet, usage).cost_micros == 433_500
    # above 200,000 input tokens (cache included) the whole call is at the higher tier
    assert [tier.above_input_tokens for tier in sheet.long_context] == [200_000]
    over = Usage(input_tokens=150_000, cache_read_tokens=50_001, output_tokens=10)
    assert price_with(sheet, over).cost_micros == 150_000 * 600 + 50_001 * 60 + 10 * 2250


def test_the_price_in_force_on_the_calls_date():
    dated = [(p, info, mp, start) for p, info, mp, start in prices.library_prices() if start is not None]
    provider_id, info, model_price, start = dated[0]
    name = info.id
    before = datetime.combine(start, datetime.min.time(), timezone.utc).replace(year=start.year - 1)
    after = datetime.combine(start, datetime.min.time(), timezone.utc)
    assert info.get_prices(after) is model_price
    sheet_after = prices.library_sheet(name, provider_id, at=after)
    sheet_before = prices.library_sheet(name, provider_id, at=before)
    assert sheet_after.as_of == start and sheet_after.price_source.endswith(f"@{start.isoformat()}")
    assert sheet_before.price_source != sheet_after.price_source


def test_a_project_row_wins_over_the_library():
    registry = ModelRegistry()
    call = Call(model_served="gpt-4o-mini-2024-07-18", model_requested="gpt-4o-mini", provider="openai",
                settled=True, usage=Usage(input_tokens=1_000_000))
    assert priced(call, registry).price_source == f"genai-prices {VERSION}:openai/gpt-4o-mini"
    assert call.cost_micros == 15_000_000  # $0.15 per million
    registry.register(ModelSpec(id="gpt-4o-mini", provider="openai", input=10, output=40, context_window=1,
                                max_output=1, source="our contract", as_of="2026-01-01"))
    assert priced(call, registry).price_source == "gpt-4o-mini@2026-01-01" and call.cost_micros == 10_000_000
    unknown = Call(model_requested="in-house-70b", provider="openai", settled=True, usage=Usage(input_tokens=5))
    assert priced(unknown, registry).cost_micros is None and unknown.price_source is None
    assert priced(Call(model_requested="gpt-4o-mini", provider="openai", settled=True,
                       usage=Usage(input_tokens=5)), ModelRegistry(library=False)).cost_micros is None


def test_a_newcomers_first_call_is_priced_without_a_price_file(tmp_path, monkeypatch, fake_provider, fake_url):
    monkeypatch.chdir(tmp_path)  # no models.toml here
    monkeypatch.setattr(workbench.models.registry, "_rows", [])  # no project row at all
    workbench.configure(db=tmp_path / "wb.duckdb")
    fake_provider.script(Reply(text="hi", usage={"input_tokens": 1000, "cache_read_tokens": 0,
                                                 "cache_write_tokens": 0, "output_tokens": 50}))
    client = openai.OpenAI(base_url=fake_url + "/v1", api_key="sk-test", max_retries=0,
                           http_client=workbench.http_client())
    with workbench.run("first") as run:
        client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "Hello"}])
    billed = run.billed
    assert (billed.calls, billed.unpriced_calls) == (1, 0)
    assert billed.cost_micros == 1000 * 15 + 50 * 60  # $0.15 and $0.60 per million, in micro-cents
    assert run.calls[0].price_source == f"genai-prices {VERSION}:openai/gpt-4o-mini"


@pytest.mark.parametrize("name", ["gpt-4o-mini", "claude-haiku-4-5", "gpt-4o"])
def test_common_models_are_in_the_library(name):
    provider = "anthropic" if name.startswith("claude") else "openai"
    assert prices.library_sheet(name, provider) is not None


@pytest.mark.parametrize("name", ["gemini-2.5-pro", "gemini-2.5-flash", "gemini-2.0-flash"])
def test_the_shipped_gemini_rows_charge_what_the_library_charges(name):
    """models.toml's Gemini rows (read from Google's pricing page) and the library's agree to the
    micro-cent, cached input and the 2.5 Pro tier above 200k tokens included (Gemini reports no
    cache writes, so none are priced here)."""
    row = next(row for row in read_models_toml(Path(__file__).parents[1] / "models.toml") if row.id == name)
    sheet = prices.library_sheet(name, "google")
    assert sheet is not None and row.provider == sheet.provider == "google"
    usages = _usages(sheet) + _usages(row) + [Usage(input_tokens=150_000, cache_read_tokens=60_000, output_tokens=9)]
    for usage in (usage.model_copy(update={"cache_write_tokens": 0, "cache_write_1h_tokens": 0}) for usage in usages):
        assert price_with(row, usage).cost_micros == price_with(sheet, usage).cost_micros, usage


LOOKUPS_CHILD = r"""
import json, sys
from datetime import datetime, timezone
from pathlib import Path
from workbench import prices
prices.use_lookups(Path(sys.argv[1]))
prices.warm_up()
at = datetime.fromisoformat(sys.argv[2])
sheets = {name: prices.library_sheet(name, provider, at=at) for name, provider in json.loads(sys.argv[3])}
print(json.dumps({"imported": "genai_prices" in sys.modules,
                  "sheets": {name: sheet and sheet.model_dump(mode="json") for name, sheet in sheets.items()}}))
"""


def _look_up(folder: Path, at: str, models: list) -> dict:
    import json
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-c", LOOKUPS_CHILD, str(folder), at, json.dumps(models)],
                            capture_output=True, text=True, check=True)
    return json.loads(result.stdout)


def test_a_later_process_prices_the_models_looked_up_before_without_importing_the_library(tmp_path):
    dated = next((info.id, provider_id, start) for provider_id, info, _, start in prices.library_prices()
                 if start is not None and isinstance(info.prices, list)
                 and all(type(c.constraint).__name__ in ("NoneType", "StartDateConstraint") for c in info.prices))
    name, provider, start = dated
    models = [["gpt-4o-mini", "openai"], [name, provider], ["in-house-70b", "openai"]]
    first = _look_up(tmp_path, "2026-01-01T00:00:00+00:00", models)
    assert first["imported"]
    (kept,) = tmp_path.glob("prices-*.json")
    assert kept.stat().st_mode & 0o077 == 0  # private by default
    # the same answers from the file, the library never imported: now, and on either side of a price's start day
    for at in ("2026-01-01T00:00:00+00:00", f"{start.isoformat()}T00:00:00+00:00",
               f"{start.isoformat()}T00:00:00+05:00", f"{start.replace(year=start.year - 1).isoformat()}T12:00:00"):
        later = _look_up(tmp_path, at, models)
        assert not later["imported"]
        direct = {model: prices.library_sheet(model, provider_, at=datetime.fromisoformat(at))
                  for model, provider_ in models}
        assert later["sheets"] == {model: sheet and sheet.model_dump(mode="json") for model, sheet in direct.items()}
    assert later["sheets"]["in-house-70b"] is None
    # a model not looked up before still gets its price, from the library
    assert _look_up(tmp_path, "2026-01-01T00:00:00+00:00", [["gpt-4o", "openai"]])["imported"]


def test_a_damaged_lookups_file_is_ignored_and_the_library_answers(tmp_path):
    _look_up(tmp_path, "2026-01-01T00:00:00+00:00", [["gpt-4o-mini", "openai"]])
    (kept,) = tmp_path.glob("prices-*.json")
    kept.write_text('[["openai", null, "gpt-4o-mini", [[null, {"id": 7}]]]')
    again = _look_up(tmp_path, "2026-01-01T00:00:00+00:00", [["gpt-4o-mini", "openai"]])
    assert again["imported"]
    assert again["sheets"]["gpt-4o-mini"]["source"].startswith(f"genai-prices {VERSION}: openai/gpt-4o-mini")


AT_INGESTION_CHILD = r"""
import json, sys
from pathlib import Path
import openai, workbench
from workbench import prices
from workbench.capture.recorder import recorder
from workbench.demo.fake_provider import FakeProvider
from workbench.demo.fake_server import serve

folder = Path(sys.argv[1])
prices.at_ingestion(sys.argv[2] in ("at-ingestion", "exported"))
workbench.configure(db=folder / "wb.duckdb")
exported = None
if sys.argv[2] == "exported":  # the application's own processor on Workbench's provider sees every span
    from opentelemetry import trace
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from workbench.capture.tracing import tracer

    tracer()
    exported = InMemorySpanExporter()
    trace.get_tracer_provider().add_span_processor(SimpleSpanProcessor(exported))
with serve(FakeProvider()) as url:
    client = openai.OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0, http_client=workbench.http_client())
    for model in ("gpt-4o-mini", "gpt-4o", "in-house-70b"):
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hello"}])
    recorder().spool.flush(ingest=False)
    spooled = [line for path in sorted(recorder().spool.spool_dir.glob("*.jsonl")) for line in path.read_text().splitlines()]
    loaded = "genai_prices" in sys.modules
    if sys.argv[3] == "ingest":
        workbench.flush()
costs = exported and sorted((span.attributes.get("gen_ai.request.model"), span.attributes.get("workbench.cost_micros"))
                           for span in exported.get_finished_spans())
print(json.dumps({"loaded": loaded, "spooled": spooled, "exported": costs}))
"""


def _session(folder: Path, mode: str, ingest: bool = True) -> dict:
    import json
    import subprocess
    import sys

    folder.mkdir(exist_ok=True)
    result = subprocess.run([sys.executable, "-c", AT_INGESTION_CHILD, str(folder), mode, "ingest" if ingest else "no"],
                            capture_output=True, text=True, cwd=folder)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _stored(db: Path) -> dict:
    import json

    import duckdb

    with duckdb.connect(str(db), read_only=True) as con:
        calls = con.execute("SELECT model_requested, cost_micros, currency, price_source FROM calls "
                            "ORDER BY model_requested").fetchall()
        spans = sorted(([{key: value for key, value in json.loads(text).items()
                         if key not in ("workbench.call_id", "gen_ai.response.id")}, list(json.loads(text))]
                       for (text,) in con.execute("SELECT attributes FROM spans").fetchall()), key=json.dumps)
        models = con.execute("SELECT * FROM models ORDER BY price_source").fetchall()
    return {"calls": calls, "spans": spans, "models": models}


def test_a_pytest_sessions_calls_are_priced_at_ingestion_as_the_recorder_prices_them(tmp_path):
    """A session that leaves the price library to the ingester (`at_ingestion`) never loads it; its
    ingester stores every figure the recorder would have: each call's cost, its model row, its span's
    cost attribute in its place; its answers are kept, so the next session prices in the recorder."""
    import json

    from workbench.prices import AT_INGESTION

    recorder_priced = _session(tmp_path / "recorder", "in-process")
    assert recorder_priced["loaded"]
    deferred = _session(tmp_path / "ingester", "at-ingestion")
    assert not deferred["loaded"]
    marked = [line for line in deferred["spooled"] if AT_INGESTION in line]
    # each call and its span; the library alone knows in-house-70b is not in it: asked by the ingester too
    assert sorted(json.loads(line)["kind"] for line in marked) == ["call"] * 3 + ["span"] * 3
    marked = [line for line in marked if json.loads(line)["kind"] == "call"]
    stored = _stored(tmp_path / "ingester" / "wb.duckdb")
    assert stored == _stored(tmp_path / "recorder" / "wb.duckdb")
    assert [cost is not None for _, cost, _, _ in stored["calls"]] == [True, True, False]
    # each priced span's cost with its currency beside it, as the recorder writes them
    assert sorted(attributes.get("workbench.currency") for attributes, _ in stored["spans"]
                  if "workbench.cost_micros" in attributes) == ["USD", "USD"]
    assert len(stored["models"]) == 2
    # the ingester kept its answers where the next session's recorder reads them (`use_lookups`)
    (kept,) = (tmp_path / "ingester" / "wb.duckdb.workbench").glob("prices-*.json")
    asked = {(row["provider"], row["url"], row["model_served"])
             for row in (json.loads(line)["row"] for line in marked)}
    assert {tuple(entry[:3]) for entry in json.loads(kept.read_text())} == asked


def test_a_span_ingested_after_its_call_gets_the_cost_the_ingester_gave_the_call(tmp_path):
    """The span's record follows its call's in the spool and may come in a later batch."""
    import json

    from workbench.prices import AT_INGESTION
    from workbench.store.ingest import ingest_spools

    deferred = _session(tmp_path / "session", "at-ingestion", ingest=False)
    assert any(AT_INGESTION in line for line in deferred["spooled"])
    recorder_priced = _session(tmp_path / "recorder", "in-process")
    spool = tmp_path / "apart" / "spool"
    spool.mkdir(parents=True)
    calls = [line for line in deferred["spooled"] if json.loads(line)["kind"] != "span"]
    spans = [line for line in deferred["spooled"] if json.loads(line)["kind"] == "span"]
    for name, lines in (("calls-999999-0000000a.jsonl", calls), ("spans-999999-0000000b.jsonl", spans)):
        (spool / name).write_text("\n".join(lines) + "\n")
        ingest_spools(tmp_path / "apart" / "wb.duckdb", spool)
    assert _stored(tmp_path / "apart" / "wb.duckdb") == _stored(tmp_path / "recorder" / "wb.duckdb")


def test_a_session_whose_spans_are_exported_elsewhere_prices_them_before_they_leave(tmp_path):
    """An exporter would send a span before the ingester completes it: such a session prices in its
    own process, the library loaded, as every process did before."""
    from workbench.prices import AT_INGESTION

    exported = _session(tmp_path / "exported", "exported", ingest=False)
    assert exported["loaded"]
    assert not [line for line in exported["spooled"] if AT_INGESTION in line]
    assert [model for model, cost in exported["exported"] if isinstance(cost, int)] == ["gpt-4o", "gpt-4o-mini"]
