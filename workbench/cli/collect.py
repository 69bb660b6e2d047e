"""`workbench collect`: the OTLP/HTTP receiver for apps in any language."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from workbench.cli.core import DbOption, app, console


@app.command("collect")
def collect(
    port: Annotated[int, typer.Option(min=0, max=65535, help="the port to listen on (0: any free one)")] = 4318,
    host: Annotated[str, typer.Option(help="the address to listen on; beyond loopback, WORKBENCH_COLLECT_TOKEN "
                                           "is required")] = "127.0.0.1",
    db: DbOption = None,
) -> None:
    """Receive OpenTelemetry traces (OTLP/HTTP, protobuf or JSON) and record their GenAI spans as
    calls, runs, turns and compactions, priced by Workbench's prices. Ctrl-C stops it."""
    from workbench.capture.collector import serve
    from workbench.capture.recorder import configure, recorder

    from workbench.models import load_registry

    if db is not None:
        configure(db=db)
    models = recorder().settings.models
    if models.is_file():
        load_registry(models)  # a broken models.toml is an error here, not every call left unpriced
    server = serve(recorder(), host, port)
    bound_host, bound_port = server.server_address[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    console.print(f"workbench collect is listening on http://{shown}:{bound_port}/v1/traces "
                  f"(store: {recorder().settings.db}); Ctrl-C stops it.\n"
                  f"Point any OpenTelemetry exporter at it: OTEL_EXPORTER_OTLP_ENDPOINT=http://{shown}:{bound_port}",
                  soft_wrap=True)
    sys.stdout.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        recorder().spool.flush(ingest=False)
