from __future__ import annotations

from datetime import date

import pytest

from workbench.errors import WorkbenchError
from workbench.models import ModelRegistry, ModelSpec, Usage, price_with, read_models_toml
from decimal import Decimal

from workbench.money import (
    Money, decimal_price, format_amount, format_bill, format_costs, format_exact, micros_of_decimal, minor_units, shifted,
)


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


def test_scale_is_decimal_places_of_the_major_unit_as_in_the_reference_runtimes():
    # the reference runtimes' `{minor: 75, scale: 3}` is $0.075 per million tokens
    row = spec(input=75, output=600, scale=3)
    assert price_with(row, Usage(input_tokens=1_000_000)).cost_micros == 7_500_000  # 7.5 cents
    assert price_with(row, Usage(output_tokens=1_000_000)).cost_micros == 60_000_000  # $0.60
    # no scale is the currency's minor unit: cents for USD, yen for JPY
    assert spec().scale == 2 and spec(currency="JPY").scale == 0
    assert price_with(spec(input=300), Usage(input_tokens=1_000_000)).cost_micros == 300 * 1_000_000
    assert price_with(spec(input=3, scale=0), Usage(input_tokens=1_000_000)).cost_micros == 300 * 1_000_000


def test_scaled_sub_cent_price_is_exact():
    row = spec(input=150, output=600, scale=3)  # $0.15 and $0.60 per million
    assert price_with(row, Usage(input_tokens=1_000_000, output_tokens=10)).cost_micros == 15_000_000 + 600
    # one cache read at the default 0.1 x 15 micro-cents is 1.5: rounded up to 2, never down
    assert price_with(row, Usage(cache_read_tokens=1)).cost_micros == 2
    # a price finer than a micro-cent per token rounds up once per call, not per counter
    fine = spec(input=833333333333333, output=0, scale=16)  # $0.0833333333333333 per million
    assert price_with(fine, Usage(input_tokens=1_000_000)).cost_micros == 8_333_334


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


def test_analysis_amounts_are_exact_and_sub_cent_where_sub_cent():
    assert format_amount(24_600) == "0.000246 USD"  # 0.0246 cents, not a 1-cent bill
    assert format_amount(225) == "0.00000225 USD"
    assert format_amount(3_450_000) == "0.0345 USD"  # four significant digits
    assert format_amount(1_234_567_891) == "12.35 USD"  # never fewer places than the cent
    assert format_amount(123_456_789_000) == "1,234.57 USD"
    assert format_amount(0) == "0.00 USD" and format_amount(-5_000_000) == "-0.05 USD"
    assert format_amount(24_600, "JPY") == "0.0246 JPY" and format_amount(5_000_000, "JPY") == "5 JPY"
    assert format_amount(None) == "unpriced"
    assert format_exact(1_234_567_891) == "12.34567891 USD" and format_exact(150_000_000) == "1.50 USD"


def test_a_bill_rounds_up_once_and_unpriced_is_never_zero():
    assert format_bill(1) == "0.01 USD" and format_bill(225) == "0.01 USD"
    assert format_bill(123_456_789_000) == "1,234.57 USD" and format_bill(0) == "0.00 USD"
    assert format_bill(None) == "unpriced"
    assert format_costs({"USD": 24_600}, unpriced=2) == "0.000246 USD + 2 unpriced"
    assert format_costs({}, unpriced=3) == "unpriced (3 calls)"


def test_money_of_several_currencies_is_shown_apart_one_way():
    """`format_costs`, the one function for money per currency: analysis, every digit, or a bill."""
    costs = {"EUR": 160_000_000, "USD": 123_456_700}
    assert format_costs(costs) == "1.60 EUR + 1.235 USD"
    assert format_costs(costs, exact=True) == "1.60 EUR + 1.234567 USD"
    assert format_costs(costs, bill=True) == "1.60 EUR + 1.24 USD"  # each rounded up once, in its own currency
    assert format_costs(costs, 2) == "1.60 EUR + 1.235 USD + 2 unpriced"
    assert format_costs({}) == format_costs({}, exact=True) == format_costs({}, bill=True) == "0.00 USD"
    assert format_costs({"JPY": 0}, bill=True) == "0 JPY"


def test_decimal_amounts_become_integers_exactly():
    assert decimal_price(Decimal("0.075")) == (75, 3) and decimal_price(Decimal("3")) == (300, 2)
    assert decimal_price(Decimal("1E+1")) == (1000, 2) and decimal_price(Decimal("0.0833333333333333")) == (833333333333333, 16)
    assert micros_of_decimal(Decimal("50")) == 5_000_000_000 and micros_of_decimal(Decimal("0.000001")) == 100
    with pytest.raises(ValueError):
        micros_of_decimal(Decimal("0.000000001"))


def test_money_adds_only_one_currency():
    assert (Money(5) + Money(7)).micros == 12 and Money(24_600).format() == "0.000246 USD" and Money(1).minor == 1
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


def test_amounts_past_28_digits_are_shown_exactly_never_refused():
    # Decimal's default context keeps 28 digits: a 29-digit models.toml price was shown rounded, and an
    # analysis figure that large could not be rounded to its places at all (InvalidOperation)
    huge = 12345678901234567890123456789012345  # micro-cents: 123,456,789,012,345,678,901,234,567.89012345 USD
    assert format_amount(huge, "USD") == "123,456,789,012,345,678,901,234,567.89 USD"
    assert format_bill(huge, "USD") == "123,456,789,012,345,678,901,234,567.90 USD"  # rounded up once, to the cent
    assert str(shifted(10**30 + 1, 3)) == "1000000000000000000000000000.001"
