"""pytest plugin (entry point `pytest11`): a `workbench_cassette` fixture and marker that record and
replay each test's LLM calls, and `--workbench-record-mode`.

    @pytest.mark.workbench_cassette("cassettes/checkout.json")   # optional: a path, mode="record"
    def test_checkout(workbench_cassette):
        client = openai.OpenAI()    # or built anywhere in the application, before or during the test

While a test has a cassette (the fixture, or the marker alone), the cassette is ambient
(`workbench.replay.ambient`): every client Workbench sees records into it and replays from it, and
the SDKs' default clients are instrumented for the test. A path is relative to the test file;
without one the cassette is `cassettes/<test module>/<test name>.json` beside the test file. In
replay mode a test that has no API key gets a dummy one. A replay miss fails the test with the
`WB_REPLAY_MISS` message itself.

pytest-recording's marker, fixtures and options are served by `workbench.replay.pytest_vcr`."""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

_MODES = ("replay", "record", "rerecord", "live")
# the variables the official SDKs refuse to start without; a replayed call needs no key
DUMMY_KEYS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")
DUMMY_KEY = "workbench-replay-needs-no-key"
_SESSIONS = pytest.StashKey[list]()
_PLAYED_AT_END = pytest.StashKey[bool]()
_OWNS_PROCESS = pytest.StashKey[bool]()  # the process's first session: its standby ingester is this session's
_STANDBY_ASKED = pytest.StashKey[bool]()
_LOCK_UNSAFE = pytest.StashKey[Exception]()  # the spool's ingest lock refused: said in the summary
_sessions_begun = 0


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("workbench")
    group.addoption(
        "--workbench-record-mode", choices=_MODES, default=None,
        help="cassette mode for every test's cassette, workbench_cassette's and @pytest.mark.vcr's "
             "(default: the marker's, else WORKBENCH_RECORD_MODE, else replay)",
    )


def pytest_configure(config: pytest.Config) -> None:
    global _sessions_begun
    config.stash[_OWNS_PROCESS] = _sessions_begun == 0
    _sessions_begun += 1
    config.addinivalue_line(
        "markers", "workbench_cassette(path=None, mode=None): the test's cassette (a path relative to the test file)"
    )


def folder_of(node: pytest.Item) -> Path:
    """The folder of the test file: relative cassette paths start there, never at the working directory."""
    return Path(str(node.path)).parent


def _default_path(request: pytest.FixtureRequest) -> Path:
    test_file = Path(str(request.node.path))
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name).strip("_")
    return test_file.parent / "cassettes" / test_file.stem / f"{name}.json"


def workbench_mode(request: pytest.FixtureRequest) -> str | None:
    """The mode of the test's workbench_cassette, when it has one (None: it has none). Unset means
    `WORKBENCH_RECORD_MODE`, else replay."""
    marker = request.node.get_closest_marker("workbench_cassette")
    if marker is None and "workbench_cassette" not in request.fixturenames:
        return None
    from workbench.config import settings

    return (request.config.getoption("--workbench-record-mode") or (marker.kwargs.get("mode") if marker else None)
            or settings().record_mode)


@contextmanager
def run_in_cassette(request: pytest.FixtureRequest, session) -> Iterator:
    """Run the test inside `session`: ambient for every client Workbench sees, the SDKs' default
    clients instrumented for the test (left as found), and dummy API keys while it replays."""
    from workbench import capture
    from workbench.replay.ambient import cassette

    request.node.stash.setdefault(_SESSIONS, []).append(session)
    _stand_by_ingester(request.config)
    _played_written_at_end(request.config, session)
    instrumented = capture.instrumented()
    if not instrumented:
        capture.instrument()
    dummies = [name for name in DUMMY_KEYS if not os.environ.get(name)] if session.mode == "replay" else []
    for name in dummies:
        os.environ[name] = DUMMY_KEY
    try:
        with cassette(session):
            yield session
    finally:
        for name in dummies:
            if os.environ.get(name) == DUMMY_KEY:
                del os.environ[name]
        if not instrumented:
            capture.uninstrument()
    reported = getattr(session, "_misses_reported", 0)
    if len(session.misses) > reported:  # a miss after the test body (in another fixture's teardown)
        session._misses_reported = len(session.misses)
        pytest.fail(_miss_text(session.misses[reported]), pytrace=False)


