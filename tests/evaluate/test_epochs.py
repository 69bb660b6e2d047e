"""Repeated trials: every case runs N times, every sample is kept, a case's score is their mean with
their spread, the baseline keeps the samples, and the gate fails a drop only when it is past the
tolerance AND unlikely to be noise. One sample and deterministic replay behave exactly as before."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from eval_support import REPO, no_network, workbench_cli
from workbench.demo.fake_provider import AsyncFakeTransport, FakeProvider, Reply
from workbench.errors import WorkbenchError
from workbench.config import spool_dir_of
from workbench.evaluate import define_eval, define_prompt, exact
from workbench.evaluate.baseline import read_baseline, upgrade_baseline
from workbench.evaluate.gate import evaluate
from workbench.evaluate.runner import Network
from workbench.evaluate.stats import drop_test, spread, t_sf
from workbench.replay.cassette import load_cassette_with_meta
from workbench.store.db import open_store
from workbench.store.ingest import ingest_spools
from workbench.wire.canonical import request_hash

NOISY = '''
import json, pathlib
from workbench.evaluate import define_eval, define_prompt, exact

HERE = pathlib.Path(__file__).parent
PROMPT = define_prompt("noisy", "v1", system="Answer.", template="{{{{key}}}}")


def target(vars, ctx):  # the answer of this epoch (1..N) of this case
    return json.loads((HERE / "answers.json").read_text())[vars["key"]][ctx.epoch - 1]


define_eval("noisy", PROMPT, [{{"id": key, "vars": {{"key": key}}, "expected": "ok"}} for key in ("c0", "c1")],
            [exact()], target=target, epochs={epochs}, tolerance=0.05{options})
'''


def answers(root: Path, **cases: list[int]) -> None:
    """Each case's answers, epoch by epoch: 1 is right ("ok"), 0 is wrong."""
    (root / "evals" / "answers.json").write_text(json.dumps(
        {case: ["ok" if right else "no" for right in marks] for case, marks in cases.items()}))


@pytest.fixture
def noisy(tmp_path):
    def make(epochs: int = 5, options: str = "") -> Path:
        (tmp_path / "evals").mkdir(exist_ok=True)
        (tmp_path / "evals" / "noisy.py").write_text(NOISY.format(epochs=epochs, options=options))
        return tmp_path

    return make


def baseline(root: Path) -> dict:
    return json.loads((root / "evals" / "noisy.baseline.json").read_text())


def test_every_sample_is_kept_and_every_report_shows_samples_mean_and_spread(noisy):
    root = noisy(epochs=5)
    answers(root, c0=[1, 1, 0, 1, 1], c1=[1, 1, 1, 1, 1])
    recorded = workbench_cli(root, "eval", "--record-baseline")
    assert recorded.returncode == 0, recorded.stderr
    data = baseline(root)
    assert data["format"] == 2 and data["epochs"] == 5 and data["mean"] == 0.9
    assert data["cases"]["c0"] == {"cost_micros": 0, "samples": [1.0, 1.0, 0.0, 1.0, 1.0], "score": 0.8}
    assert data["cases"]["c1"]["samples"] == [1.0] * 5
    assert "1.00 1.00 0.00 1.00 1.00" in recorded.stdout and "±0.45" in recorded.stdout  # the console

    result = workbench_cli(root, "eval", "--json", "r.json", "--markdown", "m.md", "--junit", "j.xml")
    assert result.returncode == 0, result.stderr
    [suite] = json.loads((root / "r.json").read_text())["suites"]
    c0 = next(case for case in suite["cases"] if case["case"] == "c0")
    assert (c0["samples"], c0["score"], c0["spread"], c0["baseline"], c0["status"]) == (
        [1.0, 1.0, 0.0, 1.0, 1.0], 0.8, 0.447214, 0.8, "pass")
    assert suite["epochs"] == 5 and suite["mean"] == 0.9 and suite["spread"] == 0.223607  # per-epoch means 1, 1, .5, 1, 1
    assert "5 samples a case" in result.stdout and "mean 0.9000 ±0.2236" in result.stdout
    markdown = (root / "m.md").read_text()
    assert "5 samples a case (confidence 0.95)" in markdown and "Mean **0.9000 ±0.2236**" in markdown
    junit = (root / "j.xml").read_text()
    assert '"samples": [1.0, 1.0, 0.0, 1.0, 1.0]' in junit and '"spread": 0.447214' in junit

    # --epochs overrides the suite's: two samples a case, gated against the five of the baseline
    answers(root, c0=[1, 0], c1=[1, 1])
    two = workbench_cli(root, "eval", "--epochs", "2", "--json", "r2.json")
    assert two.returncode == 0, two.stderr
    assert [len(case["samples"]) for case in json.loads((root / "r2.json").read_text())["suites"][0]["cases"]] == [2, 2]
    assert workbench_cli(root, "eval", "--epochs", "0").returncode == 2  # not a number of samples


