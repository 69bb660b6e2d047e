"""Nothing recorded is lost: scripts that exit a moment after their calls (returning, raising,
`sys.exit`, Ctrl-C, with the app's own tracing shut down first), a process killed once its spool is
written, a stream abandoned without a close while the cycle collector is off, an async stream whose
end arrives late, and a record the store cannot take (quarantined, never blocking the rest)."""

from __future__ import annotations

import json
import signal
import socket

import pytest

import workbench
from fixtures.capture_store import Store, register_test_models
from reliability.faults import count, ingesters_of, run_python, workbench_cli
from workbench.config import spool_dir_of
from workbench.demo.fake_provider import Reply
from workbench.store.ingest import ingest_spools

CALLS = 25

EXITING_APP = r"""
import os, signal, sys, time
import workbench
url, calls, how = sys.argv[1], int(sys.argv[2]), sys.argv[3]
if how == "tracing-shut-down":
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    trace.set_tracer_provider(TracerProvider())
client = workbench.http_client()
for index in range(calls):
    client.post(url + "/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": f"call {index}"}]})
if how == "raise":
    raise RuntimeError("the script fails right after its calls")
if how == "sys.exit":
    sys.exit(3)
if how == "ctrl-c":
    raise KeyboardInterrupt
if how == "tracing-shut-down":
    trace.get_tracer_provider().shutdown()  # the app's own exit code shuts OpenTelemetry down first
if how == "kill-9":
    from workbench.config import spool_dir_of
    from pathlib import Path
    spool = str(spool_dir_of(Path(os.environ["WORKBENCH_DB"])))
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:  # the spool thread writes within flush_interval_s
        lines = sum(open(os.path.join(spool, f), "rb").read().count(b'"kind":"call"')
                    for f in os.listdir(spool) if f.endswith(".jsonl")) if os.path.isdir(spool) else 0
        if lines >= calls:
            break
        time.sleep(0.05)
    os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize("how", ["return", "raise", "sys.exit", "ctrl-c", "tracing-shut-down", "kill-9"])
def test_a_script_that_exits_right_after_its_calls_keeps_every_one(tmp_path, fake_url, how):
    db = tmp_path / ".workbench" / "wb.duckdb"
    # a long interval: the exit comes before the spool thread's first write, as for a short script
    interval = "0.05" if how == "kill-9" else "30"
    result = run_python(EXITING_APP, fake_url, str(CALLS), how, cwd=tmp_path,
                        env={"WORKBENCH_DB": str(db), "WORKBENCH_FLUSH_INTERVAL_S": interval})
    expected = {"return": 0, "raise": 1, "sys.exit": 3, "ctrl-c": 1, "tracing-shut-down": 0, "kill-9": -signal.SIGKILL}
    assert result.returncode in (expected[how], -signal.SIGINT), result.stderr
    assert "workbench could not" not in result.stderr, result.stderr
    ingest_spools(db, spool_dir_of(db), wait=True)  # what the exit's detached ingester has not done yet
    assert count(db, "SELECT count(*) FROM calls") == CALLS
    if how != "kill-9":  # spans are written with their call; a kill may take the last ones
        assert count(db, "SELECT count(*) FROM spans WHERE name LIKE 'chat%'") == CALLS


def test_a_program_that_flushed_leaves_no_ingester_behind_when_it_exits(tmp_path, fake_url):
    """After `workbench.flush()` everything is in the store: the exit starts no ingester that
    would hold the store while the next program (a test, a report) opens it."""
    db = tmp_path / ".workbench" / "wb.duckdb"
    result = run_python(
        "import sys, workbench\n"
        "client = workbench.http_client()\n"
        "for index in range(3):\n"
        "    client.post(sys.argv[1] + '/v1/chat/completions', json={'model': 'm', 'messages': [{'role': 'user', 'content': f'call {index}'}]})\n"
        "workbench.flush()\n",
        fake_url, cwd=tmp_path, env={"WORKBENCH_DB": str(db), "WORKBENCH_FLUSH_INTERVAL_S": "0.01"})
    assert result.returncode == 0, result.stderr
    assert ingesters_of(db) == {}
    assert count(db, "SELECT count(*) FROM calls") == 3


LINGERING_APP = r"""
import atexit, os, sys, time
from pathlib import Path
import workbench
db = os.environ["WORKBENCH_DB"].encode()

