"""Prompt cache: how much of the input was read from the cache, how often a request hit it, and
the money the reads saved net of what the writes cost extra, by prompt and model; the runs whose
later turns read nothing (an unstable prefix); and the calls the runtime's response cache answered
without sending anything."""

from __future__ import annotations

import polars as pl
import streamlit as st

import _common as ui

filters = ui.page_header(
    "Prompt cache",
    "Read share = cache reads / (uncached input + cache reads + cache writes), token-weighted. Hit rate = "
    "settled calls that read anything / settled calls. Net savings = reads × (input − read price) − writes × "
    "(write − input price), at each call's recorded prices.",
)
cols = ui.Tiles(5)  # drawn before the read: see Tiles
# the headline first: its figures paint while the tables below are still being read
data = ui.load("cache_headline", filters)
# a row per currency: the counts are summed, the money is shown per currency (never added across)
by_currency = data["totals"]
totals = by_currency.drop("currency").sum().row(0, named=True)
currency = by_currency["currency"][0] or "USD"  # the main one: the chart's
input_all = totals["input_tokens"] + totals["cache_read_tokens"] + totals["cache_write_tokens"]

cols[0].metric("Read share", ui.share(totals["cache_read_tokens"], input_all),
               help=f"{totals['cache_read_tokens']:,} of {input_all:,} input tokens")
cols[1].metric("Request hit rate", ui.share(totals["hit_calls"], totals["calls"]),
               help=f"{totals['hit_calls']:,} of {totals['calls']:,} settled calls")
# savings are shown exact (not rounded up like a bill), so net = saved by reads - write premium, digit for digit
cols[2].metric("Net savings", ui.money_by_currency(by_currency, "net_savings_micros"),
               help="what the reads saved minus what the writes cost above plain input")
cols[3].metric("Saved by reads", ui.money_by_currency(by_currency, "read_savings_micros"))
cols[4].metric("Write premium", ui.money_by_currency(by_currency, "write_premium_micros"))
if totals["replayed_calls"]:
    st.caption(f"{totals['replayed_calls']:,} of these calls were replayed from cassettes: their cache use is in the "
               "token figures, and they saved no money (they were never paid for).")
if totals["unpriced_calls"]:
    st.warning(f"{totals['unpriced_calls']:,} settled calls have no price row, so their cache use saved an unknown "
               "amount; they are left out of the money above.", icon=":material/money_off:")
# the tables read before anything else is drawn: the browser paints the figures meanwhile, not behind the
# widgets, chart and tables below
tables = ui.load("cache_tables", filters)
ui.filter_sidebar(filters)

st.subheader("By prompt and model")
by = data["by_prompt_model"]
if not by.is_empty():
    by = by.with_columns(
        pl.when(pl.col("input_tokens") + pl.col("cache_read_tokens") + pl.col("cache_write_tokens") > 0)
        .then(pl.col("cache_read_tokens") / (pl.col("input_tokens") + pl.col("cache_read_tokens")
                                            + pl.col("cache_write_tokens")) * 100).round(1).alias("read_share_%"),
        (pl.col("hit_calls") / pl.col("calls") * 100).round(1).alias("hit_rate_%"),
    )
    chart = ui.with_prompt_labels(by.filter(pl.col("currency").is_null() | (pl.col("currency") == currency)))
    chart = chart.group_by("prompt", "model").agg(pl.col("net_savings_micros").sum())
    ui.bar_chart(chart, "prompt", "net_savings_micros", "model", "Net savings by prompt", x_type="N", currency=currency)
    if by_currency.height > 1:
        st.caption(f"The chart shows {currency} only; the other currencies are in the table.")
ui.table(by, "cache_by_prompt_model", money_columns=(),
         exact_columns=("net_savings_micros", "read_savings_micros", "write_premium_micros"))

st.subheader("Unstable prefixes")
unstable = tables["unstable"]
count = unstable["total_runs"][0] if not unstable.is_empty() else 0
st.caption(f"{count:,} runs made two or more calls, wrote the cache on the first, and never read it afterwards: "
           "something early in the prompt (a timestamp, an id, tool order) changes between turns.")
ui.table(ui.with_explorer_links(unstable.drop("total_runs") if "total_runs" in unstable.columns else unstable),
         "unstable_prefix_runs", column_config={"run": ui.explorer_link_column()})

st.subheader("Response cache")
hits = tables["response_cache"]
st.caption("Calls the runtime's gateway answered from its response cache (Gateway(cache=ResponseCache())): nothing "
           "was sent or paid. 'Saved' is what the re-served calls cost when they were paid; it is never added to "
           "what was paid.")
ui.table(hits, "response_cache_hits", money_columns=(), exact_columns=("saved_cost_micros",))

st.subheader("Why calls missed")
st.caption("Each call's verdict, judged once when it was recorded, against the calls before it that its cache could "
           "serve (same provider, model and cache scope, on the provider's clock). Lost = what the misses paid minus "
           "what a hit on the same prefix would have paid, exact. `unexplained`: an identical prefix was cached and "
           "alive, yet nothing was read (the provider evicted or routed elsewhere): not the prompt's fault.")
why = tables["why"]
if why.is_empty():
    st.caption("No settled calls match the filters.")
else:
    ui.table(why, "cache_miss_reasons", money_columns=(), exact_columns=("lost_micros",))
st.markdown("**Prefixes that keep changing** (by prompt and the first region that differs; one recorded diff each)")
ui.table(tables["changing"], "cache_changing_regions", money_columns=(), exact_columns=("lost_micros",))
st.markdown("**Cache writes and their fate**: `read` (a later hit read it), `wasted` (its life ended unread: "
            "paid 1.25x or 2x the input price for nothing), `alive` (unread, still in its life)")
ui.table(tables["waste"], "cache_write_waste", money_columns=(), exact_columns=("write_micros",))
