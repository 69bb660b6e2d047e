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
