"""Overview: where the money went — spend over time by model and prompt version, calls, runs,
the failure rate, the top spenders; unpriced calls counted and flagged, never shown as free."""

from __future__ import annotations

import polars as pl
import streamlit as st

import _common as ui
from workbench.store.queries import LATENCY
from workbench.store.rollup import LATENCY_ERROR

filters = ui.page_header("Overview", "Where the money went: by day, model and prompt version.")
# the breakdown's choices sit above the figures but are drawn after them (they need the filters' options)
controls = st.container()
cols = ui.Tiles(3, 3)  # money first; six tiles in one row cut an exact amount short. Drawn before the read: see Tiles
# the headline first: its figures paint while the breakdowns below are still being counted
data = ui.load("overview_headline", filters)
calls = data["calls"].row(0, named=True)
runs = data["runs"].row(0, named=True)
finished = runs["ok"] + runs["failed"]

unpriced_note = f"+ {calls['unpriced_calls']:,} unpriced calls" if calls["unpriced_calls"] else None
cols[0].metric("Spend", ui.money_by_currency(data["currency"]), delta=unpriced_note, delta_color="inverse",
               delta_arrow="off", help="what live calls cost, exact (sub-cent where sub-cent); unpriced calls are "
               "counted beside it, never taken as free; replayed calls are not in it")
cols[1].metric("Replayed: would cost", ui.money_by_currency(data["currency"], "replayed_cost_micros"),
               help=f"{calls['replayed_calls']:,} calls answered from cassettes: never paid, shown apart at what "
               "they would have cost")
cols[3].metric("Calls", f"{calls['calls']:,}", help=f"{calls['settled']:,} settled, {calls['unsettled']:,} unsettled, "
               f"{calls['replayed_calls']:,} replayed")
cols[4].metric("Runs", f"{runs['runs']:,}", help=f"top-level runs ({runs['nested_runs']:,} nested runs inside them)")
cols[5].metric("Run failure rate", ui.share(runs["failed"], finished),
               help=f"{runs['failed']:,} failed of {finished:,} finished top-level runs")
cols[2].metric("Unpriced calls", f"{calls['unpriced_calls']:,}",
               help="live calls that answered and that no price row covered: their cost is unknown, not zero")
if calls["unpriced_calls"]:
    st.warning(
        f"**{calls['unpriced_calls']:,} calls are unpriced** ({calls['unpriced_tokens']:,} tokens): neither "
        "`models.toml` nor the price library knows their model, so their cost is **not** in the totals. Add rows "
        "to `models.toml` to price them (`workbench models NAME` shows what a model is priced at).",
        icon=":material/money_off:",
    )
ui.filter_sidebar(filters)
tag_keys = sorted({tag.partition("=")[0] for tag in ui.filter_choices().get("tags", [])})
left, right = controls.columns([4, 1])
breakdowns = ["model", "provider", "prompt", "run", "day", "week", "month", *tag_keys]
by = left.selectbox("Break spend down by", breakdowns, format_func=lambda key: {
    "prompt": "prompt and version", "run": "run name"}.get(key, key if key in breakdowns[:7] else f"tag: {key}"))
top = right.number_input("Top", min_value=1, max_value=100, value=10, help="the rest is summed into one row")

by_day = data["by_day"]
if not by_day.is_empty():
    currency = data["currency"]["currency"][0] if not data["currency"].is_empty() else "USD"
    if data["currency"].height > 1:
        st.caption(f"Charts show {currency} only; the other currencies are in the tables.")
    split = st.segmented_control("Spend over time by", ["model", "prompt version", "none"], default="model")
    frame = by_day.filter(pl.col("currency") == currency) if currency else by_day
    if split == "prompt version":
        frame = ui.with_prompt_labels(frame)
    key = {"model": "model", "prompt version": "prompt"}.get(split or "none")
    grouped = frame.group_by(["day", *([key] if key else [])]).agg(pl.col("cost_micros").sum()).sort("day")
    grouped = grouped.with_columns(pl.col("day").cast(pl.Utf8))
    ui.bar_chart(grouped, "day", "cost_micros", key, "Spend per day (UTC)", x_type="O", currency=currency)

data = ui.load("overview_tables", filters, f"tag:{by}" if by in tag_keys else by, int(top))


def latency_table(frame: pl.DataFrame, name: str) -> None:
    """A breakdown whose latency read from the latency buckets says so in its column names."""
    bucketed = "latency_approx" in frame.columns and bool(frame["latency_approx"].any())
    config = {column: st.column_config.NumberColumn(
        f"≈ {column.removesuffix('_ms').replace('_', ' ')} ms", help=f"within {LATENCY_ERROR:.1%} of the exact "
        "percentile: read from the latency rollup's buckets") for column in LATENCY} if bucketed else {}
    ui.table(frame, name, hide=("latency_approx",), column_config=config)


st.subheader(f"Spend by {by}")
st.caption("Exact amounts: the rows add up to the Spend above, to the millionth of a cent. Latency (ms) is over "
           "live calls: median, 95th and 99th percentile of the time to first byte and of the duration; marked ≈ "
           f"where it is read from monthly latency buckets, each within {LATENCY_ERROR:.1%} of the exact percentile "
           "(only past a million live calls, and exact with a run name or tag filter, a start that is not a UTC "
           "midnight, or a breakdown by day, week, run or tag).")
latency_table(data["breakdown"], f"breakdown_by_{by}")

st.subheader("By model")
latency_table(data["by_model"], "spend_by_model")
st.subheader("By prompt version")
latency_table(data["by_prompt"], "spend_by_prompt")

left, right = st.columns(2)
with left:
    st.subheader("Top spenders: run names")
    ui.table(data["top_names"], "top_run_names")
with right:
    st.subheader("Top spenders: runs")
    ui.table(ui.with_explorer_links(data["top_runs"]), "top_runs", column_config={"run": ui.explorer_link_column()})