def test_a_drop_within_the_noise_passes_and_a_real_one_fails(noisy):
    root = noisy(epochs=5)
    answers(root, c0=[1, 1, 0, 1, 0], c1=[1] * 5)
    assert workbench_cli(root, "eval", "--record-baseline").returncode == 0
    # c0 falls from 0.6 to 0.4: past the 0.05 tolerance, but a coin this noisy does that by chance
    answers(root, c0=[1, 0, 0, 1, 0], c1=[1] * 5)
    within = workbench_cli(root, "eval", "--json", "r.json")
    assert within.returncode == 0, within.stderr
    c0 = json.loads((root / "r.json").read_text())["suites"][0]["cases"][0]
    assert c0["delta"] == -0.2 and c0["status"] == "pass" and 0.2 < c0["p_value"] < 0.4

    answers(root, c0=[1, 1, 0, 1, 1], c1=[1] * 5)
    assert workbench_cli(root, "eval", "--record-baseline").returncode == 0
    # from 0.8 to 0.2: Welch's t = 2.12 on 8 degrees of freedom, p = 0.033, beyond noise at 95%
    answers(root, c0=[0, 0, 0, 0, 1], c1=[1] * 5)
    real = workbench_cli(root, "eval")
    assert real.returncode == 1
    said = " ".join(real.stderr.split())
    assert "WB_EVAL_THRESHOLD" in said and "5 samples a case, confidence 0.95" in said
    assert "c0 0.80→0.20 ±0.45 (dropped past tolerance, p=0.033)" in said
    # ... but not at 99%: the confidence is a setting, on the command line or in the suite
    assert workbench_cli(root, "eval", "--confidence", "0.99").returncode == 0
    (root / "evals" / "noisy.py").write_text(NOISY.format(epochs=5, options=", confidence=0.99"))
    assert workbench_cli(root, "eval").returncode == 0
    assert workbench_cli(root, "eval", "--confidence", "1.5").returncode == 2


def test_with_one_sample_a_side_any_drop_past_the_tolerance_fails_as_before(noisy):
    root = noisy(epochs=1)
    answers(root, c0=[1], c1=[1])
    assert workbench_cli(root, "eval", "--record-baseline").returncode == 0
    assert "samples" not in baseline(root)["cases"]["c0"]  # one sample: the file reads as before epochs
    answers(root, c0=[0], c1=[1])
    result = workbench_cli(root, "eval")
    assert result.returncode == 1 and "c0 1.00→0.00 (dropped past tolerance)" in result.stderr
    # identical answers on every epoch (a deterministic replay): no noise, so the drop is real
    answers(root, c0=[1] * 3, c1=[1] * 3)
    assert workbench_cli(root, "eval", "--record-baseline", "--epochs", "3").returncode == 0
    answers(root, c0=[0] * 3, c1=[1] * 3)
    assert workbench_cli(root, "eval", "--epochs", "3").returncode == 1


