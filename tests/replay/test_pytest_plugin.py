"""The pytest plugin (entry point pytest11), run in a child pytest through `pytester`: a test using
`workbench_cassette` records with --workbench-record-mode=record, then passes in replay (the
default) without the provider; a changed request fails the test with WB_REPLAY_MISS."""

from __future__ import annotations

import json

INNER = '''
import os

import openai
import pytest

from workbench.demo.fake_provider import FakeProvider, FakeTransport

PROMPT = os.environ.get("GREETING_PROMPT", "Say hello")


def ask(cassette, provider):
    client = openai.OpenAI(base_url="http://fake.test/v1", api_key="sk-test", max_retries=2,
                           http_client=cassette.http_client(transport=FakeTransport(provider)))
    try:
        return client.chat.completions.create(
            model="wbt-gpt", messages=[{"role": "user", "content": PROMPT}]).choices[0].message.content
    except openai.BadRequestError:
        return None  # swallowed on purpose: the plugin itself must fail the test


def test_greeting(workbench_cassette):
    provider = FakeProvider()
    answer = ask(workbench_cassette, provider)
    print(f"MODE={workbench_cassette.mode} PROVIDER_REQUESTS={len(provider.requests)}")
    if answer is not None:
        assert answer == "echo: Say hello"


@pytest.mark.workbench_cassette("recorded/farewell.json")
def test_marker_path(workbench_cassette):
    provider = FakeProvider()
    assert ask(workbench_cassette, provider) in ("echo: Say hello", None)
'''


def test_plugin_records_then_replays_then_fails_on_a_changed_request(pytester, monkeypatch, tmp_path):
    monkeypatch.setenv("WORKBENCH_DB", str(tmp_path / "inner" / "wb.duckdb"))
    pytester.makepyfile(test_inner=INNER)

    recorded = pytester.runpytest_inprocess("--workbench-record-mode=record", "-s", "-p", "no:cacheprovider")
    recorded.assert_outcomes(passed=2)
    recorded.stdout.fnmatch_lines(["*MODE=record PROVIDER_REQUESTS=1*"])
    default_path = pytester.path / "cassettes" / "test_inner" / "test_greeting.json"
    assert len(json.loads(default_path.read_text())["interactions"]) == 1
    assert (pytester.path / "recorded" / "farewell.json").is_file()

    replayed = pytester.runpytest_inprocess("-s", "-p", "no:cacheprovider")
    replayed.assert_outcomes(passed=2)
    replayed.stdout.fnmatch_lines(["*MODE=replay PROVIDER_REQUESTS=0*"])

    monkeypatch.setenv("GREETING_PROMPT", "Say goodbye")
    changed = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    changed.assert_outcomes(failed=2)  # the tests themselves fail, though they swallowed the SDK error
    output = changed.stdout.str()
    assert "WB_REPLAY_MISS" in output
    assert "-Say hello" in output and "+Say goodbye" in output
    assert "test_greeting.json" in output and "farewell.json" in output
    changed.stdout.fnmatch_lines(["FAILED test_inner.py::test_greeting - WB_REPLAY_MISS*"])


def test_a_test_that_fails_anyway_shows_the_miss(pytester, monkeypatch, tmp_path):
    monkeypatch.setenv("WORKBENCH_DB", str(tmp_path / "inner" / "wb.duckdb"))
    pytester.makepyfile(test_loud="""
        import httpx2
        from workbench.replay.session import Cassette

        def test_loud(workbench_cassette):
            client = workbench_cassette.http_client()
            response = client.post("http://fake.test/v1/chat/completions", json={"model": "m", "messages": []})
            response.raise_for_status()
    """)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*workbench replay miss*", "*WB_REPLAY_MISS*does not exist yet*"])


APP = '''
import os

import openai

# built at import, deep in the application, with no Workbench code: the SDK's own default client
client = openai.OpenAI(base_url=os.environ["FAKE_URL"] + "/v1", max_retries=0)


def greet(text):
    return client.chat.completions.create(model="wbt-gpt", messages=[{"role": "user", "content": text}]).choices[0].message.content
'''

DEEP = '''
import pytest


def test_deep(workbench_cassette):
    import app  # imported by the code under test, inside the test

    assert app.greet("deep") == "echo: deep"


@pytest.mark.workbench_cassette
def test_marker_alone():
    import app

    assert app.greet("marker") == "echo: marker"
'''


def _inner_store(monkeypatch, tmp_path):
    monkeypatch.setenv("WORKBENCH_DB", str(tmp_path / "inner" / "wb.duckdb"))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


