"""pytest-recording's API, served by Workbench (entry point `workbench_vcr`): an existing suite —
`@pytest.mark.vcr(...)`, the `vcr_config`, `vcr_cassette_dir` and `default_cassette_name`
fixtures, `cassettes/<module>/<test>.yaml`, `--record-mode`, `--block-network`, `--allowed-hosts`,
`--disable-recording`, `@pytest.mark.block_network` and the `pytest_recording_configure` hook —
runs unchanged, with its LLM traffic replayed by Workbench.

One file, two carriers: httpx and httpx2 traffic (the LLM SDKs) goes through Workbench's replay
transport, the test's cassette being ambient (`workbench.replay.pytest_plugin.run_in_cassette`);
everything else (requests, urllib3, aiohttp, http.client, ...) is vcrpy's own patching on the same
file (entered as `use_cassette` does, without its cost: `workbench.replay.vcr_patch`). What vcrpy
records is handed to Workbench's session at the end of the test, which alone writes the file
(merged, scrubbed, atomically).

Installed together with pytest-recording, Workbench takes its place: pytest-recording is not loaded
(`pytest -p no:workbench_vcr` gives the suite back to it). One plugin owns the marker, never both.

Record modes: none -> replay; once -> replay when the cassette exists, else record; new_episodes ->
record; all and rewrite -> rerecord. As in pytest-recording, a `record_mode` in `vcr_config` or in
the marker wins over `--record-mode`; `--workbench-record-mode` wins over both."""

from __future__ import annotations

import copy
import hashlib
import os
import re
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from workbench.errors import WorkbenchError
from workbench.replay.pytest_plugin import folder_of, run_in_cassette, workbench_mode

RECORD_MODES = ("once", "new_episodes", "none", "all", "rewrite")
PYTEST_RECORDING = ("recording", "pytest_recording.plugin")  # its entry point, and its module given to -p
_WORKBENCH_MODE = {"none": "replay", "new_episodes": "record", "all": "rerecord", "rewrite": "rerecord"}
_VCRPY_MODE = {"replay": "none", "record": "new_episodes", "rerecord": "all"}
_VCRPY_DEFAULT_MATCH_ON = ("method", "scheme", "host", "port", "path", "query")
_MATCHED_WITHOUT_BODY = pytest.StashKey[list]()
_PLAN = pytest.StashKey[tuple]()  # a test's plan: block_network and vcr both need it
_OPTIONS = (
    ("--record-mode", {"action": "store", "default": None, "choices": RECORD_MODES,
                       "help": 'cassette record mode (pytest-recording\'s; served by Workbench). Default: "none"'}),
    ("--block-network", {"action": "store_true", "default": False,
                         "help": "block network access except for tests that record"}),
    ("--allowed-hosts", {"action": "store", "default": None,
                         "help": "regexes, separated by commas, of hosts --block-network allows"}),
    ("--disable-recording", {"action": "store_true", "default": False, "help": "no cassettes at all"}),
)


class _RecordingHooks:
    """pytest-recording's hook, kept for conftests that implement it."""

    @staticmethod
    def pytest_recording_configure(config, vcr):
        """Called with each vcr-marked test's `vcr.VCR`, before its cassette opens."""


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    if not hasattr(pluginmanager.hook, "pytest_recording_configure"):
        pluginmanager.add_hookspecs(_RecordingHooks)


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    # take pytest-recording's place, whichever of the two was loaded first
    for name, plugin in pluginmanager.list_name_plugin():
        if getattr(plugin, "__name__", None) == "pytest_recording.plugin":
            pluginmanager.set_blocked(name)
    for name in PYTEST_RECORDING:
        pluginmanager.set_blocked(name)
    group = parser.getgroup("recording")  # pytest-recording's group: a displaced copy may have filled it
    present = {name for option in group.options for name in option.names()}
    for name, options in _OPTIONS:
        if name not in present:
            group.addoption(name, **options)


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_MATCHED_WITHOUT_BODY] = []
    for line in (
        "vcr: record and replay the test's HTTP traffic (pytest-recording's marker, served by Workbench)",
        "block_network: block network access except for tests that record",
        "default_cassette: override the default cassette name",
        "allowed_hosts: regexes of hosts to which connections are allowed",
    ):
        config.addinivalue_line("markers", line)


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    if _PLAN in item.stash:  # a rerun of the test (pytest-rerunfailures) plans afresh
        del item.stash[_PLAN]


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    loose = config.stash.get(_MATCHED_WITHOUT_BODY, [])
    if loose:
        terminalreporter.write_line(
            f"workbench: {sum(count for _, count in loose)} request(s) in {len(loose)} test(s) replayed by method "
            f"and path alone, their bodies matching no recording (vcrpy's default match_on has no body; add "
            f"'body' to vcr_config's match_on to make them misses with a diff), e.g. {loose[0][0]}"
        )