def test_a_format_1_baseline_still_reads_and_gates(examples, store):
    """Today's files (format 1, one score a case) are upgraded when read, by one function."""
    old = REPO / "tests" / "fixtures" / "baselines" / "classifier.format1.baseline.json"
    data = json.loads(old.read_text())
    assert data["format"] == 1 and "epochs" not in data
    upgraded = upgrade_baseline(data)
    assert upgraded["format"] == 2 and upgraded["epochs"] == 1 and upgraded["cases"] == data["cases"]
    from workbench.evaluate.suite import load_suites

    suite = load_suites([examples / "evals" / "classifier.py"])["classifier"]
    shutil.copy(old, suite.baseline_path)
    read = read_baseline(suite.baseline_path, "classifier")
    assert read.epochs == 1 and read.cases["export-crash"].values == [1.0]
    outcome = evaluate(suite, network=no_network(), epochs=1)
    assert outcome.exit_code == 0 and outcome.verdict.baseline_mean == 1.0
    assert upgrade_baseline({"format": 2, "epochs": 3}) == {"format": 2, "epochs": 3}  # the current shape as is


@pytest.mark.parametrize("case,message", [
    ({"score": 0.5, "samples": [1.0, 1.0]}, "not the mean of its samples"),
    ({"score": 0.5, "samples": [1.0, 0.0, 0.5]}, "do not have 2 samples"),
    ({"score": 0.5, "samples": [1.5, -0.5]}, "outside [0, 1]"),
    ({"score": 0.5, "samples": [0.5]}, "at least 2"),
])
def test_a_baseline_whose_samples_do_not_add_up_is_invalid(tmp_path, case, message):
    path = tmp_path / "x.baseline.json"
    path.write_text(json.dumps({"format": 2, "suite": "x", "prompt": {"id": "p", "version": "v1", "hash": "h"},
                                "scorers": ["exact"], "tolerance": 0.05, "epochs": 2, "mean": 0.5,
                                "cases": {"a": case}}))
    with pytest.raises(WorkbenchError) as caught:
        read_baseline(path, "x")
    assert caught.value.code == "WB_EVAL_BASELINE_INVALID" and message in caught.value.cause
    path.write_text(path.read_text().replace('"mean": 0.5', '"mean": NaN'))
    with pytest.raises(WorkbenchError, match="WB_EVAL_BASELINE_INVALID"):
        read_baseline(path, "x")


MODEL = "gpt-epochs"


class _Cycling:
    """A model at temperature > 0: the Nth identical request gets the Nth of its answers."""

    def __init__(self, answers: list[str]) -> None:
        self.answers, self.seen = answers, {}

    def __call__(self, request):
        key = request.body
        count = self.seen[key] = self.seen.get(key, 0) + 1
        return Reply(tool_calls=[("respond", {"category": self.answers[(count - 1) % len(self.answers)]})])