def ingesting():
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if db in args and any(b"ingest_spools" in arg for arg in args):
            return True
    return False

def linger():  # runs after Workbench's exit flush: the process is still alive while its ingester works
    deadline, seen = time.monotonic() + 60, False
    while time.monotonic() < deadline:
        busy = ingesting()
        if seen and not busy:
            return
        seen = seen or busy
        time.sleep(0.05)

atexit.register(linger)
client = workbench.http_client()
for index in range(3):
    client.post(sys.argv[1] + "/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": f"call {index}"}]})
"""


def test_the_exit_ingester_removes_the_spool_file_of_a_process_still_exiting(tmp_path, fake_url):
    """A process whose exit outlasts its exit ingester (a test suite tearing down) hands its spool
    file over: the ingester stores its calls and removes the file, instead of leaving it, read to
    its end, to whichever reader comes next."""
    db = tmp_path / ".workbench" / "wb.duckdb"
    result = run_python(LINGERING_APP, fake_url, cwd=tmp_path, env={"WORKBENCH_DB": str(db)})
    assert result.returncode == 0, result.stderr
    assert ingesters_of(db) == {}
    assert sorted(path.name for path in spool_dir_of(db).glob("*.jsonl")) == []
    assert count(db, "SELECT count(*) FROM calls") == 3


ABANDONING_APP = r"""
import asyncio, gc, sys
import openai, workbench
gc.disable()  # the cycle collector never runs: an unclosed stream is never finalized
url, kind = sys.argv[1], sys.argv[2]
if kind == "sync":
    client = openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0, http_client=workbench.http_client())
    stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "a long answer"}],
                                            stream=True)
    for chunk in stream:
        break  # abandoned, never closed
    keep = [stream, stream]  # and held in a cycle, as frameworks do
    keep.append(keep)
else:
    async def main():
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="k", max_retries=0,
                                    http_client=workbench.async_http_client())
        stream = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}],
                                                      stream=True, stream_options={"include_usage": True})
        async for chunk in stream:
            pass
    asyncio.run(main())
