"""pytest-recording's API served by Workbench: an unchanged pytest-recording suite (its marker, its
`vcr_config`, its cassette locations, its record modes, `--block-network`) records and then passes
offline, its LLM calls replayed by Workbench and its other HTTP traffic (requests) by vcrpy, in the
same cassette; pytest-recording, installed beside it (it is, in the test extra), is displaced
unless `-p no:workbench_vcr` gives the suite back to it. Inner suites run through `pytester`."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml

from workbench.replay.cassette import Interaction, RecordedRequest, RecordedResponse, load_cassette, write_cassette

DEAD = "http://127.0.0.1:9"  # nothing listens there: a request that is not replayed fails

ASK = '''
import os

import openai


def ask(text, create=None, **options):
    client = openai.OpenAI(base_url=os.environ["FAKE_URL"] + "/v1", api_key="sk-" "secret-key-1234567890abcdef",
                           max_retries=0, **options)
    reply = client.chat.completions.create(model="wbt-gpt", messages=[{"role": "user", "content": text}],
                                           **(create or {}))
    return reply.choices[0].message.content
'''


LOGO = b"\x89PNG\r\n\x1a\n\x00\xff\xfe not text"


class _Weather(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        self.server.hits += 1
        binary = self.path.endswith(".png")
        body = LOGO if binary else json.dumps({"path": self.path, "temperature": 21}).encode()
        self.send_response(200)
        self.send_header("content-type", "image/png" if binary else "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def weather():
    """A non-LLM HTTP service on 127.0.0.1, called with requests (which Workbench does not transport)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Weather)
    server.hits = 0
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def inner(pytester, monkeypatch, tmp_path, fake_url):
    monkeypatch.setenv("WORKBENCH_DB", str(tmp_path / "inner" / "wb.duckdb"))
    monkeypatch.setenv("FAKE_URL", fake_url)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    pytester.makepyfile(ask=ASK)
    return pytester


def _run(pytester, *args):
    return pytester.runpytest_inprocess(*args, "-p", "no:cacheprovider")


def _chat(answer: str) -> bytes:
    return json.dumps({
        "id": "chatcmpl-recorded", "object": "chat.completion", "created": 1, "model": "wbt-gpt",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }).encode()


def _write_chat_cassette(path, *prompts: str) -> None:
    """A cassette recorded earlier: each prompt answered with "recorded: <prompt>"."""
    write_cassette(path, [Interaction(
        request=RecordedRequest(method="POST", uri=f"{DEAD}/v1/chat/completions",
                                body=json.dumps({"messages": [{"role": "user", "content": prompt}], "model": "wbt-gpt"}).encode()),
        response=RecordedResponse(status=200, headers={"content-type": ["application/json"]}, body=_chat(f"recorded: {prompt}")),
    ) for prompt in prompts])


def _prompts(path) -> list[str]:
    return [json.loads(item.request.body)["messages"][0]["content"] for item in load_cassette(path)
            if item.request.uri.endswith("/chat/completions")]


SUITE = '''
import os

import pytest
import requests

from ask import ask


@pytest.mark.vcr
def test_chat():
    assert ask(os.environ.get("PROMPT", "hello"), default_headers={"x-team": "secret-team"}) == "echo: " + os.environ.get("PROMPT", "hello")


@pytest.mark.vcr
def test_chat_and_weather():
    weather = requests.get(os.environ["WEATHER_URL"] + "/today?api_key=weather-key&city=Paris").json()
    assert weather["temperature"] == 21
    assert ask("weather?") == "echo: weather?"


@pytest.mark.vcr
def test_binary_download():
    assert requests.get(os.environ["WEATHER_URL"] + "/logo.png").content == b"\\x89PNG\\r\\n\\x1a\\n\\x00\\xff\\xfe not text"


class TestGroup:
    @pytest.mark.vcr
    def test_in_class(self, vcr, request):
        assert ask("grouped") == "echo: grouped"
        assert type(vcr).__module__ == "vcr.cassette"  # what pytest-recording's fixture gives
        assert request.config._vcr_configured == 4  # the conftest's pytest_recording_configure, once a test
'''

