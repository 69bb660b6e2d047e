"""A small store with known numbers, for the dashboard's tests: calls priced at two recorded model
rows (one at a sub-cent scale with a long-context tier), nested and failed runs with bills, an
unsettled call, an unpriced call, a replayed call, compactions, spans, bodies and eval runs."""

from __future__ import annotations

import json
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

from workbench.models import ModelSpec, Usage, price_with
from workbench.store.db import open_store
from workbench.store.ingest import write_rows

DAY1 = datetime(2024, 5, 1, 9, 0, tzinfo=timezone.utc)
ALPHA = ModelSpec(id="alpha", provider="openai", input=300, output=1500, cache_read=30, cache_write_5m=375,
                  cache_write_1h=600, context_window=100_000, max_output=4096, source="test", as_of=date(2024, 1, 1))
BETA = ModelSpec(id="beta", provider="anthropic", input=80, output=400, scale=3, context_window=200_000,
                 max_output=4096, source="test", as_of=date(2024, 1, 1),
                 long_context={"above_input_tokens": 10_000_000, "input": 160, "output": 600})
# priced in euros (a negotiated price in the project's models.toml): only `TWO_CURRENCIES` calls it
GAMMA = ModelSpec(id="gamma", provider="openai", currency="EUR", input=250, output=1000, cache_read=25,
                  context_window=100_000, max_output=4096, source="test", as_of=date(2024, 1, 1))
SPECS = {"alpha": ALPHA, "beta": BETA, "gamma": GAMMA}
PROVIDERS = {"alpha": "openai", "beta": "anthropic", "gamma": "openai", "mystery": "openrouter"}
WIRES = {"alpha": "openai.chat", "beta": "anthropic.messages", "gamma": "openai.chat", "mystery": "openai.chat"}

