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
    client = workbench.http_client(cassette=path, mode="record", transport=FakeTransport(FakeProvider()))
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
