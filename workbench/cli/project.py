"""`workbench dashboard` and `workbench demo`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from workbench.cli.core import DbOption, app, console, err_console
from workbench.errors import WorkbenchError


def dashboard_app() -> Path | None:
    """The Streamlit app: `dashboards/` of a source checkout, else the copy a wheel ships."""
    package = Path(__file__).resolve().parents[1]  # workbench/
    for app_path in (package.parent / "dashboards" / "app.py", package / "_dashboards" / "app.py"):
        if app_path.is_file():
            return app_path
    return None


def _exposed_without_password(host: str) -> WorkbenchError | None:
    """Beyond loopback, the dashboard shows every prompt, answer and bill to the network: only
    behind a password the user set (never a default), long enough not to be guessed."""
    import os

    from workbench.capture.collector import is_loopback
    from workbench.config import DASHBOARD_PASSWORD_ENV as PASSWORD_ENV

    password = os.environ.get(PASSWORD_ENV, "")
    if is_loopback(host) or len(password) >= 12:
        return None
    make = "export WORKBENCH_DASHBOARD_PASSWORD=\"$(python -c 'import secrets; print(secrets.token_urlsafe(18))')\""
    cause = (f"--host {host} would show every recorded prompt, answer and bill to the network, and "
             + (f"{PASSWORD_ENV} is only {len(password)} characters long" if password else f"{PASSWORD_ENV} is not set"))
    return WorkbenchError("WB_DASHBOARD_EXPOSED", cause,
                          f"set a password of 12 characters or more (`{make}`), or leave --host out to serve on "
                          "127.0.0.1 only")


@app.command("dashboard")
def dashboard(
    db: DbOption = None,
    port: Annotated[int, typer.Option(min=1, max=65535, help="the port to serve on")] = 8501,
    host: Annotated[str, typer.Option(help="the address to listen on; anything but this machine needs "
                                           "WORKBENCH_DASHBOARD_PASSWORD set (every page then asks for it)")] = "127.0.0.1",
    open_browser: Annotated[bool, typer.Option("--open/--no-open", help="open a browser tab")] = False,
) -> None:
    """Serve the Streamlit dashboard over the store; it never holds the store open between reads."""
    import os
    import subprocess

    problem = _exposed_without_password(host)
    if problem is not None:
        raise problem
    app_path = dashboard_app()
    if app_path is None:
        raise WorkbenchError("WB_PATH_INVALID", "the dashboard app is missing from this installation",
                             "reinstall replay-workbench: pip install --force-reinstall replay-workbench")
    env = dict(os.environ)
    if db is not None:
        env["WORKBENCH_DB"] = str(db.resolve())
    # _server.py imports what every page needs before the server answers (a first page paints at once)
    command = [sys.executable, str(app_path.with_name("_server.py")), "run", str(app_path), "--server.address", host,
               "--server.port", str(port), "--server.headless", str(not open_browser).lower(),
               "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none",
               "--client.toolbarMode", "viewer",
               # no page writes a bare expression: its script need not be rewritten for "magic" on its first run
               "--runner.magicEnabled", "false",
               # streamlit guesses "development mode" (which refuses --server.port) when it is not
               # installed under a site-packages folder (a zipapp, a vendored or linked copy)
               "--global.developmentMode", "false"]
    if os.name == "posix":  # become the server: signals (Ctrl-C, a supervisor's TERM) reach it directly
        os.execve(sys.executable, command, env)
    try:
        raise typer.Exit(subprocess.call(command, env=env))
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


@app.command("demo")
def demo_command(
    seed: Annotated[int, typer.Option(help="the same seed gives the same figures")] = 7,
    db: DbOption = None,
) -> None:
    """Run a realistic workload against an embedded fake provider (no key, no network), gate the
    example suites, and summarize what the store now holds."""
    from workbench.config import load_settings
    from workbench.demo.run import print_summary, run_demo

    summary = run_demo(seed, db, err_console)
    print_summary(summary, db or load_settings().db, console, db)




FAKE_KEY = "sk-fake-workbench"  # any value: the fake provider never checks it


@app.command("fake-provider")
def fake_provider_command(
    port: Annotated[int, typer.Option(min=0, max=65535, help="the port on 127.0.0.1 (0: any free one)")] = 8765,
) -> None:
    """Serve the offline fake provider (OpenAI, Anthropic and Gemini, JSON and streaming) on 127.0.0.1."""
    # it answers the example prompts as the demo does, so `workbench eval --mode live` passes on it
    import threading

    from workbench.demo.answers import respond
    from workbench.demo.fake_provider import FakeProvider
    from workbench.demo.fake_server import FakeServer

    try:
        server = FakeServer(FakeProvider(responder=respond), port)
    except OSError as exc:
        raise WorkbenchError(
            "WB_PORT_UNAVAILABLE", f"cannot serve on 127.0.0.1:{port}: {exc.strerror or exc}",
            "pick another port: workbench fake-provider --port 0 (any free one)",
        ) from None
    console.print(f"The fake provider is serving on {server.url}: offline, any key works; Ctrl-C stops it.\n"
                  "Point the official SDKs (and Workbench's runtime) at it:\n")
    console.print(f"export OPENAI_BASE_URL={server.url}/v1 OPENAI_API_KEY={FAKE_KEY}\n"
                  f"export ANTHROPIC_BASE_URL={server.url} ANTHROPIC_API_KEY={FAKE_KEY}\n"
                  f"export GOOGLE_GEMINI_BASE_URL={server.url} GEMINI_API_KEY={FAKE_KEY}", soft_wrap=True)
    sys.stdout.flush()
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