TOKENS = 1000  # every usage figure below is in thousands of tokens, so totals run to dollars
# call id, run id, minutes after DAY1, model, usage (thousands), prompt (id, version), flags
CALLS = [
    ("c01", "R1", 0, "alpha", dict(input_tokens=1000, cache_write_tokens=2000, output_tokens=100), ("greet", "1"), {}),
    ("c02", "R1", 1, "alpha", dict(input_tokens=50, cache_read_tokens=2000, output_tokens=80), ("greet", "1"), {}),
    ("c03", "R1", 2, "alpha", dict(input_tokens=20, cache_write_tokens=1000, cache_write_1h_tokens=400,
                                   output_tokens=10), ("greet", "1"), {}),
    ("c04", "R2", 14 * 60, "beta", dict(input_tokens=400, cache_read_tokens=500, cache_write_tokens=100,
                                        output_tokens=50), ("greet", "2"), {}),
    ("c05", "R2a", 15 * 60 + 10, "beta", dict(input_tokens=12000, cache_read_tokens=3000, output_tokens=200),
     ("greet", "2"), {}),
    ("c06", "R2a", 15 * 60 + 11, "beta", {}, ("greet", "2"), {"settled": False}),
    ("c07", "R3", 24 * 60, "alpha", dict(input_tokens=500, cache_write_tokens=1500, output_tokens=60),
     ("summarize", "2"), {}),
    ("c08", "R3", 24 * 60 + 1, "alpha", dict(input_tokens=2000, output_tokens=70), ("summarize", "2"), {}),
    ("c09", "R4", 48 * 60, "alpha", dict(input_tokens=100, cache_read_tokens=1500, output_tokens=20),
     ("summarize", "2"), {"replayed": True}),
    ("c10", "R4", 48 * 60 + 1, "mystery", dict(input_tokens=300, output_tokens=30), ("summarize", "2"), {}),
    ("c11", None, 48 * 60 + 5, "alpha", dict(input_tokens=10, output_tokens=5), (None, None), {}),
]
# one prompt whose calls were priced in two currencies, with a replayed and an unpriced call
TWO_CURRENCIES = [
    ("d01", "R1", 0, "alpha", dict(input_tokens=1000, cache_write_tokens=2000, output_tokens=100), ("greet", "1"), {}),
    ("d02", "R1", 1, "alpha", dict(input_tokens=50, cache_read_tokens=2000, output_tokens=80), ("greet", "1"), {}),
    ("d03", "R1", 2, "alpha", dict(input_tokens=20, cache_read_tokens=1000, output_tokens=10), ("greet", "1"), {}),
    ("d04", "R1", 3, "alpha", dict(input_tokens=10, cache_read_tokens=900, output_tokens=10), ("greet", "1"),
     {"replayed": True}),
    ("d05", "R2", 14 * 60, "gamma", dict(input_tokens=300, cache_write_tokens=700, output_tokens=50), ("greet", "1"), {}),
    ("d06", "R2", 14 * 60 + 1, "gamma", dict(input_tokens=40, cache_read_tokens=3000, output_tokens=60),
     ("greet", "1"), {}),
    ("d07", "R2", 14 * 60 + 2, "mystery", dict(input_tokens=300, cache_read_tokens=100, output_tokens=30),
     ("greet", "1"), {}),
]
# run id, parent, name, status, error code, minutes after DAY1, tags, prompt
RUNS = [
    ("R1", None, "chat-app", "ok", None, 0, {"env": "prod", "team": "a"}, ("greet", "1")),
    ("R2", None, "chat-app", "failed", "WB_PROVIDER_ERROR", 14 * 60, {"env": "prod"}, ("greet", "2")),
    ("R2a", "R2", "agent", "failed", "WB_AGENT_MAX_TURNS", 15 * 60, {}, ("greet", "2")),
    ("R3", None, "batch", "failed", "WB_AGENT_DEADLINE", 24 * 60, {"env": "dev"}, ("summarize", "2")),
    ("R4", None, "batch", "ok", None, 48 * 60, {"env": "dev"}, ("summarize", "2")),
    ("R5", None, "chat-app", "running", None, 49 * 60, {}, (None, None)),
]
# compaction id, run id, minutes, outcome, before, after, summarised, kept, cost
COMPACTIONS = [
    ("x1", "R1", 1, "ok", 9000, 2000, 6, 2, 150_000_000),
    ("x2", "R1", 2, "ok", 8000, 1500, 5, 2, 120_000_000),
    ("x3", "R2a", 15 * 60 + 5, "ok", 20000, 4000, 10, 3, 90_000_001),
    ("x4", "R3", 24 * 60 + 1, "error", 30000, 30000, 0, 12, 40_000_000),
]


def _at(minutes: int) -> datetime:
    return DAY1 + timedelta(minutes=minutes)


def call_rows(calls: list[tuple] = CALLS) -> list[dict]:
    rows = []
    for call_id, run_id, minutes, model, usage, (prompt_id, version), flags in calls:
        settled = flags.get("settled", True)
        usage = {name: value * TOKENS for name, value in usage.items()}
        priced = price_with(SPECS[model], Usage(**usage)) if settled and model in SPECS else None
        rows.append({
            "call_id": call_id, "run_id": run_id, "trace_id": f"t-{run_id}", "span_id": f"s-{call_id}",
            "parent_span_id": f"s-{run_id}" if run_id else None, "wire": WIRES[model], "provider": PROVIDERS[model],
            "url": "https://example.invalid/v1", "method": "POST", "model_requested": model, "model_served": model,
            "stream": False, "http_status": 200 if settled else None, "stop_reason": "stop" if settled else None,
            "error_type": None if settled else "transport_error", "settled": settled,
            "replayed": flags.get("replayed", False), "cassette": None,
            **{name: usage.get(name, 0) for name in ("input_tokens", "cache_read_tokens", "cache_write_tokens",
                                                     "output_tokens", "reasoning_tokens", "cache_write_1h_tokens")},
            "cost_micros": priced.cost_micros if priced else None, "currency": priced.currency if priced else None,
            "price_source": priced.price_source if priced else None,
            "started_at": _at(minutes).isoformat(),
            "first_byte_at": (_at(minutes) + timedelta(milliseconds=flags.get("ttfb_ms", 400))).isoformat(),
            "ended_at": (_at(minutes) + timedelta(milliseconds=flags.get("duration_ms", 2000))).isoformat(),
            "prompt_id": prompt_id, "prompt_version": version, "tool_names": [],
        })
    return rows


