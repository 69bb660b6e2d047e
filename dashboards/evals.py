"""Evals: score history per suite and prompt version, the gate's verdicts, each case's change
against the baseline, and what each case cost."""

from __future__ import annotations

import altair as alt
import polars as pl
import streamlit as st

import _common as ui

filters = ui.page_header("Evals", "Suite scores over time, gate verdicts, and per-case deltas against the baseline.")
data = ui.load_page("evals", filters)
history = data.get("history")
if history is None or history.is_empty():
    st.info("No eval runs yet. Define a suite with `define_eval(...)`, record its baseline with "
            "`workbench eval --record-baseline`, then gate changes with `workbench eval`: every run shows up here.")
    st.stop()

latest = history.sort("started_at").group_by("suite").last()
cols = st.columns(4)
cols[0].metric("Eval runs", f"{history.height:,}", help=f"{latest.height} suites")
failed = history.filter(pl.col("verdict").is_in(["regression", "error"])).height
cols[1].metric("Failed gates", f"{failed:,}", help="verdict regression or error")
cols[2].metric("Eval spend", ui.money(int(history["cost_micros"].fill_null(0).sum())))
cases = int(history["cases"].sum())
cols[3].metric("Cost per case", ui.money(int(history["cost_micros"].fill_null(0).sum()) // cases) if cases else "–",
               help="rounded up to the cent; exact per-case costs are in the table")

st.subheader("Score history")
chart_data = history.with_columns(
    pl.Series("prompt version", [ui.prompt_label(i, v) for i, v in zip(history["prompt_id"], history["prompt_version"])],
              dtype=pl.Utf8))
chart = alt.Chart(chart_data).mark_line(point=True).encode(
    x=alt.X("started_at:T", title="run"), y=alt.Y("mean_score:Q", title="mean score"),
    color=alt.Color("prompt version:N"), strokeDash=alt.StrokeDash("suite:N"),
    tooltip=["suite", "prompt version", "model", "mean_score", "baseline_mean", "verdict", "git_commit"],
).properties(height=280)
st.altair_chart(chart, width="stretch")

st.subheader("Gate verdicts")
ui.table(history.sort("started_at", descending=True), "eval_runs",
         money_columns=("cost_micros",), exact_columns=("cost_per_case_micros",))

st.subheader("Cases")
runs = history.sort("started_at", descending=True)
labels = {row["eval_run_id"]: f"{row['suite']} · {ui.prompt_label(row['prompt_id'], row['prompt_version'])} · "
          f"{row['verdict']} · {row['started_at']:%Y-%m-%d %H:%M}" for row in runs.iter_rows(named=True)}
wanted = st.query_params.get("eval_run_id")
picked = st.selectbox("Eval run", list(labels), format_func=labels.get,
                      index=list(labels).index(wanted) if wanted in labels else 0)
cases_frame = ui.load("eval_cases", picked)
if not cases_frame.is_empty():
    moved = cases_frame.filter(pl.col("delta").is_not_null())
    if not moved.is_empty():
        bars = alt.Chart(moved).mark_bar().encode(
            x=alt.X("case_id:N", sort="y", title="case"), y=alt.Y("delta:Q", title="score − baseline"),
            color=alt.condition(alt.datum.delta < 0, alt.value("#d62728"), alt.value("#2ca02c")),
            tooltip=["case_id", "score", "baseline_score", "delta", "passed"],
        ).properties(height=240)
        st.altair_chart(bars, width="stretch")
ui.table(cases_frame, f"eval_cases_{picked[:12]}", money_columns=(), exact_columns=("cost_micros",))