# --- pytest-recording's fixtures, same names, scopes and precedence -------------------------------

@pytest.fixture(scope="session")
def record_mode(request: pytest.FixtureRequest) -> str:
    return request.config.getoption("--record-mode") or "none"


@pytest.fixture(scope="session")
def disable_recording(request: pytest.FixtureRequest) -> bool:
    return request.config.getoption("--disable-recording")


@pytest.fixture
def vcr_config() -> dict:
    return {}


@pytest.fixture
def allowed_hosts(request: pytest.FixtureRequest) -> list[str] | None:
    marker = request.node.get_closest_marker("block_network")
    hosts = ((marker.kwargs.get("allowed_hosts") if marker else None) or request.config.getoption("--allowed-hosts")
             or request.getfixturevalue("vcr_config").get("allowed_hosts"))
    return hosts.split(",") if isinstance(hosts, str) else hosts


@pytest.fixture
def vcr_markers(request: pytest.FixtureRequest) -> list[pytest.Mark]:
    return list(request.node.iter_markers(name="vcr"))


@pytest.fixture(scope="module")
def vcr_cassette_dir(request: pytest.FixtureRequest) -> str:
    module = Path(str(request.node.path))
    return str(module.parent / "cassettes" / module.stem)


@pytest.fixture
def default_cassette_name(request: pytest.FixtureRequest) -> str:
    marker = request.node.get_closest_marker("default_cassette")
    if marker is not None:
        if not marker.args:
            raise WorkbenchError("WB_CONFIG_INVALID", f"@pytest.mark.default_cassette without a name in {request.node.nodeid}",
                                 "pass the cassette name: @pytest.mark.default_cassette(\"NAME\")")
        return marker.args[0]
    name = f"{request.cls.__name__}.{request.node.name}" if request.cls else request.node.name
    for character in "<>?%*:|\"'/\\":
        name = name.replace(character, "-")
    return name


@pytest.fixture(autouse=True)
def block_network(request: pytest.FixtureRequest, record_mode: str, vcr_markers: list) -> Iterator[None]:
    marker = request.node.get_closest_marker("block_network")
    if marker is not None and (marker.args or set(marker.kwargs) - {"allowed_hosts"}):
        raise WorkbenchError("WB_CONFIG_INVALID", f"@pytest.mark.block_network{marker.args!r} {marker.kwargs!r} "
                             f"in {request.node.nodeid}", "give it allowed_hosts=[REGEX, ...] or nothing")
    recording = workbench_mode(request) in ("record", "rerecord", "live")
    if vcr_markers:
        recording = recording or _plan(request, vcr_markers, record_mode)[1] != "replay"
    if (marker is not None or request.config.getoption("--block-network")) and not recording:
        with _network_blocked(request.getfixturevalue("allowed_hosts")):
            yield
    else:
        yield


@pytest.fixture(autouse=True)
def vcr(request: pytest.FixtureRequest, vcr_markers: list, record_mode: str, disable_recording: bool):
    """The test's vcrpy cassette (what pytest-recording's fixture gives), or None without the marker.
    Its `data` holds every recording of the file; its play counts count only what vcrpy served."""
    if disable_recording or not vcr_markers:
        yield None
        return
    from workbench.replay.session import Cassette

    path, mode, merged, extras = _plan(request, vcr_markers, record_mode)
    if mode == "live":
        yield None
        return
    from vcr import VCR

    from workbench.replay.vcr_patch import use_cassette

    vcrpy = VCR(path_transformer=VCR.ensure_suffix(path.suffix), cassette_library_dir=str(path.parent),
                record_mode=_VCRPY_MODE[mode])
    documents: dict[Path, dict] = {}  # each file as Workbench's session parsed it, for vcrpy's half
    vcrpy.register_persister(_SharedFile(extras, documents))
    request.config.hook.pytest_recording_configure(config=request.config, vcr=vcrpy)
    options = {**merged, "record_mode": _VCRPY_MODE[mode], "cassette_library_dir": str(path.parent),
               # httpx and httpx2 are Workbench's: vcrpy patching them too would serve the LLM calls itself
               "skip_patchers": tuple({*merged.get("skip_patchers", ()), "httpx", "httpx2"})}
    match_on = merged.get("match_on", _VCRPY_DEFAULT_MATCH_ON)
    session = Cassette(path, mode, also=extras, match_body="body" in match_on or "raw_body" in match_on,
                       filters=_VcrFilters(vcrpy.get_merged_config(**options)), documents=documents)
    with run_in_cassette(request, session), use_cassette(vcrpy, path.name, **_not_twice(vcrpy, options)) as cassette:
        loaded = len(cassette.data)
        yield cassette
        _hand_over(cassette.data[loaded:], session)
    if session.matched_without_body:
        request.config.stash[_MATCHED_WITHOUT_BODY].append((request.node.nodeid, session.matched_without_body))