def subtree(run_id: str, runs: list[tuple] = RUNS) -> set[str]:
    found = {run_id}
    for child, parent, *_ in runs:
        if parent == run_id:
            found |= subtree(child, runs)
    return found


def run_rows(calls: list[dict], runs: list[tuple] = RUNS) -> list[dict]:
    """The runs with their bills, computed here from the calls: live calls paid, replayed ones apart."""
    rows = []
    for run_id, parent, name, status, code, minutes, tags, (prompt_id, version) in runs:
        inside = [c for c in calls if c["run_id"] in subtree(run_id, runs)]
        answered = [c for c in inside if c["settled"] and not c["replayed"]]  # paid
        replayed = [c for c in inside if c["settled"] and c["replayed"]]  # counted apart
        bill = {
            "billed_input_tokens": sum(c["input_tokens"] for c in answered),
            "billed_cache_read_tokens": sum(c["cache_read_tokens"] for c in answered),
            "billed_cache_write_tokens": sum(c["cache_write_tokens"] for c in answered),
            "billed_output_tokens": sum(c["output_tokens"] for c in answered),
            "billed_reasoning_tokens": 0,
            "billed_cost_micros": sum(c["cost_micros"] or 0 for c in answered),
            "billed_unpriced_calls": sum(1 for c in answered if c["cost_micros"] is None),
            "billed_calls": len(answered), "billed_unsettled": sum(1 for c in inside if not c["settled"]),
            "billed_replayed_calls": len(replayed),
            "billed_replayed_cost_micros": sum(c["cost_micros"] or 0 for c in replayed),
            "billed_replayed_unpriced_calls": sum(1 for c in replayed if c["cost_micros"] is None),
            # as the runtime writes it: the currency of the run's first priced call
            "billed_currency": next((c["currency"] for c in answered + replayed if c["currency"]), "USD"),
        } if inside else {}
        rows.append({
            "run_id": run_id, "parent_run_id": parent, "name": name, "kind": "agent" if parent else "app",
            "status": status, "error_code": code, "error_type": "WorkbenchError" if code else None,
            "error_message": f"{code} happened" if code else None, "started_at": _at(minutes).isoformat(),
            "ended_at": None if status == "running" else (_at(minutes) + timedelta(minutes=5)).isoformat(),
            "tags": json.dumps(tags), "trace_id": f"t-{run_id}", "span_id": f"s-{run_id}",
            "prompt_id": prompt_id, "prompt_version": version, **bill,
        })
    return rows


def _bodies() -> list[dict]:
    system = {"role": "system", "content": "You greet people."}
    ask = {"role": "user", "content": "Say hello to Ada"}
    tool_call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "tc1", "type": "function", "function": {"name": "lookup_person", "arguments": "{\"name\": \"Ada\"}"}}]}
    result = {"role": "tool", "tool_call_id": "tc1", "content": "Ada Lovelace, mathematician"}
    return [
        {"call_id": "c01", "request_json": json.dumps({"model": "alpha", "messages": [system, ask]}),
         "response_json": "{}", "output_text": None,
         "tool_calls": json.dumps([{"id": "tc1", "name": "lookup_person", "arguments": "{\"name\": \"Ada\"}"}])},
        {"call_id": "c02", "request_json": json.dumps({"model": "alpha", "messages": [system, ask, tool_call, result]}),
         "response_json": "{}", "output_text": "Hello, Ada Lovelace!", "tool_calls": None},
        {"call_id": "c04", "request_json": json.dumps({"model": "beta", "system": "Be brief.", "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Greet Grace"}]}]}),
         "response_json": "{}", "output_text": "Hi Grace.", "tool_calls": None},
    ]


