from __future__ import annotations

from datetime import date

import pytest

from workbench.errors import WorkbenchError
from workbench.models import ModelRegistry, ModelSpec, Usage, price_with, read_models_toml
from workbench.money import Money, format_exact, format_micros, minor_units


def spec(**prices) -> ModelSpec:
    base = dict(id="m", provider="p", context_window=1000, max_output=100, source="test", as_of=date(2026, 1, 1))
    return ModelSpec(**{**base, "input": 300, "output": 1500, **prices})


def test_many_small_calls_round_once_when_read():
    # 1 input token at $3/M is 300 micro-cents; a thousand of them are 0.3 cents -> 1 cent, once.
    row = spec()
    total = sum(price_with(row, Usage(input_tokens=1)).cost_micros for _ in range(1000))
    assert total == 300_000
    assert minor_units(total) == 1
    # rounding each call up to a cent would have billed 1000 cents
    assert sum(minor_units(price_with(row, Usage(input_tokens=1)).cost_micros) for _ in range(1000)) == 1000


def test_scaled_sub_cent_price_is_exact():
    row = spec(input=150, output=600, scale=1)  # $0.15 and $0.60 per million
    assert price_with(row, Usage(input_tokens=1_000_000, output_tokens=10)).cost_micros == 15_000_000 + 600
    # one cache read at the default 0.1 x 15 micro-cents is 1.5: rounded up to 2, never down
    assert price_with(row, Usage(cache_read_tokens=1)).cost_micros == 2


def test_cache_prices_default_to_a_tenth_and_one_and_a_quarter_of_input():
    row = spec(input=300)
    assert price_with(row, Usage(cache_read_tokens=1_000_000)).cost_micros == 30 * 1_000_000
    assert price_with(row, Usage(cache_write_tokens=1_000_000)).cost_micros == 375 * 1_000_000


def test_explicit_cache_prices_and_the_one_hour_write():
    row = spec(cache_read=30, cache_write_5m=375, cache_write_1h=600)
    usage = Usage(cache_write_tokens=300, cache_write_1h_tokens=100, cache_read_tokens=10)
    assert price_with(row, usage).cost_micros == 200 * 375 + 100 * 600 + 10 * 30


def test_long_context_tier_prices_the_whole_call():
    row = spec(long_context={"above_input_tokens": 200_000, "input": 600, "output": 2250})
    assert price_with(row, Usage(input_tokens=200_000)).cost_micros == 200_000 * 300
    assert price_with(row, Usage(input_tokens=200_001, output_tokens=1)).cost_micros == 200_001 * 600 + 2250


def test_unknown_model_is_unpriced_not_zero():
    registry = ModelRegistry()
    registry.register(spec())
    assert registry.price("other-model", Usage(input_tokens=5)) is None
    with pytest.raises(WorkbenchError) as caught:
        registry.get("other-model")
    assert caught.value.code == "WB_MODEL_UNKNOWN" and "other-model" in caught.value.cause


def test_patterns_match_dated_names_and_the_price_names_its_source():
    registry = ModelRegistry()
    registry.register(spec(id="gpt-x", patterns=["gpt-x-20*"]))
    priced = registry.price("gpt-x-2025-01-01", Usage(output_tokens=2))
    assert priced.cost_micros == 3000 and priced.price_source == "gpt-x@2026-01-01"


def test_money_formats_rounded_up_and_never_as_float():
    assert format_micros(1) == "$0.01"
    assert format_micros(123_456_789_000) == "$1,234.57"
    assert format_micros(None) == "unpriced"
    assert format_exact(24_600) == "$0.000246" and format_exact(150_000_000) == "$1.50"
    assert (Money(5) + Money(7)).micros == 12
    with pytest.raises(ValueError):
        Money(1, "USD") + Money(1, "EUR")


def test_shipped_models_toml_is_valid_and_sourced():
    rows = read_models_toml("models.toml")
    assert {row.id for row in rows} >= {"gpt-4o-mini", "claude-sonnet-4-5"}
    assert all(row.source.startswith("https://") and row.as_of.year >= 2025 for row in rows)


def test_malformed_models_toml_names_the_row_and_field(tmp_path):
    path = tmp_path / "models.toml"
    path.write_text('[[model]]\nid = "x"\nprovider = "p"\ncontext_window = 1\nmax_output = 1\ninput = -1\noutput = 1\nsource = "s"\nas_of = 2025-01-01\n')
    with pytest.raises(WorkbenchError) as caught:
        read_models_toml(path)
    assert caught.value.code == "WB_MODELS_INVALID" and "input" in caught.value.cause
