"""Integer money. No float ever touches a price or a cost.

A price is integer minor units (cents for USD) per million tokens, divided by 10**scale for sub-cent
prices (`scale=1, 75` is 7.5 cents per million). The cost of `tokens` at a price is
`tokens * price` micro-minor units (millionths of a cent) — exact for scale 0; for scale > 0 each
call's cost is rounded up to the micro-minor unit, an error under 1e-8 dollars per call.
Totals add those integers and round UP to the minor unit once, when read.
"""

from __future__ import annotations

from dataclasses import dataclass

MICROS_PER_MINOR = 1_000_000
# minor units per major unit, for formatting; everything not listed has 100
_MINOR_DIGITS = {"JPY": 0, "KRW": 0}
_SYMBOLS = {"USD": "$", "EUR": "€", "GBP": "£"}


def ceil_div(numerator: int, denominator: int) -> int:
    return -(-numerator // denominator)


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
        """The amount in minor units, rounded up once."""
        return ceil_div(self.micros, MICROS_PER_MINOR)

    def format(self) -> str:
        return format_micros(self.micros, self.currency)


def minor_units(micros: int) -> int:
    """Round an exact total up to the minor unit: the one rounding a total ever gets."""
    return ceil_div(micros, MICROS_PER_MINOR)


def format_micros(micros: int | None, currency: str = "USD") -> str:
    """`1234567` micro-cents → `$0.02` (rounded up to the cent). None is unpriced."""
    if micros is None:
        return "unpriced"
    digits = _MINOR_DIGITS.get(currency, 2)
    minor = minor_units(micros)
    sign = "-" if minor < 0 else ""
    minor = abs(minor)
    major, rest = divmod(minor, 10**digits) if digits else (minor, 0)
    symbol = _SYMBOLS.get(currency)
    amount = f"{major:,}" + (f".{rest:0{digits}d}" if digits else "")
    return f"{sign}{symbol}{amount}" if symbol else f"{sign}{amount} {currency}"


def format_exact(micros: int | None, currency: str = "USD") -> str:
    """The exact amount, for one call: `24600` micro-cents → `$0.000246`. None is unpriced."""
    if micros is None:
        return "unpriced"
    digits = _MINOR_DIGITS.get(currency, 2) + 6
    sign = "-" if micros < 0 else ""
    major, rest = divmod(abs(micros), 10**digits)
    fraction = f"{rest:0{digits}d}".rstrip("0").ljust(2, "0")
    symbol = _SYMBOLS.get(currency)
    return f"{sign}{symbol}{major:,}.{fraction}" if symbol else f"{sign}{major:,}.{fraction} {currency}"