"""


def test_a_stream_abandoned_without_close_is_recorded_when_the_collector_never_runs(tmp_path, fake_url, fake_provider):
    fake_provider.script(Reply(text="one two three four five six seven eight nine ten " * 20))
    db = tmp_path / ".workbench" / "wb.duckdb"
    result = run_python(ABANDONING_APP, fake_url, "sync", cwd=tmp_path, env={"WORKBENCH_DB": str(db)})
    assert result.returncode == 0, result.stderr
    ingest_spools(db, spool_dir_of(db), wait=True)
    assert count(db, "SELECT count(*) FROM calls WHERE error_type = 'stream_abandoned' AND NOT settled") == 1


def test_a_complete_async_stream_whose_end_arrives_late_is_not_cut(tmp_path, fake_url, fake_provider):
    # the OpenAI SDK waits 0.1 s for the connection's end after [DONE], then cancels its drain
    fake_provider.script(Reply(text="complete answer", linger_s=0.4))
    db = tmp_path / ".workbench" / "wb.duckdb"
    result = run_python(ABANDONING_APP, fake_url, "async", cwd=tmp_path, env={"WORKBENCH_DB": str(db)})
    assert result.returncode == 0, result.stderr
    ingest_spools(db, spool_dir_of(db), wait=True)
    con_rows = count(db, "SELECT count(*) FROM calls WHERE error_type IS NULL AND settled AND output_tokens > 0")
    assert con_rows == 1, count(db, "SELECT count(*) FROM calls")


HUGE = 2**64 - 1


def _cassette_with_usage(path, completion_tokens: int) -> None:
    body = {"id": "c", "object": "chat.completion", "model": "wbt-gpt",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": completion_tokens, "total_tokens": completion_tokens}}
    request = {"model": "wbt-gpt", "messages": [{"role": "user", "content": "replayed"}]}
    path.write_text(json.dumps({"interactions": [{
        "request": {"method": "POST", "uri": "http://api.example/v1/chat/completions", "headers": {},
                    "body": json.dumps(request)},
        "response": {"status": {"code": 200, "message": "OK"}, "headers": {"content-type": ["application/json"]},
                     "body": {"string": json.dumps(body)}}}], "version": 1}))


@pytest.mark.parametrize("completion_tokens", [HUGE, 2**70])
def test_a_record_the_store_cannot_take_is_quarantined_and_blocks_nothing(tmp_path, fake_url, completion_tokens):
    import openai

    register_test_models()
    workbench.configure(db=tmp_path / "wb.duckdb")
    store = Store(tmp_path / "wb.duckdb")
    _cassette_with_usage(tmp_path / "huge.json", completion_tokens)
    replayed = openai.OpenAI(base_url="http://api.example/v1", api_key="k", max_retries=0,
                             http_client=workbench.http_client(cassette=tmp_path / "huge.json", mode="replay"))
    replayed.chat.completions.create(model="wbt-gpt", messages=[{"role": "user", "content": "replayed"}])
    workbench.flush()  # never raises into the application
    live = openai.OpenAI(base_url=fake_url + "/v1", api_key="k", max_retries=0, http_client=workbench.http_client())
    for _ in range(3):
        live.chat.completions.create(model="wbt-gpt", messages=[{"role": "user", "content": "after it"}])
    workbench.flush()
    assert store.rows("SELECT count(*) AS n FROM calls WHERE NOT replayed")[0]["n"] == 3
    quarantined = store.rows("SELECT kind, reason, record FROM quarantine")
    assert quarantined and all(row["kind"] in ("call", "span") for row in quarantined), quarantined
    assert any("out of range" in row["reason"] and str(completion_tokens) in row["record"] for row in quarantined)
    # the dashboard's named query and `workbench check` show it
    from workbench.store import queries

    frame = queries.read(tmp_path / "wb.duckdb", spool_dir_of(tmp_path / "wb.duckdb"), queries.quarantined_records)
    assert frame.height == len(quarantined) and "out of range" in frame["reason"][0]
    checked = workbench_cli("check", cwd=tmp_path, env={"WORKBENCH_DB": str(tmp_path / "wb.duckdb")})
    assert "quarantine" in checked.stdout + checked.stderr and "out of range" in checked.stdout + checked.stderr


def test_lines_no_table_can_take_are_quarantined_and_the_rest_ingested(tmp_path):
    spool = tmp_path / "spool"
    spool.mkdir()
    dead = f"{socket.gethostname()}-999999999-0badf11e.jsonl"  # its writer is gone

    def line(kind, row):
        return (json.dumps({"kind": kind, "row": row}) + "\n").encode()

    (spool / dead).write_bytes(
        line("call", {"call_id": "ok-1", "input_tokens": 1})
        + b'{"kind": "call", "row": {"call_id": "to\n'  # torn by a crash, then appended to again
        + line("call", {"call_id": "bad-int", "input_tokens": "many"})
        + line("call", {"call_id": None, "input_tokens": 1})
        + line("a_kind_from_the_future", {"x": 1})
        + line("run", {"run_id": "r", "billed_calls": 2**40})  # INTEGER column
        + b"[1, 2, 3]\n"
        + line("call", {"call_id": "ok-2", "started_at": "2025-01-01T00:00:00+00:00"})
        + line("call", {"call_id": "bad-time", "started_at": "yesterday at noon"})  # only DuckDB can tell
        + b'{"kind": "call", "row": {"call_id": "torn-tail"')  # its writer died mid-write
    assert ingest_spools(tmp_path / "wb.duckdb", spool) == 2
    db = tmp_path / "wb.duckdb"
    assert count(db, "SELECT count(*) FROM calls") == 2
    assert count(db, "SELECT count(*) FROM quarantine") == 8
    assert count(db, "SELECT count(*) FROM quarantine WHERE reason LIKE 'the store refused it:%'") == 1
    assert not (spool / dead).exists()
    assert ingest_spools(db, spool) == 0 and count(db, "SELECT count(*) FROM quarantine") == 8  # idempotent


STARVED_APP = r"""
import logging, os, resource, sys, time
import workbench
logging.basicConfig(level=logging.WARNING, format="%(name)s %(message)s")
url, calls = sys.argv[1], int(sys.argv[2])
client = workbench.http_client()
body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
assert client.post(url + "/v1/chat/completions", json=body).status_code == 200  # the connection stays open
workbench.flush()
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (max(int(fd) for fd in os.listdir("/proc/self/fd")) + 1, hard))
fillers = []
while True:  # take every descriptor left below the limit: the process cannot open one more file
    try:
        fillers.append(os.open("/dev/null", os.O_RDONLY))
    except OSError:
        break
