"""Run explorer: one run — its transcript (messages, tool calls and results), its calls with usage
and cost, its span tree as a waterfall, and the export of the run as a cassette and case."""

from __future__ import annotations

from pathlib import Path

import altair as alt
import polars as pl
import streamlit as st

import _common as ui
from _transcript import turns

filters = ui.page_header("Run explorer", "One run: what was said, what each call cost, where the time went.")
wanted = st.query_params.get("run_id")
data = ui.load_page("run_explorer", filters, run_id=wanted)
choices = data["choices"]
labels = {row["run_id"]: f"{row['name']} · {row['status']} · {row['started_at']:%Y-%m-%d %H:%M} · {row['run_id'][:12]}"
          for row in choices.iter_rows(named=True)}
if wanted and wanted not in labels:
    labels = {wanted: wanted, **labels}
if not labels:
    st.info("No runs match the filters.")
    st.stop()
picked = st.selectbox("Run", list(labels), format_func=labels.get, index=list(labels).index(wanted) if wanted else 0)
if picked != wanted:
    st.query_params["run_id"] = picked
    st.rerun()

tree = data["tree"]
if tree.is_empty():
    st.warning(f"No run with id `{wanted}` is in the store (it may not be ingested yet: refresh in a few seconds).")
    st.stop()
run = tree.filter(pl.col("run_id") == wanted).row(0, named=True)
calls = data["calls"]

cols = st.columns(5)
cols[0].metric("Status", run["status"])
cols[1].metric("Billed", ui.money(run["billed_cost_micros"], "USD", run["billed_unpriced_calls"] or 0)
               if run["billed_calls"] is not None else "no bill", help=ui.bill_note(run))
cols[2].metric("Calls answered", f"{run['billed_calls'] or 0:,}", help=f"{run['billed_unsettled'] or 0:,} unsettled")
tokens_in = sum(run[f"billed_{k}_tokens"] or 0 for k in ("input", "cache_read", "cache_write"))
cols[3].metric("Tokens in / out", f"{ui.compact(tokens_in)} / {ui.compact(run['billed_output_tokens'] or 0)}",
               help=f"{tokens_in:,} input (cached included) / {run['billed_output_tokens'] or 0:,} output")
duration = (run["ended_at"] - run["started_at"]).total_seconds() if run["ended_at"] and run["started_at"] else None
cols[4].metric("Duration", f"{duration:.2f}s" if duration is not None else "running")
st.caption(f"`{run['run_id']}` · {run['name']} ({run['kind']}) · started {run['started_at']} · "
           f"prompt {run['prompt_id'] or '–'} {run['prompt_version'] or ''} · tags {', '.join(run['tag_list'] or []) or '–'}"
           + (f" · inside run `{run['parent_run_id']}`" if run["parent_run_id"] else ""))
saved = data["resume"].row(0, named=True)
if run["resumed_from_run_id"] or saved["replayed_calls"]:
    would = ui.money(saved["saved_cost_micros"], saved["currency"] or "USD", saved["unpriced"])
    count = saved["replayed_calls"]
    # our own ids and figures only: nothing recorded is rendered here
    st.info(f"Resumed from run {run['resumed_from_run_id']}: {count:,} call{'' if count == 1 else 's'} answered "
            f"from the store, not paid again; {'it' if count == 1 else 'they'} would have cost {would}.",
            icon=":material/replay:")
if run["status"] == "failed":
    st.warning(f"**{run['error_code'] or run['error_type'] or 'failed'}**: {run['error_message'] or ''}",
               icon=":material/error:")

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
        st.markdown(f"**Call {index + 1}** · `{call['model']}` · {call['input_tokens'] or 0:,} in + "
                    f"{call['cache_read_tokens'] or 0:,} cache read + {call['cache_write_tokens'] or 0:,} cache write → "
                    f"{call['output_tokens'] or 0:,} out · {cost}")
        for entry in [*sent, *answered]:
            with st.chat_message(entry.role, avatar=icons.get(entry.role)):
                if entry.kind == "tool_call":
                    st.markdown(f"Tool call **{entry.name}**")
                    st.code(entry.text, language="json")
                elif entry.kind == "tool_result":
                    st.markdown(f"Tool result `{entry.name}`")
                    st.code(entry.text)
                elif entry.kind == "raw":
                    st.code(entry.text)
                else:
                    st.markdown(entry.text)
        if call["error_type"]:
            st.caption(f"error: {call['error_type']}: {call['error_message'] or ''}")

with call_tab:
    verdicts = data["verdicts"]
    shown = calls.drop("request_json", "response_json", "output_text", "tool_calls", "span_id").join(
        verdicts.select("call_id", pl.col("verdict").alias("cache_verdict"), pl.col("region").alias("changed_region"),
                        "miss_micros"), on="call_id", how="left", maintain_order="left")
    ui.table(shown, f"run_{wanted[:12]}_calls", money_columns=(), exact_columns=("cost_micros", "miss_micros"))
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
        ui.table(turns_frame, f"run_{wanted[:12]}_turns", money_columns=(), exact_columns=(
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
        ui.table(data["compactions"], f"run_{wanted[:12]}_compactions")

with inner:
    ui.table(ui.with_explorer_links(tree.select("depth", "run_id", "name", "kind", "status", "error_code",
                                                "billed_calls", "billed_cost_micros", "billed_unsettled")
                                    .rename({"billed_cost_micros": "cost_micros"})),
             f"run_{wanted[:12]}_tree", column_config={"run": ui.explorer_link_column()})

with exporting:
    try:
        from workbench.replay.export import export_run
    except ImportError:
        export_run = None
    if export_run is None:
        st.caption("Exporting runs as cassettes arrives with `workbench.replay.export` (not installed in this build).")
    else:
        target = st.text_input("Cassette file", value=f"cassettes/exported/run-{wanted[:12]}.json")
        if st.button("Export as cassette and case", icon=":material/download:"):
            try:
                written = export_run(wanted, Path(target), db=Path(ui.store_paths()[0]))
                paths = written if isinstance(written, (tuple, list)) else [written or target]
                st.success("Wrote " + " and ".join(f"`{path}`" for path in paths) + ": the run is now a regression "
                           "case that replays offline with `workbench eval`.")
            except Exception as exc:  # noqa: BLE001 - shown to the user with its code when it has one
                st.warning(f"{getattr(exc, 'code', type(exc).__name__)}: {getattr(exc, 'cause', exc)}"
                           + (f"\n\nFix: {exc.fix}" if hasattr(exc, "fix") else ""))