CONFTEST = '''
import pytest


@pytest.fixture(scope="module")
def vcr_config():
    return {"filter_headers": ["authorization", ("x-team", "REDACTED-TEAM")], "filter_query_parameters": ["api_key"]}


def pytest_recording_configure(config, vcr):
    config._vcr_configured = getattr(config, "_vcr_configured", 0) + 1
    assert type(vcr).__name__ == "VCR"
'''


def test_an_unchanged_pytest_recording_suite_records_then_passes_offline(inner, monkeypatch, fake_provider, weather):
    inner.makepyfile(test_suite=SUITE)
    inner.makeconftest(CONFTEST)
    monkeypatch.setenv("WEATHER_URL", f"http://127.0.0.1:{weather.server_port}")
    _run(inner, "--record-mode=once").assert_outcomes(passed=4)
    assert len(fake_provider.requests) == 3 and weather.hits == 2

    folder = inner.path / "cassettes" / "test_suite"  # pytest-recording's default locations
    assert sorted(path.name for path in folder.iterdir()) == [
        "TestGroup.test_in_class.yaml", "test_binary_download.yaml", "test_chat.yaml", "test_chat_and_weather.yaml"]
    assert load_cassette(folder / "test_binary_download.yaml")[0].response.body == LOGO  # kept byte for byte
    chat = yaml.safe_load((folder / "test_chat.yaml").read_text())
    headers = chat["interactions"][0]["request"]["headers"]
    assert headers["x-team"] == ["REDACTED-TEAM"] and "authorization" not in {name.lower() for name in headers}
    assert "sk-secret-key" not in (folder / "test_chat.yaml").read_text()
    both = load_cassette(folder / "test_chat_and_weather.yaml")  # one file: vcrpy's recording and Workbench's
    assert sorted(item.request.method for item in both) == ["GET", "POST"]
    (weather_call,) = [item for item in both if item.request.method == "GET"]
    assert "api_key" not in weather_call.request.uri and "city=Paris" in weather_call.request.uri
    assert json.loads(weather_call.response.body)["temperature"] == 21

    monkeypatch.setenv("FAKE_URL", DEAD)  # everything offline now: Workbench's cassettes are host-independent,
    weather.shutdown()  # vcrpy's are bound to the URL (its default match_on), which stays, with no server behind
    weather.server_close()
    replayed = _run(inner)
    replayed.assert_outcomes(passed=4)
    assert len(fake_provider.requests) == 3 and weather.hits == 2


def test_without_body_in_match_on_a_changed_body_replays_in_order_and_is_reported(inner, monkeypatch):
    """vcrpy's default matchers ignore the body: so does Workbench then, and says how many."""
    inner.makepyfile(test_loose='''
        from ask import ask
        import pytest

        @pytest.mark.vcr
        def test_loose():
            assert ask("changed since") == "recorded: original"

        @pytest.mark.vcr(match_on=["method", "path", "body"])
        def test_strict():
            ask("changed since")
    ''')
    for name in ("test_loose", "test_strict"):
        _write_chat_cassette(inner.path / "cassettes" / "test_loose" / f"{name}.yaml", "original")
    result = _run(inner)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "workbench: 1 request(s) in 1 test(s) replayed by method and path alone*test_loose.py::test_loose",
        "FAILED test_loose.py::test_strict - *",
    ])
    output = result.stdout.str()
    assert "WB_REPLAY_MISS" in output and "-original" in output and "+changed since" in output


MODES = '''
import pytest

from ask import ask

STRICT = ["method", "path", "body"]


@pytest.mark.vcr(record_mode="none", match_on=STRICT)
def test_none():
    assert ask("old") == "recorded: old"
    ask("new")  # not recorded: a miss


@pytest.mark.vcr(record_mode="once", match_on=STRICT)
def test_once_existing():
    assert ask("old") == "recorded: old"


@pytest.mark.vcr(record_mode="once", match_on=STRICT)
def test_once_missing():
    assert ask("fresh") == "echo: fresh"


@pytest.mark.vcr(record_mode="new_episodes", match_on=STRICT)
def test_new_episodes():
    assert [ask("old"), ask("new")] == ["recorded: old", "echo: new"]


@pytest.mark.vcr(record_mode="all", match_on=STRICT)
def test_all():
    assert [ask("old"), ask("new")] == ["echo: old", "echo: new"]


@pytest.mark.vcr(record_mode="rewrite", match_on=STRICT)
def test_rewrite():
    assert ask("new") == "echo: new"


@pytest.mark.vcr
def test_cli_mode():
    assert ask("old") == "recorded: old"


@pytest.mark.vcr(record_mode="sometimes")
def test_bad_mode():
    pass
'''