statuses = [client.post(url + "/v1/chat/completions", json=body).status_code for _ in range(calls)]
time.sleep(1.0)  # the spool thread tries to write, and cannot open its file
for fd in fillers:
    os.close(fd)
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
workbench.flush()
print("statuses", sorted(set(statuses)))
"""


def test_a_process_starved_of_file_descriptors_keeps_its_calls_and_records_them_later(tmp_path, fake_url):
    db = tmp_path / ".workbench" / "wb.duckdb"
    result = run_python(STARVED_APP, fake_url, "20", cwd=tmp_path,
                        env={"WORKBENCH_DB": str(db), "WORKBENCH_FLUSH_INTERVAL_S": "0.05"})
    assert result.returncode == 0, result.stderr
    assert "statuses [200]" in result.stdout  # every call of the application went through
    assert result.stderr.count("workbench could not write") == 1, result.stderr  # logged once
    ingest_spools(db, spool_dir_of(db), wait=True)
    assert count(db, "SELECT count(*) FROM calls") == 21


HOGGING_APP = r"""
import os, signal, sys
import workbench
from workbench.demo.fake_provider import FakeProvider, FakeTransport
from workbench.store.spool import MAX_DEFERRED
sys.setswitchinterval(30)  # the app's thread keeps the interpreter: the spool thread barely runs
client = workbench.http_client(transport=FakeTransport(FakeProvider()))
for index in range(int(sys.argv[1])):
    client.post("http://fake.test/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": f"call {index}"}]})
print(MAX_DEFERRED, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_an_app_faster_than_its_spool_thread_loses_only_what_waits_when_killed(tmp_path):
    """Calls made faster than the spool thread records them (here it barely gets the interpreter) wait
    in memory, and a SIGKILL loses what waits: past MAX_DEFERRED of them the app's own thread records
    them, so a kill loses at most that many, not every call since the spool thread last ran."""
    db = tmp_path / ".workbench" / "wb.duckdb"
    calls = 3000
    result = run_python(HOGGING_APP, str(calls), cwd=tmp_path, env={"WORKBENCH_DB": str(db)})
    assert result.returncode == -signal.SIGKILL, result.stderr
    ingest_spools(db, spool_dir_of(db), wait=True)
    stored = count(db, "SELECT count(*) FROM calls") if db.exists() else 0  # no store: nothing was written
    assert calls - int(result.stdout) <= stored <= calls
