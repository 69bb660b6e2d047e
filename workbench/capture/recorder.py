"""The recorder: turns a finished exchange into a priced, attributed `Call` and its span, and
hands the rows to the spool. Every step is fail-open: a failure is logged and counted, never
raised into the application."""

from __future__ import annotations

import json
import logging
import threading
from datetime import datetime, timezone
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from opentelemetry import trace

from workbench.ids import new_id
from workbench.capture import clock, semconv
from workbench.insight import prefix
from workbench.capture.runs import Run, current_run
from workbench.capture.tracing import ended_span, remember_sent, spans_stored_only
from workbench.config import Settings, load_settings_leniently, work_dir_of
from workbench.errors import WorkbenchError
from workbench.models import ModelRegistry, load_registry, registry
from workbench.prices import AT_INGESTION, LibraryNotLoaded, deferring, unloaded, use_lookups, warm_up
from workbench.store.spool import Spool, spool_for
from workbench.wire import Call, Exchange, masked_call, parse_exchange, priced
from workbench.wire.canonical import request_hash as hash_request
from workbench.wire.redact import REDACTED, credential_values, mask_secrets

if TYPE_CHECKING:
    from workbench.capture.transport import Pending

log = logging.getLogger("workbench.capture")

_CALL_BODY_FIELDS = ("request_json", "response_json", "output_text", "tool_calls")


class Recorder:
    def __init__(self, settings: Settings, problems: list[str] | None = None) -> None:
        """A recorder never fails the application: a setting that does not validate fell back to
        its default (`problems`), and a price file that cannot be read leaves the calls unpriced;
        either is logged once, here."""
        problems = list(problems or [])
        self.settings = settings
        self.spool: Spool = spool_for(settings.db, settings.resolved_spool_dir, settings.flush_interval_s)
        self.registry: ModelRegistry = registry
        try:
            if settings.models.is_file():
                self.registry = load_registry(settings.models)
        except (WorkbenchError, OSError) as exc:
            problems.append(f"{getattr(exc, 'cause', exc)}: its rows are not used, calls they would price are unpriced")
        if problems:
            log.warning("workbench records with problems (fix them to silence this): %s", "; ".join(problems))
        self._models_seen: set[str] = set()
        # the last request's headers and URL with their credential values: a provider sends the
        # same ones on every call, so they are read once (an immutable tuple: threads may share it)
        self._last_credentials: tuple[tuple, str, tuple[str, ...]] | None = None
        use_lookups(work_dir_of(settings.db))  # the library's answers kept by earlier processes
        if not self.registry.rows():  # no project price at all: every call will need the price library, so
            warm_up()                 # it loads while the first calls are in flight (else on its first use)

    def record_call(self, pending: Pending) -> Call | None:
        """Record one finished call. A call inside a run is parsed and priced at once, because the
        run's bill is exact the moment the call ends, and returned; everything else (parsing a call
        no run waits for, the span, the request hash, the rows) is left to the spool thread."""
        try:
            call = None
            if pending.run is not None:
                call = self._call(pending)
                pending.run.attribute(call, self._credentials(pending))
            self.spool.defer(lambda: self._finish(pending, call))
            return call
        except Exception as exc:  # noqa: BLE001 - recording never breaks the application
            self.spool.stats["record_errors"] += 1
            log.warning("workbench could not record a call: %s", exc, exc_info=True)
            return None

    def _call(self, pending: Pending, leave_library: bool = False) -> Call:
        """The parsed, priced call. `leave_library`: no one in this process reads its cost, so a
        price that would load the price library is left to the ingester (`AT_INGESTION`)."""
        exchange, error = pending.exchange()
        call = parse_exchange(exchange, self.settings.body_cap_bytes, hash_request=False)
        call.call_id = new_id()
        call.started_at, call.ended_at = _time(pending.started_ns), _time(pending.ended_ns)
        call.first_byte_at = _time(pending.first_byte_ns) if pending.first_byte_ns else None
        if leave_library:
            try:
                with unloaded():
                    priced(call, self.registry)  # at the price in force when the call started
            except LibraryNotLoaded:
                call.price_source = AT_INGESTION
        else:
            priced(call, self.registry)  # at the price in force when the call started
        call.replayed, call.cassette, call.request_hash = pending.replayed, pending.cassette, pending.request_hash
        call.resumed_from_call_id = pending.resumed_from_call_id
        # what the transport saw (a cut, an abandoned stream) explains a half body the parser could
        # not read; a provider's own error type is kept
        if error and call.error_type in (None, "unparseable"):
            call.error_type = error
        run = pending.run
        if run is not None:
            call.run_id = run.run_id
            call.prompt_id = run.prompt.get("prompt_id")
            call.prompt_version = run.prompt.get("prompt_version")
            call.prompt_hash = run.prompt.get("prompt_hash")
        return call

    def _finish(self, pending: Pending, call: Call | None) -> None:
        """On the spool thread: the call's span (started and ended at the call's own times, under
        the span that was current when it was sent), its request hash and its rows."""
        if call is None:  # no run waits for it; its span carries its cost unless the store alone sees the span
            call = self._call(pending, leave_library=deferring() and spans_stored_only())
        call = masked_call(call, self._credentials(pending))
        try:
            ids = _span(pending, call)
        except Exception as exc:  # noqa: BLE001 - a span we cannot make never costs the call's rows
            ids = None
            self.spool.note_failure("span", exc)
        if ids is not None:
            trace_id, span_id, parent_span_id = ids
            call.trace_id, call.span_id = format(trace_id, "032x"), format(span_id, "016x")
            call.parent_span_id = format(parent_span_id, "016x") if parent_span_id is not None else None
        if call.request_hash is None:
            call.request_hash = hash_request(pending.method, pending.url, pending.request_body)
        self.spool_call(call)
        # the cacheable prefix, from the full request bytes (the stored body is capped), for insight
        date = pending.response_headers.get("date") if pending.response_headers is not None else None
        found = prefix.captured(call.call_id, call.wire, call.model_requested, pending.request_body, date,
                                call.started_at.isoformat() if call.started_at else None, pending.replay_session)
        if found is not None:
            self.spool.append("call_prefix", found)

    def _credentials(self, pending: Pending) -> tuple[str, ...]:
        """The credential values the request sent, to be masked wherever they are echoed."""
        headers = tuple(pending.request_headers.multi_items()) if pending.request_headers is not None else ()
        last = self._last_credentials
        if last is not None and last[0] == headers and last[1] == pending.url:
            return last[2]
        values = tuple(credential_values(headers, pending.url))
        self._last_credentials = (headers, pending.url, values)
        remember_sent(values)
        return values

    def spool_call(self, call: Call) -> None:
        row = call.flat()
        body = {name: row.pop(name) for name in _CALL_BODY_FIELDS}
        body["tool_calls"] = json.dumps(body["tool_calls"]) if body["tool_calls"] else None
        body["call_id"] = call.call_id
        row["tool_names"] = [tool.name for tool in call.tool_calls]
        self.spool.append("call", row)
        self.spool.append("call_body", body)
        if call.price_source and call.price_source != AT_INGESTION and call.price_source not in self._models_seen:
            self._models_seen.add(call.price_source)
            sheet = self.registry.sheet_for(call)
            if sheet is not None:
                self.spool.append(
                    "model",
                    {"price_source": call.price_source, "id": sheet.id, "provider": sheet.provider,
                     "spec": sheet.model_dump_json()},
                )

    def record_run(self, run: Run) -> None:
        """Record a run as it starts (status `running`, its tags) or ends; the row is built on the
        spool thread, and a start whose run has ended by then is not written at all."""
        started = run.status == "running"
        try:
            self.spool.defer(lambda: self._spool_run(run, started))
        except Exception as exc:  # noqa: BLE001
            log.warning("workbench could not record run %s: %s", run.name, exc)

    def _spool_run(self, run: Run, started: bool) -> None:
        if started:
            for key, value in run.tags.items():
                self.spool.append("run_tag", {"run_id": run.run_id, "key": key, "value": value})
            if run.status != "running":
                return  # its end follows with the final row
        self.spool.append("run", run.row())

    def record_compaction(self, run: Run | None, span: trace.Span, attributes: dict) -> None:
        context = span.get_span_context()
        row = {
            "compaction_id": new_id(), "run_id": run.run_id if run else None,
            "span_id": format(context.span_id, "016x") if context.is_valid else None,
            "occurred_at": clock.now().isoformat(),
            "limit_tokens": attributes.get("limit"),
        }
        for name in ("turn", "outcome", "tokens_before", "tokens_after", "summarised_turns", "kept_turns",
                     "model", "cost_micros"):
            row[name] = attributes.get(name)
        self.spool.append("compaction", row)


