from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

CORPUS = Path(__file__).resolve().parent / "fixtures" / "corpus"
FIXTURE = Path(__file__).parent / "fixtures" / "cassettes" / "anthropic_cache.yaml"


def workbench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workbench", *args], capture_output=True, text=True, timeout=120)


def test_show_json_gives_normalized_priced_calls():
    result = workbench("cassettes", "show", str(FIXTURE), "--format", "json", "--models", "models.toml")
    assert result.returncode == 0, result.stderr
    (call,) = json.loads(result.stdout)
    assert call["wire"] == "anthropic.messages" and call["provider"] == "anthropic"
    assert (call["input_tokens"], call["cache_write_tokens"], call["output_tokens"]) == (18, 2055, 100)
    # claude-sonnet-4 row: $3 input, $3.75 cache write, $15 output per million
    assert call["cost_micros"] == 18 * 300 + 2055 * 375 + 100 * 1500
    assert call["price_source"] == "claude-sonnet-4@2025-10-01"


def test_show_table_has_a_total_and_flags_unpriced_calls():
    # a model neither models.toml nor the price library knows
    path = CORPUS / "pydantic__pydantic-ai" / "tests__models__cassettes__test_openrouter__test_openrouter_with_native_options.yaml"
    result = workbench("cassettes", "show", str(path), "--models", "models.toml")
    assert result.returncode == 0, result.stderr
    assert "total" in result.stdout and "unpriced" in result.stdout


def test_an_unsafe_cassette_is_a_clear_error_with_exit_2():
    path = CORPUS / "DataDog__dd-trace-py" / "tests__cassettes__anthropic__anthropic_v1_messages_beta_true_post_1913e018.yaml"
    result = workbench("cassettes", "show", str(path))
    assert result.returncode == 2
    assert "WB_CASSETTE_INVALID" in result.stderr and "fix:" in result.stderr and "Traceback" not in result.stderr
