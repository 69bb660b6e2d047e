"""Run explorer: one run — its transcript (messages, tool calls and results), its calls with usage
and cost, its span tree as a waterfall, and the export of the run as a cassette and case."""

from __future__ import annotations

from pathlib import Path

import altair as alt
import polars as pl
import streamlit as st

import _common as ui
from _transcript import turns
from workbench.config import project_root
from workbench.errors import WorkbenchError

LONG_SYSTEM_CHARS = 1500  # a longer system prompt (a handbook, the docs) is folded

filters = ui.page_header("Run explorer", "One run: what was said, what each call cost, where the time went.")
wanted = st.query_params.get("run_id")
picker = st.container()  # the run picker, above the figures
cols = ui.Tiles(5)  # drawn before the read: see Tiles
data = ui.load_explorer(filters, wanted)  # without a run: the latest, in the same read
choices = data["choices"]
if not wanted and choices.height:
    wanted = st.query_params["run_id"] = choices["run_id"][0]


def label(row: dict) -> str:
    return f"{row['name']} · {row['status']} · {row['started_at']:%Y-%m-%d %H:%M} · {row['run_id'][-12:]}"


labels = {row["run_id"]: label(row) for row in choices.iter_rows(named=True)}
if wanted and wanted not in labels:  # a run the filters, or the list of the latest runs, leave out
    found = data["tree"].filter(pl.col("run_id") == wanted)
    labels = {wanted: label(found.row(0, named=True)) if found.height else wanted, **labels}
if not labels:
    cols.clear()
    ui.filter_sidebar(filters)
    st.info("No runs match the filters.")
    st.stop()


def follow_picker(key: str) -> None:
    st.query_params["run_id"] = st.session_state[key]


def pick_run() -> None:
    """The run picker, in its place above the figures but drawn after them (a cold browser builds a
    selectbox of every listed run before it paints what comes with it). A picked run goes into the
    URL before the page reruns (`on_change`), so the rerun reads that run at once; the key names the
    run shown, so a picker for another run (a link, the navigation) starts from that run."""
    key = f"run_picker:{wanted}"
    picked = picker.selectbox("Run", list(labels), format_func=labels.get, key=key, on_change=follow_picker,
                              args=(key,), index=list(labels).index(wanted) if wanted else 0)
    if picked != wanted:
        st.query_params["run_id"] = picked
        st.rerun()


tree = data["tree"]
if tree.is_empty():
    cols.clear()
    pick_run()
    ui.filter_sidebar(filters)
    st.warning("No run with the id below is in the store (it may not be ingested yet: refresh in a few seconds).")
    st.code(wanted, language=None)
    st.stop()
run = tree.filter(pl.col("run_id") == wanted).row(0, named=True)
calls = data["calls"]

cols[0].metric("Status", run["status"] if run["status"] in ("ok", "failed", "running") else "unknown")
cols[1].metric("Billed", ui.bill_money(run), help=ui.bill_note(run))
cols[2].metric("Calls answered", f"{run['billed_calls'] or 0:,}", help=f"{run['billed_unsettled'] or 0:,} unsettled")
tokens_in = sum(run[f"billed_{k}_tokens"] or 0 for k in ("input", "cache_read", "cache_write"))
cols[3].metric("Tokens in / out", f"{ui.compact(tokens_in)} / {ui.compact(run['billed_output_tokens'] or 0)}",
               help=f"{tokens_in:,} input (cached included) / {run['billed_output_tokens'] or 0:,} output")
duration = (run["ended_at"] - run["started_at"]).total_seconds() if run["ended_at"] and run["started_at"] else None
cols[4].metric("Duration", f"{duration:.2f}s" if duration is not None else "running")
ui.filter_sidebar(filters)
pick_run()
# recorded text (names, tags, errors, prompts, answers) is shown with st.text and st.code, never as
# Markdown: escaping cannot stop Markdown from turning a recorded URL into a link
st.text(" · ".join((
    run["run_id"], f"{run['name']} ({run['kind']})", f"started {run['started_at']}",
    "prompt " + ui.prompt_label(run["prompt_id"], run["prompt_version"]),
    "tags " + (", ".join(run["tag_list"] or []) or "–"),
    *([f"inside run {run['parent_run_id']}"] if run["parent_run_id"] else []))))