def test_record_modes_map_onto_workbenchs_and_the_marker_beats_the_command_line(inner, fake_provider):
    inner.makepyfile(test_vcr_modes=MODES)
    folder = inner.path / "cassettes" / "test_vcr_modes"
    for name in ("test_none", "test_once_existing", "test_new_episodes", "test_all", "test_rewrite", "test_cli_mode"):
        _write_chat_cassette(folder / f"{name}.yaml", "old")
    result = _run(inner, "--record-mode=none")
    result.assert_outcomes(passed=6, failed=1, errors=1)
    result.stdout.fnmatch_lines(["*workbench replay miss*", "WB_REPLAY_MISS*test_none.yaml*", "FAILED test_vcr_modes.py::test_none - *",
                                 "ERROR test_vcr_modes.py::test_bad_mode - *"])
    assert "WB_CONFIG_INVALID: record_mode 'sometimes'" in result.stdout.str()
    assert sorted(request.json["messages"][0]["content"] for request in fake_provider.requests) == [
        "fresh", "new", "new", "new", "old"]
    assert _prompts(folder / "test_none.yaml") == ["old"]
    assert _prompts(folder / "test_once_missing.yaml") == ["fresh"]
    assert _prompts(folder / "test_new_episodes.yaml") == ["old", "new"]
    assert _prompts(folder / "test_all.yaml") == ["old", "new"]
    assert "recorded: old" not in (folder / "test_all.yaml").read_text()  # recorded again, not kept
    assert _prompts(folder / "test_rewrite.yaml") == ["new"]

    # --record-mode applies where neither vcr_config nor the marker names a mode
    _run(inner, "--record-mode=all", "-k", "cli_mode").assert_outcomes(passed=0, failed=1)
    assert "echo: old" in (folder / "test_cli_mode.yaml").read_text()


FILTERS = '''
import os

import pytest

from ask import ask


def tag_response(response):
    response["headers"]["x-filtered"] = ["yes"]
    return response


@pytest.mark.vcr(filter_post_data_parameters=["user"], before_record_response=tag_response)
def test_filters():
    # the request filter runs over the live request too, so a run with another user still matches
    assert ask("filtered", create={"user": os.environ["USER_ID"]}) == "echo: filtered"


@pytest.mark.vcr(ignore_localhost=True)
def test_ignored_host_goes_live_unrecorded():
    assert ask("local") == "echo: local"
'''


def test_vcr_filters_rewrite_what_workbench_records_and_matches(inner, monkeypatch, fake_provider):
    inner.makepyfile(test_filters=FILTERS)
    monkeypatch.setenv("USER_ID", "user-42")
    _run(inner, "--record-mode=once").assert_outcomes(passed=2)
    folder = inner.path / "cassettes" / "test_filters"
    (recorded,) = load_cassette(folder / "test_filters.yaml")
    assert "user" not in json.loads(recorded.request.body) and recorded.response.headers["x-filtered"] == ["yes"]
    assert not (folder / "test_ignored_host_goes_live_unrecorded.yaml").exists()

    monkeypatch.setenv("USER_ID", "user-7")
    _run(inner).assert_outcomes(passed=2)  # in replay (none, the default): the ignored host live again
    assert [request.json["messages"][0]["content"] for request in fake_provider.requests] == [
        "filtered", "local", "local"]


LOCATIONS = '''
import os

import pytest

from ask import ask


@pytest.fixture(scope="module")
def vcr_cassette_dir():
    return "recordings"  # relative: to this file, not to the working directory


@pytest.mark.vcr("extra.yaml")
def test_extra_cassette():
    assert [ask("own"), ask("extra")] == ["recorded: own", "recorded: extra"]


@pytest.mark.default_cassette("renamed")
@pytest.mark.vcr
def test_default_cassette():
    assert ask("renamed") == "recorded: renamed"


@pytest.mark.vcr(serializer="json")
def test_json():
    assert ask("as json") == "recorded: as json"
'''


