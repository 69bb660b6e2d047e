"""pytest plugin (entry point `pytest11`): a `workbench_cassette` fixture and marker that record and
replay each test's LLM calls, and `--workbench-record-mode`.

    @pytest.mark.workbench_cassette("cassettes/checkout.json")   # optional: a path, mode="record"
    def test_checkout(workbench_cassette):
        client = openai.OpenAI(http_client=workbench_cassette.http_client())

Without a path the cassette is `cassettes/<test module>/<test name>.json` beside the test file. A
replay miss fails the test with the `WB_REPLAY_MISS` message itself."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

_MODES = ("replay", "record", "rerecord", "live")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("workbench")
    group.addoption(
        "--workbench-record-mode", choices=_MODES, default=None,
        help="cassette mode for workbench_cassette (default: WORKBENCH_RECORD_MODE, else replay)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "workbench_cassette(path=None, mode=None): the cassette the workbench_cassette fixture uses"
    )


def _default_path(request: pytest.FixtureRequest) -> Path:
    test_file = Path(str(request.node.fspath))
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name).strip("_")
    return test_file.parent / "cassettes" / test_file.stem / f"{name}.json"


@pytest.fixture
def workbench_cassette(request: pytest.FixtureRequest):
    from workbench.replay.session import Cassette

    marker = request.node.get_closest_marker("workbench_cassette")
    path = marker.args[0] if marker and marker.args else (marker.kwargs.get("path") if marker else None)
    path = Path(path) if path else _default_path(request)
    if not path.is_absolute():
        path = Path(str(request.config.rootpath)) / path
    mode = request.config.getoption("--workbench-record-mode") or (marker.kwargs.get("mode") if marker else None)
    cassette = Cassette(path, mode)
    yield cassette
    cassette.save()
    reported = getattr(cassette, "_misses_reported", 0)
    if len(cassette.misses) > reported:  # a miss after the test body (in another fixture's teardown)
        pytest.fail(_miss_text(cassette.misses[reported]), pytrace=False)


def _miss_text(miss) -> str:
    return f"{miss.code}: {miss.cause}\nfix: {miss.fix}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A replay miss fails the test itself (not only its teardown), even when the code under test
    swallowed the SDK's error; a test that failed anyway gets the miss as a report section."""
    outcome = yield
    if call.when != "call":
        return
    cassette = getattr(item, "funcargs", {}).get("workbench_cassette")
    if cassette is None or not getattr(cassette, "misses", None):
        return
    report = outcome.get_result()
    text = _miss_text(cassette.misses[0])
    if report.passed:
        report.outcome = "failed"
        report.longrepr = text
    else:
        report.sections.append(("workbench replay miss", text))
    cassette._misses_reported = len(cassette.misses)
