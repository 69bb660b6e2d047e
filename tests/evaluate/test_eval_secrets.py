"""A target's output that quotes a key, a known one or the credential its call sent (a provider
echoed it into the SDK's error), is masked before the store, the reports and the baseline keep it.
Through `workbench eval`, against a hostile provider on 127.0.0.1, with the real openai SDK."""

from __future__ import annotations

import json

import duckdb

from eval_support import dedent, workbench_cli
from fixtures.hostile import serve_hostile
from workbench.config import spool_dir_of
from workbench.store.ingest import ingest_spools

KEY = "sk-" + "proj-" + "Xq3vT7bN" + "w9LkZp2R" + "yF4hJ6sD" + "8gA1cV5m"  # in pieces: none in the tree
ECHOED = "cnryEcho" + "7f3a9c1e"  # shaped like no key

SUITE = dedent('''
    import json, pathlib
    import openai
    import workbench
    from workbench.evaluate import define_eval, define_prompt, contains

    SETTINGS = json.loads((pathlib.Path(__file__).parent / "settings.json").read_text())
    PROMPT = define_prompt("leaky", "v1", system="Answer.", template="{{case}}")


    def target(vars, ctx):
        if vars["case"] == "quotes":
            return "the key is " + SETTINGS["key"]
        client = openai.OpenAI(base_url=SETTINGS["url"], api_key=SETTINGS["sent"], max_retries=0,
                               http_client=workbench.http_client())
        try:
            client.chat.completions.create(model="wbt-gpt", messages=[{"role": "user", "content": "hi"}])
        except openai.AuthenticationError as exc:
            return "the provider said: " + str(exc)


    define_eval("leaky", PROMPT, [{"id": "quotes", "vars": {"case": "quotes"}},
                                  {"id": "echoes", "vars": {"case": "echoes"}}],
                [contains("the")], target=target)
''')


def test_an_output_quoting_a_key_is_masked_in_the_store_the_reports_and_the_baseline(tmp_path):
    evals = tmp_path / "evals"
    evals.mkdir()
    (evals / "leaky.py").write_text(SUITE)
    with serve_hostile() as address:
        (evals / "settings.json").write_text(json.dumps({"key": KEY, "sent": ECHOED, "url": f"http://{address}/v1"}))
        result = workbench_cli(tmp_path, "eval", "leaky", "--mode", "live", "--record-baseline",
                               "--junit", "out/junit.xml", "--markdown", "out/summary.md", "--json", "out/report.json")
    assert result.returncode == 0, result.stdout + result.stderr
    db = tmp_path / "wb.duckdb"
    ingest_spools(db, spool_dir_of(db), wait=True)  # what the eval spooled, in the store

    con = duckdb.connect(str(db), read_only=True)
    try:
        outputs = dict(con.execute("SELECT case_id, output FROM eval_results").fetchall())
    finally:
        con.close()
    assert outputs["quotes"] == "the key is [redacted]"
    assert outputs["echoes"].startswith("the provider said: ") and "[redacted]" in outputs["echoes"]
    written = [path for path in tmp_path.rglob("*") if path.is_file() and "settings.json" not in path.name]
    assert {"junit.xml", "summary.md", "report.json"} <= {path.name for path in written}
    assert any(path.name.endswith(".baseline.json") for path in written)
    for path in written:
        data = path.read_bytes()
        assert KEY[8:40].encode() not in data and ECHOED.encode() not in data, path
    assert KEY[8:40] not in result.stdout + result.stderr and ECHOED not in result.stdout + result.stderr