def _spans() -> list[dict]:
    rows = [{"span_id": "s-R1", "trace_id": "t-R1", "parent_span_id": None, "name": "run chat-app", "kind": "INTERNAL",
             "run_id": "R1", "start_time": _at(0).isoformat(), "end_time": (_at(5)).isoformat(), "status_code": "OK"}]
    for call_id, minutes in (("c01", 0), ("c02", 1), ("c03", 2)):
        rows.append({"span_id": f"s-{call_id}", "trace_id": "t-R1", "parent_span_id": "s-R1", "name": "chat alpha",
                     "kind": "CLIENT", "run_id": "R1", "start_time": _at(minutes).isoformat(),
                     "end_time": (_at(minutes) + timedelta(seconds=2)).isoformat(), "status_code": "OK"})
    return rows


EVAL_RUNS = [
    {"eval_run_id": "E1", "suite": "greeting", "prompt_id": "greet", "prompt_version": "1", "prompt_hash": "wb1:aa",
     "model": "alpha", "mode": "replay", "git_commit": "abc123", "started_at": _at(60).isoformat(),
     "mean_score": 0.9, "baseline_mean": 0.9, "verdict": "pass", "cost_micros": 3_000_000},
    {"eval_run_id": "E2", "suite": "greeting", "prompt_id": "greet", "prompt_version": "2", "prompt_hash": "wb1:bb",
     "model": "alpha", "mode": "replay", "git_commit": "def456", "started_at": _at(24 * 60 + 60).isoformat(),
     "mean_score": 0.6, "baseline_mean": 0.9, "verdict": "regression", "cost_micros": 4_500_000},
]
EVAL_RESULTS = [
    {"eval_run_id": run, "case_id": case, "score": score, "baseline_score": base, "delta": score - base,
     "passed": score >= base - 0.05, "cost_micros": cost, "output": f"out {case}", "run_id": None}
    for run, case, score, base, cost in [
        ("E1", "ada", 1.0, 1.0, 1_000_000), ("E1", "grace", 0.7, 0.7, 1_000_000), ("E1", "alan", 1.0, 1.0, 1_000_000),
        ("E2", "ada", 1.0, 1.0, 1_500_000), ("E2", "grace", 0.1, 0.7, 1_500_000), ("E2", "alan", 0.7, 1.0, 1_500_000),
    ]
]


# a `workbench eval compare` of prompt greet 1 and 2 on alpha and beta, 2 samples a case; M1 the reference
# cell id, version, model, cost per sample, live latencies (ms) or None (replayed), case outputs and scores
MATRIX_CELLS = [
    ("M1", "1", "alpha", 1_000_001, None, {"ada": ("Hello Ada", [1.0, 1.0]), "grace": ("Hi Grace", [1.0, 1.0])}),
    ("M2", "2", "alpha", 2_000_000, None, {"ada": ("Hello Ada", [1.0, 1.0]), "grace": ("Bye Grace", [0.0, 0.0])}),
    ("M3", "1", "beta", 500_000, [40.0, 10.0, 30.0, 20.0],
     {"ada": ("Hello, Ada!", [1.0, 1.0]), "grace": ("Hi Grace", [1.0, 0.0])}),
]
# what `workbench eval compare` judged against M1 (one-sided Welch): grace on M2 fell 1 -> 0 with no
# noise on either side (p 0: worse); on M3 it fell 1 -> 0.5 with a spread of 0.71 (p 0.25: noise)
MATRIX_JUDGED = {("M2", "grace"): (0.0, False), ("M3", "grace"): (0.25, True)}


