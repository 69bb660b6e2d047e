"""`workbench cassettes check`: every cassette loads, holds nothing that looks like a secret, and
was fully played by the last replay run (an interaction never played is a stale recording)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from workbench.errors import WorkbenchError
from workbench.replay.cassette import load_cassette
from workbench.replay.scrub import find_secrets
from workbench.replay.session import played_record_path

CASSETTE_SUFFIXES = {".json", ".yaml", ".yml"}


@dataclass
class CassetteReport:
    path: Path
    interactions: int = 0
    error: WorkbenchError | None = None
    secrets: list[str] = field(default_factory=list)
    never_played: list[int] | None = None  # None: no replay run has used this cassette yet

    @property
    def ok(self) -> bool:
        return self.error is None and not self.secrets


def cassette_files(root: Path) -> list[Path]:
    root = Path(root)
    if root.is_file():
        return [root]
    if not root.exists():
        raise WorkbenchError("WB_CASSETTE_NOT_FOUND", f"{root} does not exist", "pass a cassette file or folder")
    return sorted(path for path in root.rglob("*") if path.suffix.lower() in CASSETTE_SUFFIXES and path.is_file())


def check_cassette(path: Path) -> CassetteReport:
    report = CassetteReport(path)
    try:
        interactions = load_cassette(path)
    except WorkbenchError as exc:
        report.error = exc
        return report
    report.interactions = len(interactions)
    for index, interaction in enumerate(interactions):
        report.secrets += [f"interaction {index}: {finding}" for finding in find_secrets(interaction)]
    played = played_record_path(path)
    if played.is_file():
        try:
            record = json.loads(played.read_text())
            played_indices = set(record["played"])
            if record.get("interactions", len(interactions)) == len(interactions):  # else: re-recorded since
                report.never_played = [index for index in range(len(interactions)) if index not in played_indices]
        except (ValueError, KeyError, OSError):
            report.never_played = None
    return report


def check(root: Path) -> list[CassetteReport]:
    return [check_cassette(path) for path in cassette_files(root)]
