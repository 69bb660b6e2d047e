"""One settings object. Precedence, highest first: an explicit argument or CLI flag, then the
`WORKBENCH_<NAME>` environment variable, then `[tool.workbench]` in the nearest `pyproject.toml`
(searched upwards from the working directory), then the default below."""

from __future__ import annotations

import hashlib
import os
import tomllib
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from workbench.errors import WorkbenchError

RecordMode = Literal["replay", "record", "rerecord", "live"]
# the dashboard's password: an environment variable only, never a setting (a pyproject.toml is committed)
DASHBOARD_PASSWORD_ENV = "WORKBENCH_DASHBOARD_PASSWORD"


class Settings(BaseModel):
    """Every setting: its default and its help. The environment variable is WORKBENCH_<NAME>."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    db: Path = Field(Path(".workbench/workbench.duckdb"), description="the DuckDB store file")
    spool_dir: Path | None = Field(
        None, description="where recording processes append their spool files (default: the store's working folder)"
    )
    flush_interval_s: float = Field(
        0.5, ge=0.01, le=60,
        description="longest time a recorded call waits in memory before its spool write (0.01 to 60)"
    )
    body_cap_bytes: int = Field(
        65536, ge=1024, description="request and response bodies above this are cut, with a marker"
    )
    lake_data_path: str | None = Field(
        None, description="where a new DuckLake store (db = ducklake:...) keeps its Parquet files: a folder every "
        "machine shares, or an s3:// prefix"
    )
    models: Path = Field(Path("models.toml"), description="the model registry file to load")
    record_mode: RecordMode = Field("replay", description="cassette mode: replay, record, rerecord or live")
    capture: bool = Field(True, description="record calls into the store (false: pass through)")

    @property
    def work_dir(self) -> Path:
        return work_dir_of(self.db)

    @property
    def resolved_spool_dir(self) -> Path:
        return self.spool_dir or spool_dir_of(self.db)


# a `db` setting naming a DuckLake (workbench/store/lake.py), not a file
LAKE_PREFIX = "ducklake:"


def is_lake(db: Path | str) -> bool:
    return str(db).startswith(LAKE_PREFIX)


def work_dir_of(db: Path) -> Path:
    """The one folder Workbench owns beside a store, named after it (`orders.duckdb` →
    `orders.duckdb.workbench/`): the spools not ingested yet, the replay state and the lock files,
    never loose `spool/` and `replay/` folders in whatever folder holds the store. A lake is shared
    by many machines: each process's folder is local, under `.workbench/` where it runs, one per lake."""
    if is_lake(db):
        return Path(".workbench") / f"lake-{hashlib.sha256(str(db).encode()).hexdigest()[:8]}.workbench"
    db = Path(db)
    return db.with_name(db.name + ".workbench")


def spool_dir_of(db: Path) -> Path:
    """Where the processes recording into store `db` spool, unless the spool_dir setting says."""
    return work_dir_of(db) / "spool"


def _pyproject(start: Path) -> Path | None:
    """The nearest pyproject.toml at or above `start`."""
    return next((folder / "pyproject.toml" for folder in (start, *start.parents)
                 if (folder / "pyproject.toml").is_file()), None)


def project_root(cwd: Path | None = None) -> Path:
    """The project's folder: the nearest one at or above `cwd` that holds a pyproject.toml, else `cwd`."""
    start = (cwd or Path.cwd()).resolve()
    found = _pyproject(start)
    return found.parent if found is not None else start


def _pyproject_table(start: Path) -> tuple[dict, Path | None]:
    candidate = _pyproject(start)
    if candidate is None:
        return {}, None
    try:
        data = tomllib.loads(candidate.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise WorkbenchError(
            "WB_CONFIG_INVALID", f"{candidate} is not valid TOML: {exc}", f"fix the syntax of {candidate}"
        ) from exc
    return data.get("tool", {}).get("workbench", {}), candidate.parent


def _gathered(cwd: Path | None, overrides: dict) -> tuple[dict, set[str]]:
    """Every setting's value by precedence, and the unknown keys of [tool.workbench]."""
    table, root = _pyproject_table((cwd or Path.cwd()).resolve())
    values: dict = {}
    for name in Settings.model_fields:
        if name in table:
            value = table[name]
            # paths in pyproject.toml are relative to the file, not to where the command runs
            if (root is not None and name in {"db", "spool_dir", "models"} and isinstance(value, str)
                    and not is_lake(value)):
                value = root / value
            values[name] = value
        env = os.environ.get(f"WORKBENCH_{name.upper()}")
        if env is not None and env != "":
            values[name] = env
        if overrides.get(name) is not None:
            values[name] = overrides[name]
    return values, set(table) - set(Settings.model_fields)


def load_settings(cwd: Path | None = None, **overrides) -> Settings:
    """Settings for a project rooted at or above `cwd`; `overrides` are flags (None means unset)."""
    values, unknown = _gathered(cwd, overrides)
    if unknown:
        raise WorkbenchError(
            "WB_CONFIG_INVALID",
            f"unknown [tool.workbench] key(s): {', '.join(sorted(unknown))}",
            f"remove them; known keys: {', '.join(Settings.model_fields)}",
        )
    try:
        return Settings.model_validate(values)
    except ValidationError as exc:
        first = exc.errors()[0]
        name = str(first["loc"][0])
        raise WorkbenchError(
            "WB_CONFIG_INVALID",
            f"setting {name}={values.get(name)!r}: {first['msg']}",
            f"set WORKBENCH_{name.upper()} or [tool.workbench] {name} to a valid value",
        ) from exc


def load_settings_leniently(cwd: Path | None = None, **overrides) -> tuple[Settings, list[str]]:
    """Settings for a recorder, which must not fail the application: a value that does not
    validate (or an unreadable pyproject.toml) falls back to its default; the problems are returned
    so the caller can log them."""
    try:
        values, unknown = _gathered(cwd, overrides)
    except WorkbenchError as exc:
        return Settings(), [exc.cause]
    problems = [f"unknown [tool.workbench] key(s) ignored: {', '.join(sorted(unknown))}"] if unknown else []
    kept = {}
    for name, value in values.items():
        try:
            Settings.model_validate({name: value})
        except ValidationError as exc:
            problems.append(f"setting {name}={value!r} ignored ({exc.errors()[0]['msg']}); using the default")
            continue
        kept[name] = value
    return Settings.model_validate(kept), problems


@lru_cache(maxsize=1)
def settings() -> Settings:
    """The process's settings, read once (tests call `settings.cache_clear()` after changing env)."""
    return load_settings()