def _matrix_rows() -> tuple[list[dict], list[dict], list[dict]]:
    runs, results, samples = [], [], []
    reference = {case: scores for case, (_, scores) in MATRIX_CELLS[0][5].items()}
    for index, (run_id, version, model, cost, latencies, cases) in enumerate(MATRIX_CELLS):
        runs.append({"eval_run_id": run_id, "suite": "greeting", "prompt_id": "greet", "prompt_version": version,
                     "prompt_hash": f"wb1:{version}", "model": model, "mode": "replay" if latencies is None else "record",
                     "started_at": _at(72 * 60 + index).isoformat(), "verdict": "compared", "epochs": 2,
                     "tolerance": 0.05, "confidence": 0.95, "cases": 2, "errored_cases": 0, "matrix_id": "MX",
                     "matrix_reference": index == 0, "cost_micros": cost * 4,
                     "mean_score": sum(sum(s) / 2 for _, s in cases.values()) / 2})
        for case, (output, scores) in cases.items():
            p_value, passed = MATRIX_JUDGED.get((run_id, case), (None, True))
            results.append({"eval_run_id": run_id, "case_id": case, "score": sum(scores) / 2,
                            "baseline_score": sum(reference[case]) / 2, "delta": sum(scores) / 2 - sum(reference[case]) / 2,
                            "passed": passed, "samples": 2, "spread": 0.707107 if len(set(scores)) > 1 else 0.0,
                            "p_value": p_value, "cost_micros": cost * 2, "output": output})
            for epoch, score in enumerate(scores, start=1):
                live = latencies is not None
                samples.append({"eval_run_id": run_id, "case_id": case, "epoch": epoch, "score": score,
                                "cost_micros": cost, "live": live, "output": output,
                                "latency_ms": latencies[(epoch - 1) * 2 + (case == "grace")] if live else 0.5})
    return runs, results, samples


def build(path: Path, evals: bool = True, calls: list[tuple] = CALLS, runs: list[tuple] = RUNS,
          compactions: list[tuple] = COMPACTIONS) -> Path:
    """The store: these calls, runs and compactions (the fixed ones above by default)."""
    call_dicts = call_rows(calls)
    with open_store(path) as con:
        write_rows(con, "model", [{"price_source": f"{s.id}@{s.as_of.isoformat()}", "id": s.id, "provider": s.provider,
                                   "spec": s.model_dump_json()} for s in SPECS.values()])
        write_rows(con, "run", run_rows(call_dicts, runs))
        write_rows(con, "run_tag", [{"run_id": r[0], "key": k, "value": v} for r in runs for k, v in r[6].items()])
        write_rows(con, "call", call_dicts)
        write_rows(con, "call_body", _bodies())
        write_rows(con, "span", _spans())
        write_rows(con, "compaction", [
            {"compaction_id": cid, "run_id": run, "occurred_at": _at(m).isoformat(), "turn": 3, "outcome": outcome,
             "tokens_before": before, "tokens_after": after, "limit_tokens": 32000, "summarised_turns": summ,
             "kept_turns": kept, "model": "alpha", "cost_micros": cost}
            for cid, run, m, outcome, before, after, summ, kept, cost in compactions])
        if evals:
            write_rows(con, "eval_run", EVAL_RUNS)
            write_rows(con, "eval_result", EVAL_RESULTS)
            matrix_runs, matrix_results, matrix_samples = _matrix_rows()
            write_rows(con, "eval_run", matrix_runs)
            write_rows(con, "eval_result", matrix_results)
            write_rows(con, "eval_sample", matrix_samples)
    return path


def build_two_currency_compactions(path: Path) -> Path:
    """`TWO_CURRENCIES`' store with compactions whose summary calls were priced in dollars and in euros
    (and one unpriced), x2 (EUR) and x4 (USD) on the same day with the same outcome."""
    build(path, evals=False, calls=TWO_CURRENCIES, compactions=[])
    with open_store(path) as con:
        write_rows(con, "compaction", [
            {"compaction_id": cid, "run_id": run, "occurred_at": _at(minutes).isoformat(), "turn": 3,
             "outcome": "ok", "tokens_before": 9000, "tokens_after": 2000, "summarised_turns": 6, "kept_turns": 2,
             "model": model, "cost_micros": cost, "summary_call_id": call, "summary_currency": currency}
            for cid, run, minutes, model, cost, call, currency in [
                ("x1", "R1", 1, "alpha", 150_000_000, "d02", "USD"), ("x2", "R2", 14 * 60 + 1, "gamma", 70_000_000, "d06", "EUR"),
                ("x3", "R2", 14 * 60 + 2, "mystery", None, "d07", None),
                ("x4", "R2", 14 * 60 + 3, "alpha", 5_000_000, "d08", "USD")]])
    return path
