"""`workbench models`: what a model will be priced at, and from where (the project's row, else the
price library shipped with Workbench, else unpriced)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from workbench.cli.core import FormatOption, _emit, app, console
from workbench.money import shifted

_PRICES = ("input", "output", "cache_read", "cache_write_5m", "cache_write_1h")


def _per_million(minor: int | None, scale: int, currency: str) -> str | None:
    return None if minor is None else f"{shifted(minor, scale):f} {currency}"


def _row(name: str, sheet) -> dict:
    if sheet is None:
        return {"model": name, "priced_by": "unpriced", **{f"{price}_per_m": None for price in _PRICES},
                "above_input_tokens": None, "source": None}
    return {
        "model": name, "priced_by": sheet.price_source,
        **{f"{price}_per_m": _per_million(getattr(sheet, price), sheet.scale, sheet.currency)
           for price in _PRICES},
        "above_input_tokens": ", ".join(str(tier.above_input_tokens) for tier in sheet.long_context) or None,
        "source": sheet.source,
    }


@app.command("models")
def models(
    names: Annotated[list[str] | None, typer.Argument(help="model names as a call would send or serve them")] = None,
    provider: Annotated[str | None, typer.Option(help="the provider that serves them (openai, anthropic, ...)")] = None,
    models_file: Annotated[Path | None, typer.Option("--models", help="models.toml (default: the models setting)")] = None,
    fmt: FormatOption = "table",
) -> None:
    """What each model is priced at per million tokens, and by which row: the project's models.toml or
    register_model first, then the price library (genai-prices, offline, today's price), else unpriced.
    With no name: the project's rows."""
    from workbench.models import load_registry
    from workbench.prices import library_version
    from workbench.wire import Call

    registry = load_registry(models_file)
    if names:  # without --provider, the library finds the provider by the model's name
        rows = [_row(name, registry.sheet_for(Call(model_requested=name, provider=provider, url=""))) for name in names]
    else:
        rows = [_row(spec.id, spec) for spec in registry.rows()]
    import polars as pl

    _emit(pl.DataFrame(rows, schema={name: pl.Utf8 for name in _row("", None)}), fmt, "model prices (per million tokens)")
    if fmt == "table":
        version = library_version()
        console.print(f"Models no project row covers are priced by genai-prices {version} (offline)."
                      if version else "The price library is not installed: models no project row covers are unpriced.")
