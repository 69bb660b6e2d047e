"""The pipeline's import order, walked over the source: each layer imports only earlier layers."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# kernel + wire → store → insight → capture → replay → runtime → evaluate → cli, dashboards, demo
LAYERS = {
    "workbench.errors": 0, "workbench.money": 0, "workbench.models": 0, "workbench.prices": 0, "workbench.config": 0,
    "workbench.ids": 0, "workbench.locks": 0, "workbench.http_server": 0,
    "workbench.wire": 0, "workbench.store": 1, "workbench.insight": 2, "workbench.capture": 3, "workbench.replay": 4,
    "workbench.runtime": 5, "workbench.evaluate": 6, "workbench.cli": 7, "workbench.__main__": 7, "workbench.demo": 7,
    "dashboards": 7,
}


def layer_of(module: str) -> int | None:
    for prefix, layer in LAYERS.items():
        if module == prefix or module.startswith(prefix + "."):
            return layer
    return None


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def test_every_module_imports_only_earlier_layers():
    violations = []
    paths = [*ROOT.joinpath("workbench").rglob("*.py"), *ROOT.joinpath("dashboards").rglob("*.py")]
    for path in paths:
        name = module_name(path)
        own = layer_of(name)
        if own is None:  # workbench/__init__.py: the public API re-exports every layer lazily
            continue
        for imported in imports_of(path):
            other = layer_of(imported)
            if other is not None and other > own:
                violations.append(f"{name} (layer {own}) imports {imported} (layer {other})")
    assert not violations, "\n".join(violations)


def test_every_module_has_a_layer():
    names = [module_name(path) for path in ROOT.joinpath("workbench").rglob("*.py")]
    assert [name for name in names if name != "workbench" and layer_of(name) is None] == []
