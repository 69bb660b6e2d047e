"""Integer money. No float ever touches a price or a cost.

A price is an integer `minor` with a `scale`: the number of decimal places of the major unit the
integer is written in (the reference runtimes' `{minor: 75, scale: 3}` is $0.075). The default scale
is the currency's own minor unit (2 for USD: cents; 0 for JPY). A price per million tokens prices
`tokens` at `tokens * minor * 10**(digits - scale)` micro-minor units (millionths of a cent): exact
when the scale is at most 6 places below the minor unit, else rounded up to the micro-minor unit once
per call (an error under $1e-8 a call).

Analysis adds those integers and shows the sum exactly (`format_amount`: sub-cent where it is
sub-cent, to `SIGNIFICANT_DIGITS` significant digits, the currency named). Rounding up belongs to a
bill: `minor_units` rounds an exact total up to the minor unit once, and `format_bill` shows it.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Context, Decimal

MICROS_PER_MINOR = 1_000_000
MICRO_DIGITS = 6  # a micro-minor unit is 10**-6 of the minor unit
SIGNIFICANT_DIGITS = 4  # what an analysis figure shows below the minor unit
# the context amounts are shifted and rounded in: the default one keeps 28 digits, which rounded a
# price or a total of more (a models.toml price of 29 digits) and refused to round one at all
_EXACT = Context(prec=1000)
# decimal places of the minor unit; every currency not listed has 2
_MINOR_DIGITS = {"JPY": 0, "KRW": 0}


def ceil_div(numerator: int, denominator: int) -> int:
    return -(-numerator // denominator)


def minor_digits(currency: str | None) -> int:
    """Decimal places of the currency's minor unit (2 for USD, 0 for JPY)."""
    return _MINOR_DIGITS.get(currency or "USD", 2)


def price_micros(tokens: int, minor: int, scale: int, currency: str | None = "USD") -> int:
    """`tokens` at `minor` (at `scale`) per million tokens, in micro-minor units, rounded up."""
    shift = minor_digits(currency) - scale
    if shift >= 0:
        return tokens * minor * 10**shift
    return ceil_div(tokens * minor, 10**-shift)


def decimal_price(value: Decimal, currency: str | None = "USD") -> tuple[int, int]:
    """A decimal amount of the major unit as an exact `(minor, scale)` pair, the scale never below
    the currency's: `Decimal("0.075")` is `(75, 3)`, `Decimal("3")` is `(300, 2)`. Never a float."""
    if not value.is_finite():
        raise ValueError(f"not a finite amount: {value}")
    sign, digits, exponent = value.normalize().as_tuple()
    scale = max(minor_digits(currency), -exponent)
    minor = int("".join(map(str, digits)) or "0") * 10 ** (exponent + scale)
    return (-minor if sign else minor), scale


def micros_of_decimal(value: Decimal, currency: str | None = "USD") -> int:
    """An amount of the major unit (`Decimal("50")`) in micro-minor units, exactly; an amount finer
    than a micro-minor unit is refused."""
    minor, scale = decimal_price(value, currency)
    shift = minor_digits(currency) + MICRO_DIGITS - scale
    if shift < 0:
        raise ValueError(f"{value} is finer than a millionth of the minor unit")
    return minor * 10**shift


def shifted(number: int, places: int) -> Decimal:
    """`number` x 10**-places, exactly (`shifted(150, 2)` is `Decimal("1.50")`), whatever its digits."""
    return Decimal(number).scaleb(-places, _EXACT)


def _major(micros: int, currency: str) -> Decimal:
    return shifted(micros, minor_digits(currency) + MICRO_DIGITS)


@dataclass(frozen=True, order=True)
class Money:
    """An exact amount in micro-minor units of one currency."""

    micros: int
    currency: str = "USD"

    def __add__(self, other: Money) -> Money:
        if other.currency != self.currency:
            raise ValueError(f"cannot add {other.currency} to {self.currency}")
        return Money(self.micros + other.micros, self.currency)

    @property
    def minor(self) -> int:
        """The amount in minor units, rounded up once (a bill)."""
        return minor_units(self.micros)

    def format(self) -> str:
        return format_amount(self.micros, self.currency)


def minor_units(micros: int) -> int:
    """Round an exact total up to the minor unit: the one rounding a bill ever gets."""
    return ceil_div(micros, MICROS_PER_MINOR)


def _text(amount: Decimal, places: int, currency: str) -> str:
    """`amount` to `places` decimals, trailing zeros past the minor unit dropped (0.0500 → 0.05)."""
    number = f"{amount:,.{places}f}"
    digits = minor_digits(currency)
    if places > digits:
        whole, _, fraction = number.partition(".")
        fraction = fraction.rstrip("0").ljust(digits, "0")
        number = f"{whole}.{fraction}" if fraction else whole
    return f"{number} {currency}"


def format_amount(micros: int | None, currency: str | None = "USD") -> str:
    """An exact amount for analysis: `24600` micro-cents → `0.000246 USD`, `1234567891` →
    `12.35 USD` (at least the minor unit's places, `SIGNIFICANT_DIGITS` significant digits, never
    below the micro-minor unit; trailing zeros past the minor unit dropped). None is unpriced."""
    if micros is None:
        return "unpriced"
    currency = currency or "USD"
    digits = minor_digits(currency)
    amount = _major(micros, currency)
    if amount == 0:
        return _text(Decimal(0), digits, currency)
    exponent = amount.adjusted()  # the place of the first significant digit
    places = min(max(digits, SIGNIFICANT_DIGITS - 1 - exponent), digits + MICRO_DIGITS)
    return _text(amount.quantize(shifted(1, places), rounding=ROUND_HALF_UP, context=_EXACT), places, currency)


def format_bill(micros: int | None, currency: str | None = "USD") -> str:
    """A bill: the exact total rounded up to the minor unit once (`1` micro-cent → `0.01 USD`)."""
    if micros is None:
        return "unpriced"
    currency = currency or "USD"
    digits = minor_digits(currency)
    return _text(shifted(minor_units(micros), digits), digits, currency)


def format_exact(micros: int | None, currency: str | None = "USD") -> str:
    """Every digit, to the micro-minor unit: `24600` micro-cents → `0.000246 USD`. None is unpriced."""
    if micros is None:
        return "unpriced"
    currency = currency or "USD"
    return _text(_major(micros, currency), minor_digits(currency) + MICRO_DIGITS, currency)


def format_costs(costs: dict[str, int], unpriced: int = 0, exact: bool = False, bill: bool = False) -> str:
    """Money of several currencies (`{currency: micros}`) with the calls nothing priced named:
    `0.0016 EUR + 0.0013 USD + 12 unpriced`, each currency apart (a sum never adds two); nothing
    priced, `unpriced (12 calls)`, never 0 for it; nothing at all, `0.00 USD`. Each amount as
    analysis shows it (`format_amount`); `exact`: every digit (`format_exact`); `bill`: rounded up
    once, in its own currency (`format_bill`)."""
    if unpriced and not costs:
        return f"unpriced ({unpriced:,} calls)"
    each = format_exact if exact else format_bill if bill else format_amount
    text = " + ".join(each(micros or 0, currency) for currency, micros in costs.items()) or format_amount(0)
    return f"{text} + {unpriced:,} unpriced" if unpriced else text