def _time(nanos: int) -> datetime:
    return datetime.fromtimestamp(nanos / 1e9, tz=timezone.utc)


def _span(pending: Pending, call: Call) -> tuple[int, int, int | None] | None:
    """The call's CLIENT span with the GenAI attributes, ended: its trace, span and parent span ids;
    None when tracing does not record. Every attribute is given as the span starts (one pass of the
    SDK's attribute checks, not two), in the order they are stored."""
    model = call.model_requested or call.model_served
    operation = semconv.OPERATIONS.get(call.wire, "chat")
    usage = call.usage
    attributes = {
        semconv.OPERATION_NAME: operation,
        semconv.REQUEST_MODEL: call.model_requested or "",
        semconv.SERVER_ADDRESS: urlsplit(pending.url).hostname or "",
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
        attributes[semconv.CURRENCY] = call.currency or "USD"
    elif call.price_source == AT_INGESTION:  # in its place: the ingester writes the cost there, or drops it
        attributes[semconv.COST_MICROS] = AT_INGESTION
    if call.error_type:
        attributes[semconv.ERROR_TYPE] = call.error_type
    status = (trace.Status(trace.StatusCode.ERROR, (call.error_message or call.error_type)[:200])
              if call.error_type else None)
    return ended_span(pending.context, f"{operation} {model}" if model else operation, trace.SpanKind.CLIENT,
                      {key: value for key, value in attributes.items() if value is not None},
                      pending.started_ns, pending.ended_ns, status)


_recorder: Recorder | None = None
_lock = threading.Lock()


def recorder() -> Recorder:
    global _recorder
    if _recorder is None:
        with _lock:
            if _recorder is None:
                _recorder = Recorder(*load_settings_leniently())
    return _recorder


def configure(**overrides) -> Settings:
    """Re-read settings (with `overrides` as flags, e.g. `db=`) and record with them from now on."""
    global _recorder
    from workbench.store.spool import flush_all

    flush_all(ingest=True)
    with _lock:
        _recorder = Recorder(*load_settings_leniently(**overrides))
    return _recorder.settings


def flush() -> None:
    """Write every pending record to the spool and ingest the spools into the store, now. Never
    raises: a store that cannot be written (locked past the retry window, a full disk) is logged,
    and the spool keeps the records for the next ingestion."""
    try:
        recorder().spool.flush(ingest=True, wait=True)
    except Exception as exc:  # noqa: BLE001 - recording never breaks the application
        log.warning("workbench.flush() could not ingest (the spool keeps the records): %s", exc)


__all__ = ["REDACTED", "Recorder", "configure", "current_run", "flush", "recorder"]