def test_cassette_names_folders_and_extra_cassettes_resolve_from_the_test_file(inner, monkeypatch):
    folder = inner.mkpydir("tests") / "sub"
    folder.mkdir()
    (folder / "test_locations.py").write_text(LOCATIONS)
    (folder / "ask.py").write_text(ASK)
    recordings = folder / "recordings"
    _write_chat_cassette(recordings / "test_extra_cassette.yaml", "own")
    _write_chat_cassette(recordings / "extra.yaml", "extra")
    _write_chat_cassette(recordings / "renamed.yaml", "renamed")
    _write_chat_cassette(recordings / "test_json.json", "as json")
    monkeypatch.setenv("FAKE_URL", DEAD)
    monkeypatch.chdir(folder.parent)  # neither the root nor the test's folder
    _run(inner, "sub/test_locations.py").assert_outcomes(passed=3)


BLOCK = '''
import os

import pytest
import requests


def test_blocked():
    with pytest.raises(RuntimeError, match="Network is disabled for host '127.0.0.1'") as caught:
        requests.get(os.environ["WEATHER_URL"])
    assert caught.value.code == "WB_NETWORK_BLOCKED"


@pytest.mark.block_network(allowed_hosts=["127.0.0.*"])
def test_allowed():
    assert requests.get(os.environ["WEATHER_URL"]).json()["temperature"] == 21


@pytest.mark.vcr(record_mode="once")
def test_recording_may_connect():
    assert requests.get(os.environ["WEATHER_URL"]).json()["temperature"] == 21
'''


def test_block_network_refuses_connections_except_allowed_hosts_and_recording(inner, monkeypatch, weather):
    inner.makepyfile(test_block=BLOCK)
    monkeypatch.setenv("WEATHER_URL", f"http://127.0.0.1:{weather.server_port}/")
    _run(inner, "--block-network").assert_outcomes(passed=3)
    assert weather.hits == 2


def test_with_pytest_recording_installed_exactly_one_of_the_two_serves_the_marker(inner, monkeypatch, fake_provider,
                                                                                  fake_url):
    """Workbench displaces pytest-recording (whichever loaded first); `-p no:workbench_vcr` gives
    the marker back to it; a cassette pytest-recording recorded replays under Workbench."""
    inner.makepyfile(test_one='''
        import pytest
        from ask import ask

        @pytest.mark.vcr
        def test_one(vcr):
            assert ask("one") == "echo: one"
    ''')
    path = inner.path / "cassettes" / "test_one" / "test_one.yaml"
    _run(inner, "-p", "no:workbench_vcr", "--record-mode=once").assert_outcomes(passed=1)
    assert "workbench" not in yaml.safe_load(path.read_text())  # vcrpy wrote it, through pytest-recording
    assert len(fake_provider.requests) == 1

    monkeypatch.setenv("FAKE_URL", DEAD)
    _run(inner).assert_outcomes(passed=1)  # Workbench replays pytest-recording's cassette, offline
    _run(inner, "-p", "workbench_vcr").assert_outcomes(passed=1)  # loaded before pytest-recording, too

    path.unlink()
    monkeypatch.setenv("FAKE_URL", fake_url)
    _run(inner, "-p", "recording", "--record-mode=once").assert_outcomes(passed=1)  # pytest-recording loaded first
    assert "workbench" in yaml.safe_load(path.read_text())  # Workbench wrote it, pytest-recording displaced
    assert len(fake_provider.requests) == 2


LITELLM_SUITE = '''
import asyncio
import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # else LiteLLM fetches its price map at import
import litellm  # noqa: E402
import pytest

litellm.suppress_debug_info = True


async def _ask(text, **route):
    reply = await litellm.acompletion(messages=[{"role": "user", "content": text}], **route)
    return reply.choices[0].message.content


@pytest.mark.vcr
def test_acompletion_both_routes():
    url = os.environ["FAKE_URL"]
    assert asyncio.run(_ask("openai", model="openai/wbt-gpt", api_base=url + "/v1", api_key="sk-test")) == "echo: openai"
    assert asyncio.run(_ask("anthropic", model="anthropic/wbt-claude", api_base=url,
                            api_key="sk-ant-test")) == "echo: anthropic"
'''