def test_a_client_built_deep_in_the_application_replays_from_the_fixtures_cassette(
        pytester, monkeypatch, tmp_path, fake_url, fake_provider):
    _inner_store(monkeypatch, tmp_path)
    pytester.makepyfile(app=APP, test_deep=DEEP)
    monkeypatch.setenv("FAKE_URL", fake_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-recording-key")
    recorded = pytester.runpytest_inprocess("--workbench-record-mode=record", "-p", "no:cacheprovider")
    recorded.assert_outcomes(passed=2)
    assert len(fake_provider.requests) == 2
    cassettes = pytester.path / "cassettes" / "test_deep"
    assert sorted(path.name for path in cassettes.iterdir()) == ["test_deep.json", "test_marker_alone.json"]
    assert "sk-recording-key" not in (cassettes / "test_deep.json").read_text()

    monkeypatch.setenv("FAKE_URL", "http://127.0.0.1:9")  # nothing listens there: replay or fail
    monkeypatch.delenv("OPENAI_API_KEY")  # and no key: the SDK would refuse to start without one
    replayed = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    replayed.assert_outcomes(passed=2)
    assert len(fake_provider.requests) == 2


NO_KEY = '''
import os

import openai


def test_no_key(workbench_cassette):
    client = openai.OpenAI(base_url=os.environ["FAKE_URL"] + "/v1", max_retries=0)
    assert client.chat.completions.create(
        model="wbt-gpt", messages=[{"role": "user", "content": "key?"}]).choices[0].message.content == "echo: key?"


def test_the_dummy_key_is_gone_after_the_test():
    assert os.environ.get("OPENAI_API_KEY") != "workbench-replay-needs-no-key"
'''


def test_replay_needs_no_key_and_record_gets_no_dummy(pytester, monkeypatch, tmp_path, fake_url):
    _inner_store(monkeypatch, tmp_path)
    pytester.makepyfile(test_nokey=NO_KEY)
    monkeypatch.setenv("FAKE_URL", fake_url)
    without_key = pytester.runpytest_inprocess("--workbench-record-mode=record", "-p", "no:cacheprovider")
    without_key.assert_outcomes(passed=1, failed=1)  # recording needs the real key: no dummy is given
    without_key.stdout.fnmatch_lines(["*OpenAIError*api_key*"])

    monkeypatch.setenv("OPENAI_API_KEY", "sk-recording-key")
    pytester.runpytest_inprocess("--workbench-record-mode=record", "-p", "no:cacheprovider").assert_outcomes(passed=2)
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.setenv("FAKE_URL", "http://127.0.0.1:9")
    pytester.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=2)


RELATIVE = '''
import pytest

from workbench.demo.fake_provider import FakeProvider, FakeTransport


@pytest.mark.workbench_cassette("recorded/relative.json")
def test_relative(workbench_cassette):
    client = workbench_cassette.http_client(transport=FakeTransport(FakeProvider()))
    assert client.post("http://fake.test/v1/chat/completions",
                       json={"model": "wbt-gpt", "messages": [{"role": "user", "content": "where"}]}).status_code == 200
'''


def test_a_marker_path_is_relative_to_the_test_file_whatever_the_working_directory(pytester, monkeypatch, tmp_path):
    _inner_store(monkeypatch, tmp_path)
    folder = pytester.mkpydir("tests") / "sub"
    folder.mkdir()
    (folder / "test_relative.py").write_text(RELATIVE)
    pytester.runpytest_inprocess("tests/sub/test_relative.py", "--workbench-record-mode=record",
                                 "-p", "no:cacheprovider").assert_outcomes(passed=1)
    assert (folder / "recorded" / "relative.json").is_file()
    assert not (pytester.path / "recorded").exists()

    monkeypatch.chdir(folder)  # from the test's own folder, replay finds the same cassette
    pytester.runpytest_inprocess("test_relative.py", "-p", "no:cacheprovider").assert_outcomes(passed=1)
    assert sorted(path.name for path in folder.iterdir() if path.is_dir() and not path.name.startswith("_")) == ["recorded"]


XDIST = '''
import os

import pytest


@pytest.mark.parametrize("word", ["alpha", "beta", "gamma", "delta"])
def test_word(workbench_cassette, word):
    import app

    with open(os.environ["WORKERS_FILE"], "a") as workers:
        workers.write(os.environ.get("PYTEST_XDIST_WORKER", "none") + "\\n")
    assert app.greet(word) == "echo: " + word
'''


