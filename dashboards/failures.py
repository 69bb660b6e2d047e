"""Failures: what the runs that failed cost. A failed run's bill covers every call that answered
inside it (nested runs included): usage, cost, calls, and the calls that never reported usage."""

from __future__ import annotations

import streamlit as st

import _common as ui

filters = ui.page_header(
    "Failures",
    "Failed runs and their bills. Totals count top-level runs only, so a call inside a failed nested run is "
    "never counted twice.",
)
cols = ui.Tiles(5)  # drawn before the read: see Tiles
# the headline read alone: its figures paint while the tables below are read
totals = ui.load("failure_totals", filters).row(0, named=True)

cols[0].metric("Failed runs", f"{totals['failed_runs']:,}", help=f"of {totals['runs']:,} top-level runs")
cols[1].metric("Billed to failed runs", ui.money(totals["cost_micros"], "USD", totals["unpriced_calls"]),
               help="what their live calls cost, exact; each run's own bill rounds up to the cent once (see the "
               "Run explorer)")
cols[2].metric("Share of spend", ui.share(totals["cost_micros"], totals["total_cost_micros"]),
               help=f"of {ui.money(totals['total_cost_micros'])}: every top-level run's bill plus calls outside runs")
cols[3].metric("Calls answered", f"{totals['calls']:,}")
cols[4].metric("Unsettled calls", f"{totals['unsettled']:,}", help="started, never reported usage: counted, not estimated")
st.caption(
    f"Usage billed to failed runs: {totals['input_tokens']:,} input, {totals['cache_read_tokens']:,} cache read, "
    f"{totals['cache_write_tokens']:,} cache write, {totals['output_tokens']:,} output tokens."
    + (f" Replayed inside them, never paid: {totals['replayed_calls']:,} calls that would cost "
       f"{ui.money(totals['replayed_cost_micros'], 'USD', totals['replayed_unpriced_calls'])}."
       if totals["replayed_calls"] else "")
)
data = ui.load("failures_tables", filters)
ui.filter_sidebar(filters)

left, right = st.columns(2)
with left:
    st.subheader("By error code")
    ui.bar_chart(data["by_error"].fill_null("(none)"), "error_code", "cost_micros", None, "Billed cost by error code",
                 x_type="N")
    ui.table(data["by_error"], "failures_by_error_code")
with right:
    st.subheader("By prompt")
    ui.table(data["by_prompt"], "failures_by_prompt")

st.subheader("Failed runs")
runs = data["runs"]
ui.table(ui.with_explorer_links(runs), "failed_runs", column_config={"run": ui.explorer_link_column()},
         leading=("name", "error_code"))
if not runs.is_empty():
    labels = {row["run_id"]: f"{row['name']} · {row['error_code'] or row['error_type'] or 'failed'} · {row['run_id'][:12]}"
              for row in runs.iter_rows(named=True)}
    picked = st.selectbox("Open a failed run", list(labels), format_func=labels.get)
    st.page_link("run_explorer.py", label="Open in the Run explorer", icon=":material/open_in_new:",
                 query_params={**ui.params_of(filters), "run_id": picked})