def _not_twice(vcrpy, options: dict) -> dict:
    """vcrpy's options with a first `before_record_request` that drops (neither plays nor records)
    a request Workbench's cassette is recording already: LiteLLM's async path is an httpx client
    (Workbench's) sending through aiohttp (vcrpy's), and would be recorded twice. The user's own
    hooks follow it, as given in the options or set on the `VCR` by `pytest_recording_configure`."""
    from workbench.replay.transport import RECORDING_INTO_CASSETTE

    hooks = options.get("before_record_request", options.get("before_record", vcrpy.before_record_request))
    hooks = list(hooks) if isinstance(hooks, (list, tuple)) else [hooks] if hooks else []

    def not_workbenchs(vcr_request):
        return None if RECORDING_INTO_CASSETTE.get() else vcr_request

    return {**options, "before_record_request": [not_workbenchs, *hooks]}


# --- the cassette of a vcr-marked test ------------------------------------------------------------

def _plan(request: pytest.FixtureRequest, markers: list, record_mode: str) -> tuple[Path, str, dict, list[Path]]:
    """The cassette's path, Workbench's mode, the merged vcr options and the extra cassettes, as
    pytest-recording resolves them, except that relative folders start at the test file. Worked out
    once per test (it deep-copies vcr_config and asks the file system whether the cassette exists)."""
    plan = request.node.stash.get(_PLAN, None)
    if plan is None:
        plan = request.node.stash[_PLAN] = _resolve_plan(request, markers, record_mode)
    return plan


def _resolve_plan(request: pytest.FixtureRequest, markers: list, record_mode: str) -> tuple[Path, str, dict, list[Path]]:
    merged = copy.deepcopy(request.getfixturevalue("vcr_config"))
    for marker in reversed(markers):
        merged.update(marker.kwargs)
    folder = folder_of(request.node) / (merged.get("cassette_library_dir") or request.getfixturevalue("vcr_cassette_dir"))
    suffix = "." + merged.get("serializer", "yaml")
    name = request.getfixturevalue("default_cassette_name")
    if len(name) + len(suffix) > _MAX_NAME:  # pytest-recording's rule for over-long names
        digest = hashlib.md5(name.encode()).hexdigest()  # noqa: S324 - a file name, not security
        name = f"{name[: _MAX_NAME - len(suffix) - len(digest) - 3]}...{digest}"
    path = folder / (name if name.endswith(suffix) else name + suffix)
    vcr_mode = merged.get("record_mode", record_mode)
    mode = request.config.getoption("--workbench-record-mode")
    if mode is None:
        mode = ("replay" if path.exists() else "record") if vcr_mode == "once" else _WORKBENCH_MODE.get(vcr_mode)
    if mode is None:
        raise WorkbenchError("WB_CONFIG_INVALID", f"record_mode {vcr_mode!r} (vcr_config or @pytest.mark.vcr) "
                             f"in {request.node.nodeid}", f"use one of: {', '.join(RECORD_MODES)}")
    extras = [folder / extra for marker in markers for extra in marker.args]  # an absolute one stays absolute
    return path, mode, merged, extras


try:
    _MAX_NAME = os.pathconf(".", "PC_NAME_MAX")
except (AttributeError, ValueError, OSError):
    _MAX_NAME = 255


class _SharedFile:
    """vcrpy's persister: it reads the cassette and the marker's extra cassettes (as
    pytest-recording's does) and writes nothing: Workbench's session owns the file. A file the
    session has parsed already (with its bounds) is not parsed again: vcrpy builds its requests and
    responses from that document, as its own yaml or json serializer would have given it."""

    def __init__(self, extras: list[Path], documents: dict[Path, dict]) -> None:
        self.extras = extras
        self.documents = documents

    def load_cassette(self, cassette_path, serializer):
        from vcr.persisters.filesystem import CassetteNotFoundError, FilesystemPersister
        from vcr.serialize import deserialize
        from vcr.serializers import jsonserializer, yamlserializer

        shared = serializer in (yamlserializer, jsonserializer)  # a serializer of the user's reads its own way
        requests, responses = [], []
        for path in dict.fromkeys([Path(cassette_path), *self.extras]):
            document = self.documents.pop(path, None) if shared else None
            try:
                loaded = deserialize(document, _Parsed) if document is not None \
                    else FilesystemPersister.load_cassette(path, serializer)
            except CassetteNotFoundError:
                continue
            requests += loaded[0]
            responses += loaded[1]
        if not requests:
            raise CassetteNotFoundError()
        return requests, responses

    @staticmethod
    def save_cassette(cassette_path, cassette_dict, serializer) -> None:
        pass