def _stand_by_ingester(config: pytest.Config) -> None:
    """Start, at the session's first cassette, the ingester its end hands the spooled calls to
    (`Spool.stand_by`): its start-up runs beside the tests, and no ingester starts on the clock
    meanwhile. pytest killed first sends it nothing: it leaves, the spool stays whole. Only for the
    process's first session: a session run inside another (pytester) leaves the spool to that one."""
    if config.stash.get(_STANDBY_ASKED, False):
        return
    config.stash[_STANDBY_ASKED] = True
    from workbench.prices import at_ingestion

    # the session's calls are priced by its ingester: the price library is not loaded in the tests' process
    at_ingestion(True)
    config.add_cleanup(functools.partial(at_ingestion, False))
    if not config.stash.get(_OWNS_PROCESS, False):
        return
    try:
        from workbench.capture import recorder
        from workbench.errors import WorkbenchError
        from workbench.locks import check

        if not recorder().settings.capture:
            return
        spool = recorder().spool
        try:  # its ingester would refuse the lock where no one sees it: the session's summary says so
            check(spool.spool_dir / ".ingest.lock")
        except WorkbenchError as exc:
            config.stash[_LOCK_UNSAFE] = exc
        spool.stand_by()
    except Exception:  # noqa: BLE001 - recording never breaks the tests: the exit starts an ingester instead
        return
    config.add_cleanup(functools.partial(_hand_over_at_end, spool))  # after every other cleanup: added first


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    unsafe = config.stash.get(_LOCK_UNSAFE, None)
    if unsafe is not None:
        terminalreporter.write_line(f"workbench: the calls this session recorded stay in the spool, not in the store: "
                                    f"{unsafe}", yellow=True)


def _hand_over_at_end(spool) -> None:
    """The session's spooled calls, to its standby ingester (with nothing recorded, it is dismissed)."""
    try:
        spool.hand_over()
    except Exception as exc:  # noqa: BLE001 - never fail the session: the spool keeps the records
        spool.note_failure("ingest", exc)


def _played_written_at_end(config: pytest.Config, session) -> None:
    """What the suite's sessions played is written once when it ends, not once per test."""
    from workbench.replay.session import write_played_records

    session.played_at_end = True
    if not config.stash.get(_PLAYED_AT_END, False):
        config.stash[_PLAYED_AT_END] = True
        config.add_cleanup(write_played_records)


@pytest.fixture
def workbench_cassette(request: pytest.FixtureRequest):
    from workbench.replay.session import Cassette

    marker = request.node.get_closest_marker("workbench_cassette")
    path = marker.args[0] if marker and marker.args else (marker.kwargs.get("path") if marker else None)
    path = folder_of(request.node) / path if path else _default_path(request)
    with run_in_cassette(request, Cassette(path, workbench_mode(request))) as session:
        yield session


@pytest.fixture(autouse=True)
def _workbench_cassette_marker(request: pytest.FixtureRequest) -> None:
    """The marker alone gives the test its cassette, as requesting the fixture does."""
    if request.node.get_closest_marker("workbench_cassette") is not None:
        request.getfixturevalue("workbench_cassette")


def _miss_text(miss) -> str:
    return f"{miss.code}: {miss.cause}\nfix: {miss.fix}"


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    """The test's sessions are done with once it is torn down: held on by its item, a suite's
    thousand cassettes would stay in memory to its end."""
    if _SESSIONS in item.stash:
        del item.stash[_SESSIONS]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A replay miss fails the test itself (not only its teardown), even when the code under test
    swallowed the SDK's error; a test that failed anyway gets the miss as a report section."""
    outcome = yield
    if call.when != "call":
        return
    missed = [session for session in item.stash.get(_SESSIONS, []) if session.misses]
    if not missed:
        return
    report = outcome.get_result()
    text = _miss_text(missed[0].misses[0])
    if report.passed:
        report.outcome = "failed"
        report.longrepr = text
    else:
        report.sections.append(("workbench replay miss", text))
    for session in missed:
        session._misses_reported = len(session.misses)