LITELLM_CONFTEST = '''
import pytest


def _seen(request):
    request.headers["x-hooked"] = "yes"  # the user's own hook still runs on what is recorded
    return request


@pytest.fixture(scope="module")
def vcr_config():
    return {"before_record_request": _seen, "filter_headers": ["authorization", "x-api-key"]}
'''


def test_litellm_async_under_the_marker_is_recorded_once_and_fully_played(inner, monkeypatch, fake_provider):
    """LiteLLM's async path is httpx over aiohttp: Workbench records it at httpx, and vcrpy's aiohttp
    patch, which would record it again, leaves it alone."""
    import subprocess
    import sys

    # (the importlib_metadata backport LiteLLM imports is imported by tests/conftest.py first)
    inner.makepyfile(test_litellm_suite=LITELLM_SUITE)
    inner.makeconftest(LITELLM_CONFTEST)
    _run(inner, "--record-mode=once").assert_outcomes(passed=1)
    assert len(fake_provider.requests) == 2
    cassette = inner.path / "cassettes" / "test_litellm_suite" / "test_acompletion_both_routes.yaml"
    recorded = load_cassette(cassette)
    assert sorted(item.request.uri.rsplit("/", 1)[-1] for item in recorded) == ["completions", "messages"]
    assert all(item.request.headers.get("x-hooked") == ["yes"] for item in recorded)
    assert "sk-ant-test" not in cassette.read_text()

    monkeypatch.setenv("FAKE_URL", DEAD)
    _run(inner).assert_outcomes(passed=1)
    assert len(fake_provider.requests) == 2
    check = subprocess.run([sys.executable, "-m", "workbench", "cassettes", "check", str(cassette)],
                           capture_output=True, text=True, cwd=inner.path)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "not played" not in check.stdout, check.stdout
    from workbench.replay.check import check_cassette

    assert check_cassette(cassette).never_played == []  # the replay run's record exists, and lists all


PARSED_ONCE = '''
import os

import pytest
import requests

from ask import ask


@pytest.mark.vcr
def test_both_halves(vcr):
    assert ask("hello") == "recorded: hello"  # Workbench's half
    assert requests.get(os.environ["FAKE_URL"] + "/today").json() == {"temperature": 21}  # vcrpy's half
    assert len(vcr.data) == 2


@pytest.mark.vcr
def test_broken():
    ask("never sent")


def test_vcrpy_never_read_a_file():
    assert READ == []
'''

PARSED_ONCE_CONFTEST = '''
from vcr.persisters.filesystem import FilesystemPersister

READ = []
_load = FilesystemPersister.load_cassette.__func__


def _counted(cls, path, serializer):
    READ.append(str(path))
    return _load(cls, path, serializer)


FilesystemPersister.load_cassette = classmethod(_counted)


def pytest_configure(config):
    import test_parsed_once

    test_parsed_once.READ = READ
'''


def test_vcrpys_half_replays_from_the_document_workbench_parsed_and_a_broken_file_is_still_refused(inner, monkeypatch):
    """Each cassette is parsed once, by Workbench (with its bounds): vcrpy, serving the test's
    non-LLM traffic from the same file, builds its recordings from that document instead of
    reading and parsing the file again. A file Workbench cannot read fails the test with
    WB_CASSETTE_INVALID, as before."""
    inner.makepyfile(test_parsed_once=PARSED_ONCE)
    inner.makeconftest(PARSED_ONCE_CONFTEST)
    folder = inner.path / "cassettes" / "test_parsed_once"
    _write_chat_cassette(folder / "test_both_halves.yaml", "hello")
    interactions = load_cassette(folder / "test_both_halves.yaml") + [Interaction(
        request=RecordedRequest(method="GET", uri=f"{DEAD}/today"),
        response=RecordedResponse(status=200, headers={"content-type": ["application/json"]}, body=b'{"temperature": 21}'),
    )]
    write_cassette(folder / "test_both_halves.yaml", interactions)
    (folder / "test_broken.yaml").write_text("interactions:\n- request: {uri: [unclosed\n")
    monkeypatch.setenv("FAKE_URL", DEAD)  # nothing answers: every call must be replayed

    # in a child process: the conftest patches vcrpy's persister for good
    result = inner.runpytest_subprocess("-p", "no:randomly", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, errors=1)  # the vcr fixture refuses it
    output = result.stdout.str()
    assert "test_broken" in output and "WB_CASSETTE_INVALID" in output and "test_broken.yaml" in output