saved = data["resume"].row(0, named=True)
if run["resumed_from_run_id"] or saved["replayed_calls"]:
    would = ui.money(saved["saved_cost_micros"], saved["currency"] or "USD", saved["unpriced"])
    count = saved["replayed_calls"]
    # our own ids and figures only: nothing recorded is rendered here
    st.info(f"Resumed from run {run['resumed_from_run_id']}: {count:,} call{'' if count == 1 else 's'} answered "
            f"from the store, not paid again; {'it' if count == 1 else 'they'} would have cost {would}.",
            icon=":material/replay:")
if run["status"] == "failed":
    st.warning("This run failed, with the error below.", icon=":material/error:")
    st.code(f"{run['error_code'] or run['error_type'] or 'failed'}: {run['error_message'] or ''}", language=None,
            wrap_lines=True)

turn_events = data["turns"]
transcript, call_tab, turn_tab, waterfall, inner, exporting = st.tabs(
    ["Transcript", f"Calls ({calls.height})", f"Agent turns ({turn_events.height})", "Waterfall",
     f"Runs inside ({tree.height - 1})", "Export"])

with transcript:
    if calls.is_empty():
        st.caption("This run made no calls.")
    icons = {"user": ":material/person:", "assistant": ":material/smart_toy:", "system": ":material/settings:",
             "tool": ":material/build:"}
    for index, (call, sent, answered) in enumerate(turns(calls.to_dicts())):
        cost = ui.exact(call["cost_micros"], call["currency"]) if call["settled"] else "unsettled"
        st.markdown(f"**Call {index + 1}**")
        st.text(f"{call['model'] or '?'} · {call['input_tokens'] or 0:,} in + {call['cache_read_tokens'] or 0:,} cache "
                f"read + {call['cache_write_tokens'] or 0:,} cache write → {call['output_tokens'] or 0:,} out · {cost}")
        for entry in [*sent, *answered]:
            with st.chat_message(entry.role if entry.role in icons else "tool",
                                 avatar=icons.get(entry.role, icons["tool"])):
                if entry.kind == "tool_call":
                    st.text(f"Tool call: {entry.name}")
                    st.code(entry.text, language="json", wrap_lines=True)
                elif entry.kind == "tool_result":
                    st.text(f"Tool result: {entry.name}")
                    st.code(entry.text, language=None, wrap_lines=True)
                elif entry.kind == "raw":
                    st.code(entry.text, language=None, wrap_lines=True)
                elif entry.role == "system" and len(entry.text) > LONG_SYSTEM_CHARS:
                    with st.expander(f"System prompt · {len(entry.text):,} characters"):
                        st.text(entry.text)
                else:
                    st.text(entry.text)
        if call["error_type"]:
            st.text(f"error: {call['error_type']}: {call['error_message'] or ''}")

with call_tab:
    verdicts = data["verdicts"]
    shown = calls.drop("request_json", "response_json", "output_text", "tool_calls", "span_id").join(
        verdicts.select("call_id", pl.col("verdict").alias("cache_verdict"), pl.col("region").alias("changed_region"),
                        "miss_micros"), on="call_id", how="left", maintain_order="left")
    ui.table(shown, f"run_{wanted[-12:]}_calls", money_columns=(), exact_columns=("cost_micros", "miss_micros"))
    changed = verdicts.filter(pl.col("diff").is_not_null())
    if not changed.is_empty():
        st.markdown("**Why the cache missed: what changed in the prefix**")
        numbers = {call_id: index + 1 for index, call_id in enumerate(calls["call_id"])}
        for row in changed.iter_rows(named=True):
            st.caption(f"Call {numbers.get(row['call_id'], '?')}: {row['verdict']} at {row['region']}, "
                       f"against call {row['entry_call_id']}")
            st.code(row["diff"], language=None)  # recorded text: shown as text, never as markup

