"""Failures: what the runs that failed cost. A failed run's bill covers every call that answered
inside it (nested runs included): usage, cost, calls, and the calls that never reported usage."""

from __future__ import annotations

import polars as pl
import streamlit as st

import _common as ui

filters = ui.page_header(
    "Failures",
    "Failed runs and their bills. Totals count top-level runs only, so a call inside a failed nested run is "
    "never counted twice.",
)
cols = ui.Tiles(5)  # drawn before the read: see Tiles
# the headline read alone: its figures paint while the tables below are read. A row per currency:
# the counts are summed, the money is shown per currency (never added across)
by_currency = ui.load("failure_totals", filters)
totals = by_currency.drop("currency").sum().row(0, named=True)
currency = by_currency["currency"][0] or "USD"  # the main one: the chart's


def billed(column: str, priced: str, unpriced: str) -> str:
    """The failed runs' money per currency its calls were priced in, naming the unpriced calls beside it
    (nothing priced nor unpriced: 0 in the main currency)."""
    costs = {row["currency"] or "USD": row[column] for row in by_currency.filter(pl.col(priced) > 0).iter_rows(named=True)}
    return ui.format_costs(costs or ({} if totals[unpriced] else {currency: 0}), totals[unpriced])


spent = by_currency.filter(pl.col("total_cost_micros") > 0)
cols[0].metric("Failed runs", f"{totals['failed_runs']:,}", help=f"of {totals['runs']:,} top-level runs")
cols[1].metric("Billed to failed runs", billed("cost_micros", "priced_calls", "unpriced_calls"),
               help="what their live calls cost, exact; each run's own bill rounds up to the cent once (see the "
               "Run explorer)")
cols[2].metric("Share of spend", " · ".join(
                   ui.share(row["cost_micros"], row["total_cost_micros"]) + (f" of {row['currency']}" if spent.height > 1 else "")
                   for row in spent.iter_rows(named=True)) or "–",
               help=f"of {ui.money_by_currency(spent, 'total_cost_micros')}: every top-level run's bill plus calls "
               "outside runs")
cols[3].metric("Calls answered", f"{totals['calls']:,}")
cols[4].metric("Unsettled calls", f"{totals['unsettled']:,}", help="started, never reported usage: counted, not estimated")
st.caption(
    f"Usage billed to failed runs: {totals['input_tokens']:,} input, {totals['cache_read_tokens']:,} cache read, "
    f"{totals['cache_write_tokens']:,} cache write, {totals['output_tokens']:,} output tokens."
    + (f" Replayed inside them, never paid: {totals['replayed_calls']:,} calls that would cost "
       f"{billed('replayed_cost_micros', 'replayed_priced_calls', 'replayed_unpriced_calls')}."
       if totals["replayed_calls"] else "")
)
data = ui.load("failures_tables", filters)
ui.filter_sidebar(filters)

left, right = st.columns(2)
with left:
    st.subheader("By error code")
    by_error = data["by_error"]
    ui.bar_chart(by_error.filter(pl.col("currency") == currency).fill_null("(none)"), "error_code", "cost_micros", None,
                 "Billed cost by error code", x_type="N", currency=currency)
    if by_error["currency"].n_unique() > 1:
        st.caption(f"The chart shows {currency} only; the other currencies are in the table.")
    ui.table(data["by_error"], "failures_by_error_code")
with right:
    st.subheader("By prompt")
    ui.table(data["by_prompt"], "failures_by_prompt")

st.subheader("Failed runs")
runs = data["runs"]
ui.table(ui.with_explorer_links(runs), "failed_runs", column_config={"run": ui.explorer_link_column()},
         leading=("name", "error_code"))
if not runs.is_empty():
    labels = {row["run_id"]: f"{row['name']} · {row['error_code'] or row['error_type'] or 'failed'} · {row['run_id'][-12:]}"
              for row in runs.iter_rows(named=True)}
    picked = st.selectbox("Open a failed run", list(labels), format_func=labels.get)
    st.page_link("run_explorer.py", label="Open in the Run explorer", icon=":material/open_in_new:",
                 query_params={**ui.params_of(filters), "run_id": picked})