LIBRARIES = '''
import asyncio
import http.client
import json
import os
import urllib.parse

import anthropic
import httpx
import pytest
import requests
import urllib3

from ask import ask

WEATHER = os.environ["WEATHER_URL"]


@pytest.mark.vcr
def test_requests():
    assert requests.get(WEATHER + "/requests").json()["path"] == "/requests"


@pytest.mark.vcr
def test_urllib3():
    assert json.loads(urllib3.PoolManager().request("GET", WEATHER + "/urllib3").data)["path"] == "/urllib3"


@pytest.mark.vcr
def test_http_client():
    address = urllib.parse.urlsplit(WEATHER)
    connection = http.client.HTTPConnection(address.hostname, address.port)
    connection.request("GET", "/http.client")
    assert json.loads(connection.getresponse().read())["path"] == "/http.client"


@pytest.mark.vcr
def test_aiohttp_imported_in_the_test():
    import aiohttp

    async def get():
        async with aiohttp.ClientSession() as session, session.get(WEATHER + "/aiohttp") as response:
            return await response.json()

    assert asyncio.run(get())["path"] == "/aiohttp"


@pytest.mark.vcr
def test_httpx_sync_and_async():
    assert httpx.get(WEATHER + "/httpx").json()["path"] == "/httpx"

    async def get():
        async with httpx.AsyncClient() as client:
            return (await client.get(WEATHER + "/httpx-async")).json()

    assert asyncio.run(get())["path"] == "/httpx-async"


@pytest.mark.vcr
def test_openai():
    assert ask("hello") == "echo: hello"


@pytest.mark.vcr
def test_anthropic():
    client = anthropic.Anthropic(base_url=os.environ["FAKE_URL"], api_key="sk-ant-test", max_retries=0)
    reply = client.messages.create(model="wbt-claude", max_tokens=20, messages=[{"role": "user", "content": "hi"}])
    assert reply.content[0].text == "echo: hi"


def test_without_the_marker_nothing_is_patched():
    import aiohttp
    import urllib3.connection
    import urllib3.connectionpool as pools

    assert http.client.HTTPConnection.__module__ == "http.client"
    assert urllib3.connection.HTTPConnection.__module__ == "urllib3.connection"
    assert pools.HTTPConnectionPool.ConnectionCls is urllib3.connection.HTTPConnection
    assert "_get_conn" not in vars(pools.HTTPSConnectionPool)  # vcrpy's patch of an inherited method, removed
    assert aiohttp.ClientSession._request.__module__ == "aiohttp.client"
    assert requests.get(WEATHER + "/live").json()["path"] == "/live"  # the server itself answers
'''


def test_every_http_library_records_then_replays_and_nothing_stays_patched_after_the_test(
        inner, monkeypatch, fake_provider, weather):
    """requests, urllib3, http.client and aiohttp (vcrpy's patches, aiohttp first imported inside a
    test), httpx sync and async, openai and anthropic (Workbench's transport): recorded, then
    replayed offline, in one process and across pytest-xdist workers; a test without the marker
    runs on the libraries unpatched and reaches the network."""
    inner.makepyfile(test_libraries=LIBRARIES)
    monkeypatch.setenv("WEATHER_URL", f"http://127.0.0.1:{weather.server_port}")
    _run(inner, "--record-mode=once").assert_outcomes(passed=8)
    assert weather.hits == 7 and len(fake_provider.requests) == 2
    folder = inner.path / "cassettes" / "test_libraries"
    assert [item.request.uri.rsplit("/", 1)[1] for item in load_cassette(folder / "test_aiohttp_imported_in_the_test.yaml")] \
        == ["aiohttp"]
    assert sorted(item.request.uri.rsplit("/", 1)[1] for item in load_cassette(folder / "test_httpx_sync_and_async.yaml")) \
        == ["httpx", "httpx-async"]

    _run(inner).assert_outcomes(passed=8)  # replayed: only the unmarked test reaches a server
    assert weather.hits == 8 and len(fake_provider.requests) == 2
    inner.runpytest_subprocess("-n", "2", "-p", "no:cacheprovider").assert_outcomes(passed=8)
    assert weather.hits == 9 and len(fake_provider.requests) == 2