def test_a_cassette_holds_the_n_answers_of_an_identical_request_and_replays_them_in_order(tmp_path, store):
    from typing import Literal

    from pydantic import BaseModel

    import workbench
    from workbench.runtime import OpenAIProvider

    class Ticket(BaseModel):
        category: Literal["billing", "account", "bug", "other"]

    workbench.register_model(id=MODEL, provider="openai", context_window=100_000, max_output=4096,
                             input=100, output=400, source="test", as_of="2026-01-01")
    prompt = define_prompt("epochs-classifier", "v1", system="Classify.", template="<t>{{ticket}}</t>",
                           output=Ticket, model=MODEL)
    suite = define_eval("epochs-classifier", prompt, [
        {"id": "refund", "vars": {"ticket": "refund me"}, "expected": {"category": "billing"}},
        {"id": "crash", "vars": {"ticket": "it crashes"}, "expected": {"category": "billing"}}],
        [exact("category")], baseline=tmp_path / "b.json", cassette=tmp_path / "c.json", epochs=3,
        providers=lambda transport: [OpenAIProvider("http://epochs.test/v1", "sk", [MODEL], transport=transport)])
    fake = FakeProvider(responder=_Cycling(["billing", "account", "billing"]))
    recorded = evaluate(suite, mode="record", record_baseline=True,
                        network=Network(async_=lambda: AsyncFakeTransport(fake)))
    assert [result.values for result in recorded.eval_run.results] == [[1.0, 0.0, 1.0]] * 2
    interactions, _ = load_cassette_with_meta(tmp_path / "c.json")
    hashes = [request_hash(i.request.method, i.request.uri, i.request.body) for i in interactions]
    assert len(interactions) == 6 and len(set(hashes)) == 2  # three recordings of each identical request

    for _ in range(2):  # replayed, offline, in recorded order: the same samples every time
        replayed = evaluate(suite, network=no_network())
        assert replayed.exit_code == 0 and replayed.eval_run.mode == "replay"
        assert [result.values for result in replayed.eval_run.results] == [[1.0, 0.0, 1.0]] * 2
        assert [[json.loads(sample.output)["category"] for sample in result.samples]
                for result in replayed.eval_run.results] == [
            ["billing", "account", "billing"]] * 2
        assert all(not sample.live for result in replayed.eval_run.results for sample in result.samples)
    # more epochs than recorded answers would replay one answer twice: a spread never measured
    with pytest.raises(WorkbenchError) as caught:
        evaluate(suite, network=no_network(), epochs=4)
    assert caught.value.code == "WB_REPLAY_MISS" and "fewer recorded answers than the 4 epochs" in caught.value.cause
    assert "--epochs 4 --mode record" in caught.value.fix
    # however many epochs are asked for, no case runs past its first answer replayed twice (the samples
    # spooled as they end say how far each got): `--epochs 1000000` (a typo) fails as soon as `--epochs 4` does
    with pytest.raises(WorkbenchError) as caught:
        evaluate(suite, network=no_network(), epochs=40)
    assert "fewer recorded answers than the 40 epochs" in caught.value.cause
    workbench.flush()
    ingest_spools(store, spool_dir_of(store))
    with open_store(store, read_only=True) as con:
        [(samples,)] = con.execute("SELECT count(*) FROM eval_samples JOIN eval_runs USING (eval_run_id) "
                                   "WHERE epochs = 40").fetchall()
    assert samples <= 2 * 4


def test_the_t_distribution_and_the_drop_test():
    # Student's t table: one-sided tail probabilities
    for t, df, p in ((2.015, 5, 0.05), (1.812, 10, 0.05), (2.776, 4, 0.025), (3.169, 10, 0.005), (6.314, 1, 0.05),
                     (1.645, 1e9, 0.05)):
        assert abs(t_sf(t, df) - p) < 5e-4, (t, df)
    assert t_sf(0.0, 3.5) == pytest.approx(0.5) and t_sf(-2.015, 5) == pytest.approx(0.95, abs=5e-4)
    assert t_sf(1.0, 2.5) > t_sf(1.0, 25)  # fewer degrees of freedom, fatter tails
    # no noise on either side: a drop is a drop, no drop is none
    assert drop_test([([1.0], [0.0])]).p_value == 0.0 and drop_test([([1.0, 1.0], [1.0, 1.0])]).p_value == 1.0
    assert drop_test([([1.0], [0.0])]).is_real(0.95) and not drop_test([([0.0], [1.0])]).is_real(0.95)
    # Welch: 0.8 -> 0.2 over 5 samples each, variances 0.2: t = 2.12, df = 8
    assert drop_test([([1, 1, 0, 1, 1], [0, 0, 0, 0, 1])]).p_value == pytest.approx(0.0333, abs=1e-3)
    # one sample borrows the other side's variance: 1 vs [1, 0, 1, 1, 1] is noise
    assert not drop_test([([1.0], [1, 0, 1, 1, 1])]).is_real(0.95)
    # the suite mean: cases' noise adds up; a steady case adds none
    assert drop_test([([1, 1, 0, 1, 0], [1, 0, 0, 1, 0]), ([1.0] * 5, [1.0] * 5)]).drop == pytest.approx(0.1)
    assert spread([1.0]) is None and spread([1.0, 0.0]) == pytest.approx(0.7071, abs=1e-4)
