"""Evals: score history per suite and prompt version, the gate's verdicts, each case's change
against the baseline (the mean of its samples, their spread) and what each case cost; then the
matrices of `workbench eval compare`: every prompt version x model cell, and any case's outputs in
every cell side by side, with their differences from the reference cell."""

from __future__ import annotations

import difflib

import altair as alt
import polars as pl
import streamlit as st

import _common as ui

filters = ui.page_header("Evals", "Suite scores over time, gate verdicts, and per-case deltas against the baseline.")
cols = ui.Tiles(4)  # drawn before the read: see Tiles
data = ui.load_page("evals", filters)
history = data.get("history")
matrices = data.get("matrices")


def pick(label: str, labels: dict[str, str], param: str) -> str:
    """A choice among `labels` (id -> text), preselected from the URL's `param` (a shared link)."""
    wanted = st.query_params.get(param)
    return st.selectbox(label, list(labels), format_func=labels.get,
                        index=list(labels).index(wanted) if wanted in labels else 0)


def matrix_section(matrices: pl.DataFrame) -> None:
    """A `workbench eval compare`: its cells, then one case in every cell, side by side."""
    st.subheader("Compare prompt versions and models")
    matrix_id = pick("Matrix", {row["matrix_id"]: f"{row['suite']} · {', '.join(row['versions'])} × "
                                f"{', '.join(row['models'])} · {row['started_at']:%Y-%m-%d %H:%M}"
                                for row in matrices.iter_rows(named=True)}, "matrix_id")
    cells = ui.load("eval_matrix", matrix_id)
    st.caption("A case moved when it changed by more than the suite's tolerance and a one-sided Welch test puts the "
               "change beyond the noise of its samples. Cost per case is one sample's; latency is measured on live "
               "samples only (a replay's time is not the model's).")
    ui.table(cells, f"matrix_{matrix_id[-12:]}", money_columns=(), exact_columns=("cost_per_case_micros",),
             hide=("eval_run_id",))
    case_ids = ui.load("eval_matrix_case_ids", matrix_id)["case_id"].to_list()
    case_id = pick("Case (those that moved first)", {case: case for case in case_ids}, "case")
    samples = ui.load("eval_matrix_case", matrix_id, case_id)
    if samples.is_empty():
        return
    first = samples.filter(pl.col("epoch") == 1)
    reference = first.filter(pl.col("reference"))
    reference_text = (reference["output"][0] or "") if not reference.is_empty() else None
    for row, column in zip(first.iter_rows(named=True), st.columns(first.height)):
        with column:
            score = "error" if row["case_score"] is None else f"{row['case_score']:.2f}"
            spread = f" ±{row['spread']:.2f}" if row["spread"] else ""
            # a version and a model are recorded text: shown as text, never as Markdown
            st.text(f"{row['prompt_version']} · {row['model']}" + (" (reference)" if row["reference"] else ""))
            st.caption(f"score {score}{spread}")
            st.code(row["output"] if row["error"] is None else row["error"], language=None, wrap_lines=True)
            others = samples.filter((pl.col("eval_run_id") == row["eval_run_id"]) & (pl.col("epoch") > 1))
            if not others.is_empty():
                with st.expander(f"{others.height} more samples"):
                    for other in others.iter_rows(named=True):
                        st.code(other["output"] or other["error"] or "", language=None, wrap_lines=True)
            if reference_text is not None and not row["reference"]:
                diff = list(difflib.unified_diff(reference_text.splitlines() or [""], (row["output"] or "").splitlines()
                                                 or [""], "reference", "this cell", lineterm="", n=1))
                # recorded text is shown as text, never as markup
                st.code("\n".join(diff) if diff else "same as the reference", language="diff", wrap_lines=True)


if history is None or history.is_empty():
    cols.clear()
    ui.filter_sidebar(filters)
    if matrices is not None and not matrices.is_empty():
        matrix_section(matrices)
        st.stop()
    st.info("No eval runs yet. Define a suite with `define_eval(...)`, record its baseline with "
            "`workbench eval --record-baseline`, then gate changes with `workbench eval`: every run shows up here.")
    st.stop()

latest = history.sort("started_at").group_by("suite").last()
cols[0].metric("Eval runs", f"{history.height:,}", help=f"{latest.height} suites")
failed = history.filter(pl.col("verdict").is_in(["regression", "error"])).height
cols[1].metric("Failed gates", f"{failed:,}", help="verdict regression or error")
spend = ui.eval_costs(history.select("cost_micros", "currency", "costs", "unpriced_calls").iter_rows(named=True))
cols[2].metric("Eval spend", ui.format_costs(*spend), help="each currency apart; unpriced calls counted, never free")
cases = int(history["cases"].sum())
[(currency, total)] = spend[0].items() if len(spend[0]) == 1 and not spend[1] else [(None, None)]
cols[3].metric("Cost per case", ui.money(total // cases, currency) if cases and total is not None else "–",
               help="exact per-case costs are in the table; – when the runs were priced in two currencies or a "
                    "call was unpriced (no one figure)")
ui.filter_sidebar(filters)

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
ui.table(ui.with_eval_cost(history.sort("started_at", descending=True)), "eval_runs",
         money_columns=(), exact_columns=("cost_per_case_micros",))

st.subheader("Cases")
runs = history.sort("started_at", descending=True)
picked = pick("Eval run", {row["eval_run_id"]: f"{row['suite']} · {ui.prompt_label(row['prompt_id'], row['prompt_version'])} · "
                          f"{row['verdict']} · {row['started_at']:%Y-%m-%d %H:%M}" for row in runs.iter_rows(named=True)},
              "eval_run_id")
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
ui.table(ui.with_eval_cost(cases_frame), f"eval_cases_{picked[-12:]}", money_columns=(), exact_columns=())
if matrices is not None and not matrices.is_empty():
    matrix_section(matrices)
