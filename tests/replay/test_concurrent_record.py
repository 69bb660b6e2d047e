"""Several processes recording into one cassette at once: every interaction ends up in one
loadable file (atomic writes, merged under a lock)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import workbench

WORKER = textwrap.dedent("""
    import sys
    import workbench
    from workbench.demo.fake_provider import FakeProvider, FakeTransport

    worker, path, count = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    mode = sys.argv[4] if len(sys.argv) > 4 else "record"
    client = workbench.http_client(cassette=path, mode=mode, transport=FakeTransport(FakeProvider()))
    for n in range(count):
        body = {"model": "wbt-gpt", "messages": [{"role": "user", "content": f"worker {worker} request {n}"}]}
        assert client.post("http://fake.test/v1/chat/completions", json=body).status_code == 200
    client.close()
""")


def test_four_processes_record_into_one_cassette(tmp_path):
    path = tmp_path / "shared.json"
    env = {**os.environ, "WORKBENCH_DB": str(tmp_path / "wb.duckdb"), "WORKBENCH_CAPTURE": "false"}
    workers = [subprocess.Popen([sys.executable, "-c", WORKER, str(n), str(path), "20"], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE) for n in range(4)]
    for worker in workers:
        _, err = worker.communicate(timeout=120)
        assert worker.returncode == 0, err.decode()

    data = json.loads(path.read_text())
    texts = [json.loads(i["request"]["body"])["messages"][0]["content"] for i in data["interactions"]]
    assert len(texts) == 80
    assert sorted(texts) == sorted(f"worker {w} request {n}" for w in range(4) for n in range(20))
    assert [t for t in texts if t.startswith("worker 0 ")] == [f"worker 0 request {n}" for n in range(20)]
    assert len(data["workbench"]["request_hashes"]) == 80
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".shared.json.")]  # no temporary left

    # and every one replays
    client = workbench.http_client(cassette=path, mode="replay")
    for text in texts:
        body = {"model": "wbt-gpt", "messages": [{"role": "user", "content": text}]}
        response = client.post("http://fake.test/v1/chat/completions", json=body)
        assert response.json()["choices"][0]["message"]["content"] == f"echo: {text}"


def _texts(path) -> list[str]:
    return [json.loads(i["request"]["body"])["messages"][0]["content"] for i in json.loads(path.read_text())["interactions"]]


def test_workers_of_one_rerecord_run_keep_each_others_recordings_and_drop_the_old(tmp_path):
    """`rerecord` under pytest-xdist: the workers of one run share the cassette (none overwrites
    another), and what runs before them recorded is gone."""
    path = tmp_path / "shared.json"
    env = {**os.environ, "WORKBENCH_DB": str(tmp_path / "wb.duckdb"), "WORKBENCH_CAPTURE": "false"}
    old = subprocess.run([sys.executable, "-c", WORKER, "9", str(path), "3"], env=env, capture_output=True, text=True)
    assert old.returncode == 0, old.stderr
    assert len(_texts(path)) == 3

    run = {**env, "PYTEST_XDIST_TESTRUNUID": "run-1"}
    workers = [subprocess.Popen([sys.executable, "-c", WORKER, str(n), str(path), "20", "rerecord"], env=run,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE) for n in range(3)]
    for worker in workers:
        _, err = worker.communicate(timeout=120)
        assert worker.returncode == 0, err.decode()
    assert sorted(_texts(path)) == sorted(f"worker {w} request {n}" for w in range(3) for n in range(20))

    again = subprocess.run([sys.executable, "-c", WORKER, "5", str(path), "2", "rerecord"],
                           env={**env, "PYTEST_XDIST_TESTRUNUID": "run-2"}, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert _texts(path) == ["worker 5 request 0", "worker 5 request 1"]  # a new run rerecords everything


def test_sessions_saving_in_turn_keep_each_others_recordings_and_a_hand_edit(tmp_path, monkeypatch):
    """A session saves from what it last wrote while the file is still that one; once another
    session (or a person) changed the file, it reads and scrubs the file again before it merges."""
    from workbench.replay.cassette import Interaction, RecordedRequest, RecordedResponse, load_cassette
    from workbench.replay.session import Cassette

    monkeypatch.setenv("WORKBENCH_DB", str(tmp_path / "wb.duckdb"))
    path = tmp_path / "turns.json"

    def interaction(text: str) -> Interaction:
        body = json.dumps({"model": "m", "messages": [{"role": "user", "content": text}]}).encode()
        return Interaction(request=RecordedRequest(uri="http://fake.test/v1/chat/completions", body=body),
                           response=RecordedResponse(status=200, body=b'{"ok": true}'))

    first, second = Cassette(path, "record"), Cassette(path, "record")

    def record(session: Cassette, text: str) -> None:
        session.record(interaction(text))
        session.save()  # a save right away, whatever the last one took

    record(first, "a1")
    record(second, "b1")
    record(first, "a2")
    data = json.loads(path.read_text())
    key = "sk-proj-" + "Z" * 40
    data["interactions"][0]["request"]["headers"] = {"Authorization": [f"Bearer {key}"]}  # pasted in by hand
    path.write_text(json.dumps(data))
    record(second, "b2")
    record(first, "a3")

    texts = [json.loads(item.request.body)["messages"][0]["content"] for item in load_cassette(path)]
    assert texts == ["a1", "b1", "a2", "b2", "a3"]
    assert key not in path.read_text()
    assert len(json.loads(path.read_text())["workbench"]["request_hashes"]) == 5
