"""Compaction: when conversations were compacted, how many tokens it removed, how many turns were
summarised and kept, what the summaries cost, the compactions that failed and the runs that
compacted most."""

from __future__ import annotations

import streamlit as st

import _common as ui

filters = ui.page_header("Compaction", "Context compactions (the runtime's agent.compact events and apps' own).")
cols = ui.Tiles(5)  # drawn before the read: see Tiles
# the headline first: its figures paint while the tables below are still being read
totals = ui.load("compaction_totals", filters).row(0, named=True)

if not totals["events"]:
    cols.clear()
    ui.filter_sidebar(filters)
    st.info("No compactions match the filters. Agents built with `workbench.Agent(...)` compact automatically near "
            "their context limit; apps running their own loop report theirs with `workbench.event(\"agent.compact\", ...)`.")
    st.stop()

cols[0].metric("Compactions", f"{totals['events']:,}", help=f"in {totals['runs']:,} runs")
cols[1].metric("Failed", f"{totals['failed']:,}", help="outcome other than ok")
cols[2].metric("Tokens before → after", f"{ui.compact(totals['tokens_before'])} → {ui.compact(totals['tokens_after'])}",
               help=f"{ui.share(totals['tokens_before'] - totals['tokens_after'], totals['tokens_before'])} removed")
cols[3].metric("Turns summarised / kept", f"{totals['summarised_turns']:,} / {totals['kept_turns']:,}")
cols[4].metric("Summary cost", ui.format_costs(ui.cost_parts(totals["costs"]), totals["unpriced"]),
               help="each currency its summary calls were priced in, apart")
ui.filter_sidebar(filters)

data = ui.load("compaction_tables", filters)
st.subheader("Reported and inferred")
st.caption("Reported: the agent said so (an agent.compact event); inferred: the traffic shows it (a run's history "
           "shrank and a summary took the place of earlier turns), for agents that report nothing. A reported one the "
           "traffic confirms is counted once, as reported (`seen_in_traffic`). Saved tokens = tokens removed × the "
           "run's calls from the compaction to the next one; re-caching = the cache writes the new prefix forced.")
# the summaries' and the re-caching's money per currency it was paid in, never one sum of two
ui.table(ui.with_costs(data["sources"], "summary_costs", "recache_costs"), "compaction_sources", money_columns=())

ui.bar_chart(data["by_day"].with_columns(data["by_day"]["day"].cast(str)), "day", "events", "outcome",
             "Compactions per day (UTC)", money_axis=False, x_type="O")

st.subheader("Failed compactions")
ui.table(ui.with_explorer_links(data["failed"]), "failed_compactions", column_config={"run": ui.explorer_link_column()})
st.subheader("Runs that compacted most")
ui.table(ui.with_explorer_links(ui.with_costs(data["top_runs"], "summary_costs")), "compaction_top_runs", column_config={"run": ui.explorer_link_column()})
with st.expander("Latest compactions"):
    ui.table(data["events"], "compactions")
