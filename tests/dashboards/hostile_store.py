"""The fixture store with hostile recorded text: every prompt, answer, model and run name, tag,
error, tool name, prompt id and version, suite and case id carries Markdown and HTML that would
make a browser fetch a URL (an image, an <img>) if the dashboard rendered it as markup."""

from __future__ import annotations

import json
from pathlib import Path

import dashboard_store as fx
from workbench.store.db import open_store
from workbench.store.ingest import write_rows


def hostile(value: str, where: str, canary: str) -> str:
    """`value` followed by markup that fetches `canary`/<where>… when rendered as Markdown or HTML."""
    return (f"{value} ![x]({canary}/md-{where}.png) <img src=\"{canary}/html-{where}.png\"> "
            f"[{where}]({canary}/link-{where}) **bold-{where}** :red[{where}] $x^2$")


def _texts(row: dict, fields: tuple[str, ...], canary: str) -> dict:
    return {**row, **{name: hostile(row[name], name, canary) for name in fields if row.get(name)}}


def build(path: Path, canary: str) -> Path:
    calls = [_texts(c, ("model_requested", "model_served", "prompt_id", "prompt_version", "error_type"), canary)
             | {"error_message": hostile("the provider said no", "call-error", canary)} for c in fx.call_rows()]
    runs = [_texts(r, ("name", "error_code", "error_type", "error_message", "prompt_id", "prompt_version"), canary)
            | {"error_message": hostile("run failed", "run-error", canary)} for r in fx.run_rows(fx.call_rows())]
    say = hostile("Say hello to Ada", "prompt", canary)
    tool = {"role": "assistant", "content": None, "tool_calls": [{"id": "tc1", "type": "function", "function": {
        "name": hostile("lookup", "tool", canary), "arguments": json.dumps({"q": hostile("Ada", "args", canary)})}}]}
    bodies = [
        {"call_id": "c01", "request_json": json.dumps({"model": "alpha", "messages": [
            {"role": "system", "content": hostile("You greet people.", "system", canary)},
            {"role": "user", "content": say}]}), "response_json": "{}", "output_text": None,
         "tool_calls": json.dumps([{"id": "tc1", "name": hostile("lookup", "tool-call", canary), "arguments": "{}"}])},
        {"call_id": "c02", "request_json": json.dumps({"model": "alpha", "messages": [
            {"role": "user", "content": say}, tool,
            {"role": "tool", "tool_call_id": "tc1", "content": hostile("Ada Lovelace", "tool-result", canary)}]}),
         "response_json": "{}", "output_text": hostile("Hello, Ada!", "answer", canary), "tool_calls": None},
        {"call_id": "c04", "request_json": json.dumps({"model": "beta", "system": hostile("Be brief.", "system2", canary),
                                                       "messages": [{"role": "user", "content": [
                                                           {"type": "text", "text": say}]}]}),
         "response_json": "{}", "output_text": hostile("Hi Grace.", "answer2", canary), "tool_calls": None},
    ]
    with open_store(path) as con:
        write_rows(con, "model", [{"price_source": f"{s.id}@{s.as_of.isoformat()}", "id": s.id, "provider": s.provider,
                                   "spec": s.model_dump_json()} for s in fx.SPECS.values()])
        write_rows(con, "run", runs)
        write_rows(con, "run_tag", [{"run_id": r[0], "key": hostile(k, "tag-key", canary),
                                     "value": hostile(v, "tag-value", canary)} for r in fx.RUNS for k, v in r[6].items()])
        write_rows(con, "call", calls)
        write_rows(con, "call_body", bodies)
        write_rows(con, "span", [_texts(s, ("name",), canary) for s in fx._spans()])
        write_rows(con, "compaction", [
            {"compaction_id": cid, "run_id": run, "occurred_at": fx._at(m).isoformat(), "turn": 3,
             "outcome": hostile(outcome, "outcome", canary), "tokens_before": before, "tokens_after": after,
             "limit_tokens": 32000, "summarised_turns": summ, "kept_turns": kept,
             "model": hostile("alpha", "compaction-model", canary), "cost_micros": cost}
            for cid, run, m, outcome, before, after, summ, kept, cost in fx.COMPACTIONS])
        write_rows(con, "eval_run", [_texts(e, ("suite", "prompt_id", "prompt_version", "model", "git_commit"), canary)
                                     for e in fx.EVAL_RUNS])
        write_rows(con, "eval_result", [
            r | {"case_id": hostile(r["case_id"], "case", canary), "output": hostile(r["output"], "output", canary)}
            for r in fx.EVAL_RESULTS])
    return path