def test_xdist_workers_keep_their_cassettes_apart(pytester, monkeypatch, tmp_path, fake_url):
    _inner_store(monkeypatch, tmp_path)
    pytester.makepyfile(app=APP, test_xdist=XDIST)
    monkeypatch.setenv("FAKE_URL", fake_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-recording-key")
    monkeypatch.setenv("WORKERS_FILE", str(tmp_path / "workers.txt"))
    result = pytester.runpytest_subprocess("-n", "2", "--workbench-record-mode=record", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=4)
    assert set((tmp_path / "workers.txt").read_text().split()) == {"gw0", "gw1"}
    for word in ("alpha", "beta", "gamma", "delta"):
        recorded = json.loads((pytester.path / "cassettes" / "test_xdist" / f"test_word_{word}.json").read_text())
        assert [json.loads(item["request"]["body"])["messages"][0]["content"]
                for item in recorded["interactions"]] == [word]


SHARED = '''
import pytest

from workbench.demo.fake_provider import FakeProvider, FakeTransport
from workbench.replay.session import played_record_path

URL = "http://fake.test/v1/chat/completions"


def ask(cassette, text):
    client = cassette.http_client(transport=FakeTransport(FakeProvider()))
    return client.post(URL, json={"model": "wbt-gpt", "messages": [{"role": "user", "content": text}]})


@pytest.mark.workbench_cassette("shared.json")
@pytest.mark.parametrize("text", ["zero", "one", "two"])
def test_ask(workbench_cassette, text):
    assert ask(workbench_cassette, text).status_code == 200
    if workbench_cassette.mode == "replay":
        print(f"PLAYED_RECORD_DURING_SUITE={played_record_path(workbench_cassette.path).exists()}")
'''


def test_what_a_suite_played_is_written_once_when_it_ends(pytester, monkeypatch, tmp_path):
    """One record for the whole suite (not a lock and a rewrite per test), covering every test's plays:
    `workbench cassettes check` then lists nothing as stale."""
    monkeypatch.setenv("WORKBENCH_DB", str(tmp_path / "inner" / "wb.duckdb"))
    pytester.makepyfile(test_shared=SHARED)
    pytester.runpytest_inprocess("--workbench-record-mode=record", "-p", "no:cacheprovider").assert_outcomes(passed=3)

    replayed = pytester.runpytest_inprocess("-s", "-p", "no:cacheprovider", "-k", "zero or two")
    replayed.assert_outcomes(passed=2, deselected=1)
    replayed.stdout.fnmatch_lines(["*PLAYED_RECORD_DURING_SUITE=False*"])
    assert "PLAYED_RECORD_DURING_SUITE=True" not in replayed.stdout.str()

    from workbench.replay.check import check_cassette

    assert check_cassette(pytester.path / "shared.json").never_played == [1]


EXIT_CONFTEST = '''
import atexit
import json


def _record(config):
    from workbench.replay.session import played_record_path

    return json.loads(played_record_path(config.rootpath / "shared.json").read_text())


def pytest_configure(config):
    # last in, first out: this cleanup runs after Workbench's, which writes the played record, and this
    # exit function after Workbench's (its module, imported by the first test, registers its own later)
    config.add_cleanup(lambda: print(f"AT_SUITE_END={_record(config)}"))
    atexit.register(lambda: print(f"AT_EXIT={_record(config)}"))
'''


def test_the_played_record_is_not_written_again_at_exit(pytester, monkeypatch, tmp_path):
    """Once the suite has ended and written what it played, the process's exit rewrites nothing:
    it used to save every session of the suite again, and write each cassette's record a second time."""
    monkeypatch.setenv("WORKBENCH_DB", str(tmp_path / "inner" / "wb.duckdb"))
    pytester.makepyfile(test_shared=SHARED)
    pytester.runpytest_inprocess("--workbench-record-mode=record", "-p", "no:cacheprovider").assert_outcomes(passed=3)
    pytester.makeconftest(EXIT_CONFTEST)

    replayed = pytester.runpytest_subprocess("-s", "-p", "no:cacheprovider", "-p", "no:randomly")
    replayed.assert_outcomes(passed=3)
    out = replayed.stdout.str()
    at_end = [line for line in out.splitlines() if line.startswith("AT_SUITE_END=")]
    at_exit = [line for line in out.splitlines() if line.startswith("AT_EXIT=")]
    assert len(at_end) == len(at_exit) == 1, out
    assert at_exit[0].removeprefix("AT_EXIT=") == at_end[0].removeprefix("AT_SUITE_END="), out  # same "at": not rewritten


def test_played_records_written_at_a_suites_end_are_kept_under_each_cassettes_real_path(tmp_path):
    """A suite's end writes what each cassette played under the cassette's real path, whether the
    suite reached it through a linked folder or the cassette itself is a link."""
    from workbench.replay.cassette import Interaction, RecordedRequest, RecordedResponse, write_cassette
    from workbench.replay.session import Cassette, played_record_path, write_played_records

    real = tmp_path / "real"
    real.mkdir()
    for name in ("a.json", "b.json"):
        write_cassette(real / name, [Interaction(
            request=RecordedRequest(method="POST", uri=f"http://fake.test/v1/{index}", body=b"{}"),
            response=RecordedResponse(status=200, headers={}, body=b"{}")) for index in range(2)])
    (tmp_path / "linked").symlink_to(real, target_is_directory=True)
    (tmp_path / "b-link.json").symlink_to(real / "b.json")
    for path, played in ((tmp_path / "linked" / "a.json", 1), (tmp_path / "b-link.json", 0)):
        session = Cassette(path, "replay")
        session.played_at_end = True
        session.index.played.add(played)
        session.save()
    write_played_records()
    for name, played in (("a.json", [1]), ("b.json", [0])):
        record = json.loads(played_record_path(real / name).read_text())
        assert record["cassette"] == str((real / name).resolve()) and record["played"] == played