class _Parsed:
    """A vcrpy serializer over a document parsed already."""

    @staticmethod
    def deserialize(document: dict) -> dict:
        return document


def _hand_over(recorded: list, session) -> None:
    """What vcrpy recorded in this test (its filters already applied), into Workbench's session."""
    if not recorded:
        return
    from vcr.serialize import serialize
    from vcr.serializers import yamlserializer

    from workbench.replay.cassette import parse_cassette

    text = serialize({"requests": [r for r, _ in recorded], "responses": [r for _, r in recorded]}, yamlserializer)
    for interaction in parse_cassette(text, str(session.path)):
        session.record(interaction)


class _VcrFilters:
    """vcrpy's `before_record_request` / `before_record_response` chains (filter_headers,
    filter_query_parameters, filter_post_data_parameters, ignore_hosts, ignore_localhost,
    decode_compressed_response and the user's hooks) over Workbench's recordings. As in vcrpy, a
    live request goes through the request chain before it is matched, and a request the chain drops
    (an ignored host) bypasses the cassette."""

    def __init__(self, config: dict) -> None:
        self.before_request = config["before_record_request"]
        self.before_response = config["before_record_response"]
        self.no_request_filter = _empty_chain(self.before_request)

    def request(self, recorded):
        from vcr.request import Request

        from workbench.replay.cassette import RecordedRequest

        headers = {name: ", ".join(values) for name, values in recorded.headers.items()}
        if self.no_request_filter:  # what the round trip through vcrpy's Request gives, without it
            return RecordedRequest.model_construct(method=recorded.method, uri=recorded.uri, body=recorded.body or b"",
                                                   headers={name: [value] for name, value in headers.items()})
        request = self.before_request(Request(recorded.method, recorded.uri, recorded.body or None, headers))
        if request is None:
            return None
        body = request.body
        return RecordedRequest.model_construct(
            method=request.method, uri=request.uri, headers={name: [value] for name, value in request.headers.items()},
            body=body if isinstance(body, bytes) else (body or "").encode(),
        )

    def response(self, recorded):
        from workbench.replay.cassette import RecordedResponse

        response = self.before_response({
            "status": {"code": recorded.status, "message": recorded.reason},
            "headers": {name: list(values) for name, values in recorded.headers.items()},
            "body": {"string": recorded.body},
        })
        if response is None:
            return None
        body = response["body"]["string"]
        return RecordedResponse(
            status=response["status"]["code"], reason=response["status"].get("message") or "",
            headers={name: list(values) if isinstance(values, list) else [values]
                     for name, values in response["headers"].items()},
            body=body if isinstance(body, bytes) else body.encode(),
        )


def _empty_chain(chain) -> bool:
    """Whether a `before_record_*` chain vcrpy built holds no function (no filter_* option, no
    ignored host, no hook): the list its closure calls, `filter_functions`, is empty. A chain of
    another shape counts as not empty, and runs."""
    code, closure = getattr(chain, "__code__", None), getattr(chain, "__closure__", None)
    if code is None or not closure:
        return False
    cells = dict(zip(code.co_freevars, closure))
    functions = cells["filter_functions"].cell_contents if "filter_functions" in cells else None
    return isinstance(functions, list) and not functions


# --- --block-network -------------------------------------------------------------------------------

class NetworkBlocked(WorkbenchError, RuntimeError):
    """A connection refused under --block-network: `WB_NETWORK_BLOCKED`, and a RuntimeError whose
    message says "Network is disabled for host ...", as pytest-recording's."""


@contextmanager
def _network_blocked(allowed: list[str] | None) -> Iterator[None]:
    """Refuse connections to hosts that `allowed` (regexes) does not match; Unix sockets are not
    network and pass."""
    pattern = re.compile("(" + ")|(".join(allowed) + ")") if allowed else None
    originals = socket.socket.connect, socket.socket.connect_ex

    def guard(original):
        def connect(self, address, *args, **kwargs):
            if self.family in (socket.AF_INET, socket.AF_INET6):
                host = address[0]
                host = host.decode() if isinstance(host, (bytes, bytearray)) else str(host)
                if pattern is None or not pattern.match(host):
                    raise NetworkBlocked(
                        "WB_NETWORK_BLOCKED",
                        f"Network is disabled for host {host!r}: the test runs under --block-network or "
                        f"@pytest.mark.block_network and does not record",
                        "record the test's traffic (pytest --record-mode=once), or allow the host: "
                        "@pytest.mark.block_network(allowed_hosts=[...]) or --allowed-hosts=REGEX",
                    )
            return original(self, address, *args, **kwargs)

        return connect

    socket.socket.connect, socket.socket.connect_ex = guard(originals[0]), guard(originals[1])
    try:
        yield
    finally:
        socket.socket.connect, socket.socket.connect_ex = originals