with turn_tab:
    if turn_events.is_empty():
        st.caption("No agent.turn events in this run (Workbench's Agent records one per turn; apps running their own "
                   "loop can with workbench.event(\"agent.turn\", ...)).")
    else:
        import json

        turns_frame = pl.DataFrame([{"time": row["time"], "run_id": row["run_id"], **json.loads(row["attributes"] or "{}")}
                                    for row in turn_events.iter_rows(named=True)], infer_schema_length=None)
        if "tool_names" in turns_frame.columns and turns_frame["tool_names"].dtype == pl.List(pl.Utf8):
            turns_frame = turns_frame.with_columns(pl.col("tool_names").list.join(", "))
        ui.table(turns_frame, f"run_{wanted[-12:]}_turns", money_columns=(), exact_columns=(
            ("cost_micros",) if "cost_micros" in turns_frame.columns else ()))

with waterfall:
    spans = data["spans"]
    if spans.is_empty():
        st.caption("No spans were recorded for this run (tracing was off).")
    else:
        parents = dict(zip(spans["span_id"], spans["parent_span_id"]))

        def depth(span_id: str) -> int:
            level, seen = 0, set()
            while parents.get(span_id) in parents and span_id not in seen:
                seen.add(span_id)
                span_id, level = parents[span_id], level + 1
            return level

        start = spans["start_time"].min()
        frame = spans.with_columns(
            pl.Series("depth", [depth(s) for s in spans["span_id"]]),
            ((pl.col("start_time") - start).dt.total_microseconds() / 1000).alias("start_ms"),
            ((pl.col("end_time").fill_null(pl.col("start_time")) - start).dt.total_microseconds() / 1000).alias("end_ms"),
        ).with_columns(
            (pl.lit("  ") .repeat_by(pl.col("depth")).list.join("") + pl.col("name")).alias("span"),
            (pl.col("end_ms") - pl.col("start_ms")).round(1).alias("duration_ms"),
            pl.int_range(pl.len()).alias("order"),
        )
        chart = alt.Chart(frame.select("span", "order", "start_ms", "end_ms", "duration_ms", "status_code", "kind")
                          ).mark_bar().encode(
            y=alt.Y("span:N", sort=alt.EncodingSortField("order"), title=None),
            x=alt.X("start_ms:Q", title="ms since the run's first span"), x2="end_ms:Q",
            color=alt.Color("status_code:N", title="status"),
            tooltip=["span", "duration_ms", "status_code", "kind"],
        ).properties(height=max(120, 24 * frame.height))
        st.altair_chart(chart, width="stretch")
    if not data["compactions"].is_empty():
        st.subheader("Compactions")
        ui.table(data["compactions"], f"run_{wanted[-12:]}_compactions")

with inner:
    # each run's bill per currency its calls were priced in, as text: one run's row never adds two currencies
    billed = pl.Series("billed", [ui.bill_money(row) for row in tree.iter_rows(named=True)], dtype=pl.Utf8)
    ui.table(ui.with_explorer_links(tree.select("depth", "run_id", "name", "kind", "status", "error_code",
                                                "billed_calls", "billed_unsettled").insert_column(6, billed)),
             f"run_{wanted[-12:]}_tree", column_config={"run": ui.explorer_link_column()})

with exporting:
    folder = project_root() / "cassettes"
    st.caption(f"Writes the run's calls as a cassette (they replay offline) and its case beside it, inside the "
               f"project's cassette folder, {ui.escaped(folder)}.")
    target = st.text_input("Cassette file, inside that folder", value=f"exported/run-{wanted[-12:]}.json")
    replace = st.checkbox("Replace the files if they exist")
    if st.button("Export as cassette and case", icon=":material/download:"):
        from workbench.replay.export import export_run  # only on a click: the page paints without it

        try:
            written = export_run(wanted, Path(target), db=Path(ui.store_paths()[0]), within=folder, overwrite=replace)
            st.success("Wrote " + " and ".join(ui.escaped(path) for path in written) + ".")
        except WorkbenchError as exc:
            st.warning(f"**{exc.code}**: {ui.escaped(exc.cause)}\n\n**Fix:** {ui.escaped(exc.fix)}")
