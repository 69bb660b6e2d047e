"""Every page's help text names the real API: each `workbench.name(...)` or `name(...)` a page shows
is in Workbench's public API, and each `workbench command --option` is a command with that option."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import typer

import workbench
from workbench.cli import app

DASHBOARDS = Path(__file__).resolve().parents[2] / "dashboards"
SPAN = re.compile(r"`([^`\n]+)`|```\n([^`]+)\n```")


def shown_strings(path: Path) -> list[str]:
    """The string literals of a page (f-strings' literal parts included), docstrings left out."""
    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and node.body
                  and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return [node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


def mentions() -> list[tuple[str, str]]:
    """(page, code) for every command (`workbench ...`) and every call (`workbench.name(...)`,
    `name(...)`) in the code spans a page shows."""
    found = []
    for path in sorted(DASHBOARDS.glob("*.py")):
        text = "\n".join(shown_strings(path))
        for inline, block in SPAN.findall(text):
            code = (inline or block).strip()
            calls = re.findall(r"workbench\.\w+\(", code) or re.findall(r"^\w+\(", code)
            found += [(path.name, code)] if code.startswith("workbench ") else [(path.name, c) for c in calls]
    return found


def command_of(words: list[str]):
    """The command `workbench <words>` runs, and the words left for it."""
    command = typer.main.get_command(app)
    rest = list(words)
    while rest and rest[0] in getattr(command, "commands", {}):
        command = command.commands[rest.pop(0)]
    if "run" in getattr(command, "commands", {}):  # `workbench eval --...` runs suites
        command = command.commands["run"]
    return command, rest


def test_the_pages_mention_the_api_at_all():
    codes = [code for _, code in mentions()]
    assert {"workbench.Agent(", "workbench.http_client(", "workbench.run(", "workbench demo"} <= set(codes)


@pytest.mark.parametrize(("page", "code"), mentions())
def test_every_api_a_page_names_exists(page, code):
    if code.startswith("workbench "):
        command, rest = command_of(code.split()[1:])
        assert command.name != "workbench", f"{page}: `{code}` is not a command"
        options = {name for param in command.params for name in param.opts}
        missing = [word for word in rest if word.startswith("--") and word.split("=")[0] not in options]
        assert not missing, f"{page}: `{code}`: {command.name} has no {missing}"
        return
    name = re.match(r"(?:workbench\.)?(\w+)", code).group(1)
    assert name in workbench.__all__, f"{page}: `{code}` names {name!r}, which is not in workbench's public API"
