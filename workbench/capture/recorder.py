"""The recorder: turns a finished exchange into a priced, attributed `Call`, ends its span, and
hands the rows to the spool. Every step is fail-open: a failure is logged and counted, never
raised into the application."""

from __future__ import annotations

import json
import logging
import threading
from datetime import datetime

from opentelemetry import trace

from workbench.ids import new_id
from workbench.capture import semconv
from workbench.capture.runs import Run, current_run
from workbench.config import Settings, load_settings
from workbench.models import ModelRegistry, load_registry
from workbench.store.spool import Spool, spool_for
from workbench.wire import Call, Exchange, parse_exchange, priced
from workbench.wire.canonical import request_hash as hash_request
from workbench.wire.redact import REDACTED

log = logging.getLogger("workbench.capture")

_CALL_BODY_FIELDS = ("request_json", "response_json", "output_text", "tool_calls")


class Recorder:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.spool: Spool = spool_for(settings.db, settings.resolved_spool_dir, settings.flush_interval_s)
        self.registry: ModelRegistry = load_registry(settings.models if settings.models.is_file() else None)
        self._models_seen: set[str] = set()

    def call_of(self, exchange: Exchange) -> Call:
        return priced(parse_exchange(exchange, self.settings.body_cap_bytes, hash_request=False), self.registry)

    def record_call(
        self,
        exchange: Exchange,
        run: Run | None,
        span: trace.Span | None,
        times: tuple[datetime, datetime | None, datetime],
        replayed: bool = False,
        cassette: str | None = None,
        error: str | None = None,
        request_hash: str | None = None,
    ) -> Call | None:
        """Parse, price, attribute and spool one call; returns it (None if recording failed)."""
        try:
            call = self.call_of(exchange)
            call.call_id = new_id()
            call.started_at, call.first_byte_at, call.ended_at = times
            call.replayed, call.cassette = replayed, cassette
            # what the transport saw (a cut, an abandoned stream) explains a half body the parser
            # could not read; a provider's own error type is kept
            if error and call.error_type in (None, "unparseable"):
                call.error_type = error
            if run is not None:
                call.run_id = run.run_id
                call.prompt_id = run.prompt.get("prompt_id")
                call.prompt_version = run.prompt.get("prompt_version")
                call.prompt_hash = run.prompt.get("prompt_hash")
            if span is not None:
                context = span.get_span_context()
                call.trace_id, call.span_id = format(context.trace_id, "032x"), format(context.span_id, "016x")
                parent = getattr(span, "parent", None)
                call.parent_span_id = format(parent.span_id, "016x") if parent else None
            if run is not None:
                run.attribute(call)  # the bill is exact the moment the call ends

            known_hash = request_hash

            def finish() -> None:  # on the spool thread: what no caller waits for
                call.request_hash = known_hash or hash_request(exchange.method, exchange.url, exchange.request_body)
                if span is not None:
                    _end_span(span, call)
                self._spool_call(call)

            self.spool.defer(finish)
            return call
        except Exception as exc:  # noqa: BLE001 - recording never breaks the application
            self.spool.stats["record_errors"] += 1
            log.warning("workbench could not record a call: %s", exc, exc_info=True)
            if span is not None and span.is_recording():
                span.end()
            return None

    def _spool_call(self, call: Call) -> None:
        row = call.flat()
        body = {name: row.pop(name) for name in _CALL_BODY_FIELDS}
        body["tool_calls"] = json.dumps(body["tool_calls"]) if body["tool_calls"] else None
        body["call_id"] = call.call_id
        row["tool_names"] = [tool.name for tool in call.tool_calls]
        self.spool.append("call", row)
        self.spool.append("call_body", body)
        if call.price_source and call.price_source not in self._models_seen:
            self._models_seen.add(call.price_source)
            spec = self.registry.find(call.model_served) or self.registry.find(call.model_requested)
            if spec is not None:
                self.spool.append(
                    "model",
                    {"price_source": call.price_source, "id": spec.id, "provider": spec.provider,
                     "spec": spec.model_dump_json()},
                )

    def record_run(self, run: Run) -> None:
        try:
            self.spool.append("run", run.row())
            if run.status == "running":
                for key, value in run.tags.items():
                    self.spool.append("run_tag", {"run_id": run.run_id, "key": key, "value": value})
        except Exception as exc:  # noqa: BLE001
            log.warning("workbench could not record run %s: %s", run.name, exc)

    def record_compaction(self, run: Run | None, span: trace.Span, attributes: dict) -> None:
        context = span.get_span_context()
        row = {
            "compaction_id": new_id(), "run_id": run.run_id if run else None,
            "span_id": format(context.span_id, "016x") if context.is_valid else None,
            "occurred_at": datetime.now().astimezone().isoformat(),
            "limit_tokens": attributes.get("limit"),
        }
        for name in ("turn", "outcome", "tokens_before", "tokens_after", "summarised_turns", "kept_turns",
                     "model", "cost_micros"):
            row[name] = attributes.get(name)
        self.spool.append("compaction", row)


def _end_span(span: trace.Span, call: Call) -> None:
    if not span.is_recording():
        return
    usage = call.usage
    model = call.model_served or call.model_requested
    if model and call.model_requested is None:
        span.update_name(f"chat {model}")
    attributes = {
        semconv.PROVIDER_NAME: call.provider,
        semconv.RESPONSE_MODEL: call.model_served,
        semconv.RESPONSE_ID: call.response_id,
        semconv.HTTP_STATUS: call.http_status,
        semconv.REPLAYED: call.replayed,
        semconv.CALL_ID: call.call_id,
        semconv.SETTLED: call.settled,
    }
    if call.stop_reason:
        attributes[semconv.FINISH_REASONS] = [call.stop_reason]
    if call.settled:
        attributes.update({
            semconv.USAGE_INPUT: usage.total_input,  # OpenTelemetry counts cached input in
            semconv.USAGE_OUTPUT: usage.output_tokens,
            semconv.USAGE_CACHE_READ: usage.cache_read_tokens,
            semconv.USAGE_CACHE_CREATION: usage.cache_write_tokens,
            semconv.USAGE_REASONING: usage.reasoning_tokens,
        })
    if call.cost_micros is not None:
        attributes[semconv.COST_MICROS] = call.cost_micros
    if call.error_type:
        attributes[semconv.ERROR_TYPE] = call.error_type
        span.set_status(trace.Status(trace.StatusCode.ERROR, (call.error_message or call.error_type)[:200]))
    span.set_attributes({key: value for key, value in attributes.items() if value is not None})
    span.end(end_time=int(call.ended_at.timestamp() * 1e9) if call.ended_at else None)


_recorder: Recorder | None = None
_lock = threading.Lock()


def recorder() -> Recorder:
    global _recorder
    if _recorder is None:
        with _lock:
            if _recorder is None:
                _recorder = Recorder(load_settings())
    return _recorder


def configure(**overrides) -> Settings:
    """Re-read settings (with `overrides` as flags, e.g. `db=`) and record with them from now on."""
    global _recorder
    from workbench.store.spool import flush_all

    flush_all(ingest=True)
    with _lock:
        _recorder = Recorder(load_settings(**overrides))
    return _recorder.settings


def flush() -> None:
    """Write every pending record to the spool and ingest the spools into the store, now."""
    from workbench.store.ingest import ingest_spools

    active = recorder()
    active.spool.flush(ingest=False)
    ingest_spools(active.settings.db, active.settings.resolved_spool_dir, wait=True)


__all__ = ["REDACTED", "Recorder", "configure", "current_run", "flush", "recorder"]
