"""The `workbench` command: thin; every command is a call into a stage. One module per command
group; `core` holds the tree, the output conventions and the error rendering."""

from __future__ import annotations

from workbench.cli import cassettes, collect, evals, models, project, reports, store  # noqa: F401 - each registers its commands
from workbench.cli.core import app, main
from workbench.cli.project import dashboard_app

__all__ = ["app", "dashboard_app", "main"]