# every logger first made on a thread other than the main one, with the thread's name, written at the
# end; with APP_SPANS set, the application's own OpenTelemetry provider and processor, as an app with
# an exporter has (Workbench's spans then reach more than its store)
LOGGERS_MADE_OFF_THE_MAIN_THREAD = '''
import json
import logging
import os
import threading

made = []
_get_logger = logging.Manager.getLogger


def get_logger(self, name):
    new = not isinstance(self.loggerDict.get(name), logging.Logger)
    logger = _get_logger(self, name)
    if new and threading.current_thread() is not threading.main_thread():
        made.append([name, threading.current_thread().name])
    return logger


logging.Manager.getLogger = get_logger

if os.environ.get("APP_SPANS"):
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    trace.set_tracer_provider(provider)


def pytest_unconfigure(config):
    with open(os.environ["LOGGERS_MADE"], "a") as file:
        file.write(json.dumps(made) + "\\n")
'''


@pytest.mark.parametrize("app_spans", ["", "app spans"], ids=["store only", "app spans"])
def test_no_workbench_thread_makes_a_logger_while_the_tests_run(inner, monkeypatch, fake_provider, weather, tmp_path,
                                                                app_spans):
    """pytest enters each test phase by walking logging's table of loggers without logging's lock
    (`_pytest.logging.catching_logs`): a logger first made meanwhile on one of Workbench's threads (the
    price library imported there makes its logger) failed a test with "dictionary changed size during
    iteration". A project's first session, recording then replaying, in processes of their own (a
    logger the outer session made would hide it); its calls priced by the ingester (spans only the
    store sees) or in the session (the app's processor sees them too)."""
    inner.makepyfile(test_libraries=LIBRARIES)
    inner.makeconftest(LOGGERS_MADE_OFF_THE_MAIN_THREAD)
    made = tmp_path / "loggers.jsonl"
    monkeypatch.setenv("LOGGERS_MADE", str(made))
    monkeypatch.setenv("APP_SPANS", app_spans)
    monkeypatch.setenv("WEATHER_URL", f"http://127.0.0.1:{weather.server_port}")
    inner.runpytest_subprocess("--record-mode=once", "-p", "no:cacheprovider").assert_outcomes(passed=8)
    inner.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=8)
    sessions = [json.loads(line) for line in made.read_text().splitlines()]
    assert len(sessions) == 2
    assert [[(name, thread) for name, thread in session if thread.startswith("workbench")] for session in sessions] \
        == [[], []], sessions


def test_vcrpys_patches_are_entered_and_undone_as_use_cassette_does(tmp_path):
    """The attributes Workbench's cassette patches are those vcrpy's `use_cassette` patches, with
    replacements of the same kinds, and after either every attribute is as it was (an inherited
    one removed again)."""
    import http.client

    import aiohttp.client
    import botocore.awsrequest
    import urllib3.connection
    import urllib3.connectionpool
    from vcr import VCR

    from workbench.replay.vcr_patch import use_cassette

    namespaces = [http.client, urllib3.connection, urllib3.connectionpool, urllib3.connectionpool.HTTPConnectionPool,
                  urllib3.connectionpool.HTTPSConnectionPool, aiohttp.client.ClientSession,
                  botocore.awsrequest.AWSHTTPConnectionPool, botocore.awsrequest.AWSHTTPSConnectionPool]

    def state() -> dict:
        return {(index, name): value for index, namespace in enumerate(namespaces)
                for name, value in vars(namespace).items()}

    def patched(before: dict, now: dict) -> dict:
        return {key: type(value).__name__ for key, value in now.items() if before.get(key, object()) is not value}

    vcrpy = VCR(cassette_library_dir=str(tmp_path), record_mode="none")
    options = {"skip_patchers": ("httpx", "httpx2")}
    before = state()
    with vcrpy.use_cassette("theirs.yaml", **options):
        theirs = patched(before, state())
    assert state() == before
    with use_cassette(vcrpy, "ours.yaml", **options) as cassette:
        ours = patched(before, state())
        assert urllib3.connectionpool.HTTPConnectionPool.ConnectionCls.cassette is cassette
    assert state() == before
    assert len(theirs) >= 12 and ours == theirs
