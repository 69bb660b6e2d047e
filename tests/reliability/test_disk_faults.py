"""A full disk and a read-only one, made for real: a small tmpfs mounted in a private mount namespace
(`unshare`), filled, or remounted read-only. Recording goes on through a full disk and loses
nothing once space returns; a store is never left half-made; reports read a store they cannot
write."""

from __future__ import annotations

import json

from reliability.faults import count, in_namespace

APP = r"""
import sys, workbench
url, calls = sys.argv[1], int(sys.argv[2])
client = workbench.http_client()
for index in range(calls):
    reply = client.post(url + "/v1/chat/completions",
                        json={"model": "m", "messages": [{"role": "user", "content": f"call {index}"}]})
    assert reply.status_code == 200
workbench.flush()  # never raises, full disk or not
print("app ok")
"""


def test_a_full_disk_while_the_store_is_created_leaves_no_half_store(tmp_path, mount_namespace, fake_url):
    (tmp_path / "app.py").write_text(APP)
    script = f"""
    mkdir -p disk && mount -t tmpfs -o size=400k tmpfs disk
    export WORKBENCH_DB=$PWD/disk/.workbench/wb.duckdb
    $PY app.py {fake_url} 5                       # the store (about 800 KB new) cannot be made here
    ls -la disk/.workbench > listing.txt
    $PY -m workbench report cost --db $WORKBENCH_DB > full.out 2>&1 || echo "exit $?" >> full.out
    mount -o remount,size=16m disk                # space returns (a checkpointed store of every table is over 4 MB)
    $PY -m workbench report cost --db $WORKBENCH_DB --format json > after.out
    cp $WORKBENCH_DB store.duckdb
    """
    result = in_namespace(mount_namespace, script, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "app ok" in result.stdout  # the application never saw the full disk
    listing = (tmp_path / "listing.txt").read_text()
    assert not any(line.endswith(" wb.duckdb") for line in listing.splitlines()), listing  # no store at all rather than a 0-byte one
    full = (tmp_path / "full.out").read_text()
    assert "WB_STORE_UNWRITABLE" in full and "No space left" in full and "Traceback" not in full, full
    assert '"calls": 5' in (tmp_path / "after.out").read_text()
    assert count(tmp_path / "store.duckdb", "SELECT count(*) FROM calls") == 5


def test_a_store_on_a_full_disk_loses_nothing_and_resumes_when_space_returns(tmp_path, mount_namespace, fake_url):
    (tmp_path / "app.py").write_text(APP)
    script = f"""
    # room for the store to checkpoint once space returns (a store of every table, rollups included,
    # and its checkpoint's new blocks, is about 8 MB): the copy below is of the file, without its WAL
    mkdir -p disk spool && mount -t tmpfs -o size=16m tmpfs disk
    export WORKBENCH_DB=$PWD/disk/wb.duckdb WORKBENCH_SPOOL_DIR=$PWD/spool
    $PY app.py {fake_url} 20                      # a store with 20 calls
    head -c $(( $(df --output=avail -B1 disk | tail -1) )) /dev/zero > disk/filler 2>/dev/null || true
    $PY app.py {fake_url} 100 2> full.err         # recorded while the store's disk is full
    $PY -m workbench report cost --db $WORKBENCH_DB --format json > full.out 2>&1 || echo "exit $?" >> full.out
    rm disk/filler                                # space returns
    $PY -m workbench report cost --db $WORKBENCH_DB --format json > after.out
    cp $WORKBENCH_DB store.duckdb
    ls spool > spool.txt
    """
    result = in_namespace(mount_namespace, script, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("app ok") == 2
    assert "Traceback" not in (tmp_path / "full.err").read_text()
    assert "Traceback" not in (tmp_path / "full.out").read_text()
    assert count(tmp_path / "store.duckdb", "SELECT count(*) FROM calls") == 120  # every one, once
    assert count(tmp_path / "store.duckdb", "SELECT count(DISTINCT call_id) FROM calls") == 120
    assert '"calls": 120' in (tmp_path / "after.out").read_text()


RECORDING_APP = r"""
import os, sys, openai, workbench
url, cassette = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0,
                       http_client=workbench.http_client(cassette=cassette, mode="record"))
def ask(index):
    reply = client.chat.completions.create(model="wbt-gpt", messages=[{"role": "user", "content": f"call {index}"}])
    assert reply.choices[0].message.content
for index in range(5):
    ask(index)                      # the cassette's disk is full: each call still returns
print("calls ok while full")
os.remove("disk/filler")           # space returns
ask(5)
client.close()
workbench.flush()
print("app ok")
"""


def test_a_cassette_on_a_full_disk_never_breaks_the_app_and_loses_no_recording(tmp_path, mount_namespace, fake_url):
    (tmp_path / "app.py").write_text(RECORDING_APP)
    script = f"""
    mkdir -p disk && mount -t tmpfs -o size=1m tmpfs disk && mkdir disk/cassettes
    head -c $(( $(df --output=avail -B1 disk | tail -1) )) /dev/zero > disk/filler 2>/dev/null || true
    $PY app.py {fake_url} disk/cassettes/chat.json 2> app.err
    cp disk/cassettes/chat.json chat.json
    """
    result = in_namespace(mount_namespace, script, cwd=tmp_path,
                          env={"WORKBENCH_DB": str(tmp_path / "wb.duckdb"), "WORKBENCH_MODELS": "none.toml"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "calls ok while full" in result.stdout and "app ok" in result.stdout
    errors = (tmp_path / "app.err").read_text()
    assert "Traceback" not in errors, errors
    assert errors.count("WB_CASSETTE_UNWRITABLE") == 1 and "No space left" in errors, errors  # said once
    # what could not be written waited for the space: all six recordings, once each, in order
    interactions = json.loads((tmp_path / "chat.json").read_text())["interactions"]
    prompts = [json.loads(item["request"]["body"])["messages"][0]["content"] for item in interactions]
    assert prompts == [f"call {index}" for index in range(6)]
    assert count(tmp_path / "wb.duckdb", "SELECT count(*) FROM calls") == 6


def test_reports_read_a_store_on_a_read_only_file_system(tmp_path, mount_namespace, fake_url):
    (tmp_path / "app.py").write_text(APP)
    script = f"""
    mkdir -p disk && mount -t tmpfs -o size=8m tmpfs disk
    export WORKBENCH_DB=$PWD/disk/wb.duckdb
    $PY app.py {fake_url} 7
    # read-only once the ingester the app started at exit lets go of the disk (busy until then)
    for attempt in $(seq 120); do mount -o remount,ro disk 2>/dev/null && break; sleep 0.5; done
    touch disk/probe 2>/dev/null && echo "still writable"
    $PY -m workbench report cost --db $WORKBENCH_DB --format json > cost.out
    $PY -m workbench runs list --db $WORKBENCH_DB --format json > runs.out
    $PY -m workbench report quarantine --db $WORKBENCH_DB --format json > quarantine.out
    """
    result = in_namespace(mount_namespace, script, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "still writable" not in result.stdout
    assert '"calls": 7' in (tmp_path / "cost.out").read_text()
    assert (tmp_path / "quarantine.out").read_text().strip() == "[]"
