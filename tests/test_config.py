from __future__ import annotations

from pathlib import Path

import pytest

from workbench.config import Settings, load_settings
from workbench.errors import WorkbenchError


def test_precedence_flag_over_env_over_pyproject_over_default(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text('[tool.workbench]\ndb = "from-pyproject.duckdb"\nrecord_mode = "record"\n')
    monkeypatch.chdir(tmp_path)
    assert load_settings().db == tmp_path / "from-pyproject.duckdb"
    assert load_settings().record_mode == "record"
    monkeypatch.setenv("WORKBENCH_DB", "from-env.duckdb")
    assert load_settings().db == Path("from-env.duckdb")
    assert load_settings(db=Path("flag.duckdb")).db == Path("flag.duckdb")
    assert load_settings().flush_interval_s == Settings.model_fields["flush_interval_s"].default


def test_bad_values_and_unknown_keys_are_config_errors(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WORKBENCH_RECORD_MODE", "sometimes")
    with pytest.raises(WorkbenchError) as caught:
        load_settings()
    assert caught.value.code == "WB_CONFIG_INVALID" and "record_mode" in caught.value.cause
    monkeypatch.delenv("WORKBENCH_RECORD_MODE")
    (tmp_path / "pyproject.toml").write_text("[tool.workbench]\ndatabase = 1\n")
    with pytest.raises(WorkbenchError) as caught:
        load_settings()
    assert "database" in caught.value.cause


def test_every_setting_is_documented_in_the_readme():
    readme = Path(__file__).resolve().parents[1].joinpath("README.md").read_text()
    for name, field in Settings.model_fields.items():
        assert field.description, name
        assert f"`WORKBENCH_{name.upper()}`" in readme, name
