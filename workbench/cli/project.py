"""`workbench dashboard` and `workbench demo`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from workbench.cli.core import app, console, err_console

def dashboard_app() -> Path | None:
    """The Streamlit app: `dashboards/` of a source checkout, else the copy a wheel ships."""
    package = Path(__file__).resolve().parents[1]  # workbench/
    for app_path in (package.parent / "dashboards" / "app.py", package / "_dashboards" / "app.py"):
        if app_path.is_file():
            return app_path
    return None


@app.command("dashboard")
def dashboard(
    db: Annotated[Path | None, typer.Option(help="the store to show (default: the db setting)")] = None,
    port: Annotated[int, typer.Option(help="the port to serve on")] = 8501,
    open_browser: Annotated[bool, typer.Option("--open/--no-open", help="open a browser tab")] = False,
) -> None:
    """Serve the Streamlit dashboard over the store; it never holds the store open between reads."""
    import os
    import subprocess

    app_path = dashboard_app()
    if app_path is None:
        err_console.print("[bold red]the dashboard app is missing[/] from this installation\n[bold]fix:[/] "
                          "reinstall replay-workbench (`pip install --force-reinstall replay-workbench`)")
        raise typer.Exit(2)
    env = dict(os.environ)
    if db is not None:
        env["WORKBENCH_DB"] = str(db.resolve())
    command = [sys.executable, "-m", "streamlit", "run", str(app_path), "--server.port", str(port),
               "--server.headless", str(not open_browser).lower(), "--browser.gatherUsageStats", "false",
               "--server.fileWatcherType", "none", "--client.toolbarMode", "viewer"]
    if os.name == "posix":  # become the server: signals (Ctrl-C, a supervisor's TERM) reach it directly
        os.execve(sys.executable, command, env)
    try:
        raise typer.Exit(subprocess.call(command, env=env))
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


@app.command("demo")
def demo_command(
    seed: Annotated[int, typer.Option(help="the same seed gives the same figures")] = 7,
    db: Annotated[Path | None, typer.Option(help="the store to fill (default: the db setting)")] = None,
) -> None:
    """Run a realistic workload against an embedded fake provider (no key, no network), gate the
    example suites, and summarize what the store now holds."""
    from workbench.config import load_settings
    from workbench.demo.run import print_summary, run_demo

    summary = run_demo(seed, db, err_console)
    print_summary(summary, db or load_settings().db, console)


