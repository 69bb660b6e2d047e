"""The runner: every case of a suite, concurrently (bounded), each sample (epoch) of a case in a run
of kind `eval_case` linked to its calls; judges in runs of their own; results into `eval_runs`,
`eval_results` and `eval_samples`. A case's epochs run one after another, so the N recordings of an
identical request replay in the order they were recorded. Replay by default: a case that misses
its cassette stops the suite with WB_REPLAY_MISS itself.

Whatever a target or a scorer raises (an exception, `sys.exit()`, any BaseException but an
interrupt) ends that sample in an error: the case is never scored, never 0."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import json
import math
import os
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx2

from workbench.ids import new_id
from workbench.capture import clock, recorder, run
from workbench.capture.runs import Billed
from workbench.config import RecordMode, settings
from workbench.errors import WorkbenchError
from workbench.evaluate import stats
from workbench.evaluate.baseline import one_cost
from workbench.evaluate.prompts import Prompt, prompts
from workbench.evaluate.scorers import Score, ScoreContext, as_text
from workbench.evaluate.suite import Case, Suite, check_epochs
from workbench.replay.clients import AsyncReplayTransport, async_http_client, http_client
from workbench.replay.session import Cassette
from workbench.runtime.prompt import vars_json
from workbench.wire.redact import mask_secrets

# the network requests the current sample made (a replayed request never reaches the network)
_live_requests: ContextVar[list[int] | None] = ContextVar("workbench_eval_live_requests", default=None)


def _count_live() -> None:
    counter = _live_requests.get()
    if counter is not None:
        counter[0] += 1


@dataclass(frozen=True)
class Network:
    """Where calls go that a cassette does not answer: the real network by default; the demo and
    the example suites' recorder put the in-process fake provider here."""

    sync: Callable[[], httpx2.BaseTransport] = httpx2.HTTPTransport
    async_: Callable[[], httpx2.AsyncBaseTransport] = httpx2.AsyncHTTPTransport

    def transport(self, cassette: Cassette | None) -> httpx2.AsyncBaseTransport:
        """An async transport for the runtime's providers, through the cassette when there is one.
        The network transport is built on the first request that reaches it: a replayed case never
        pays for one (an SSL context costs ~20-60 ms)."""
        inner = _LazyAsyncTransport(self.async_)
        return inner if cassette is None else AsyncReplayTransport(cassette, inner)

    def sync_transport(self) -> httpx2.BaseTransport:
        return _LazyTransport(self.sync)


class _LazyTransport(httpx2.BaseTransport):
    def __init__(self, make: Callable[[], httpx2.BaseTransport]) -> None:
        self._make, self._inner, self._lock = make, None, threading.Lock()

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        with self._lock:
            if self._inner is None:
                self._inner = self._make()
        _count_live()
        return self._inner.handle_request(request)

    def close(self) -> None:
        if self._inner is not None:
            self._inner.close()


class _LazyAsyncTransport(httpx2.AsyncBaseTransport):
    def __init__(self, make: Callable[[], httpx2.AsyncBaseTransport]) -> None:
        self._make, self._inner = make, None

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if self._inner is None:
            self._inner = self._make()
        _count_live()
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        if self._inner is not None:
            await self._inner.aclose()


@dataclass
class EvalContext:
    """What a suite's target gets besides the case's vars: clients bound to the suite's cassette,
    the model of the run (a `workbench eval compare` cell may name another) and the epoch (1..N)."""

    suite: Suite
    prompt: Prompt
    case: Case
    cassette: Cassette | None
    network: Network = field(default_factory=Network)
    model: str | None = None
    epoch: int = 1

    def http_client(self, **kwargs) -> httpx2.Client:
        """An httpx2 client for the `openai` / `anthropic` SDKs: recorded, replayed from the cassette."""
        return http_client(self.cassette, transport=self.network.sync_transport(), **kwargs)

    def async_http_client(self, **kwargs) -> httpx2.AsyncClient:
        return async_http_client(self.cassette, transport=_LazyAsyncTransport(self.network.async_), **kwargs)

    @property
    def transport(self) -> httpx2.AsyncBaseTransport:
        """An async transport for the runtime's providers (`OpenAIProvider(..., transport=...)`)."""
        return self.network.transport(self.cassette)


OUTPUT_CHARS = 4000  # of an output, as text: what the store keeps of it (`eval_results.output`)
_MASK_MARGIN = 256  # read past the cut when masking, so a key across it is masked whole, not cut to a stub
STORE_BATCH = 10_000  # rows handed to the spool between two writes of it, when an eval run is stored


class OutputFile:
    """The samples' outputs of one eval run, as text on disk: a case's sample rows go to the spool
    when it finishes, and only what shows or stores an output afterwards (the reports' excerpts,
    the eval's results, a comparison) reads it back. A 100,000-case suite held ~400 MB of outputs
    in memory to the end. The file is unlinked as it is made: nothing is left behind, even by a
    killed eval, and no other user can open it."""

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile()
        self._end = 0

    def keep(self, text: str) -> tuple[int, int]:
        """Where `text` now is (offset, size in bytes). Called on the runner's event loop only."""
        data = text.encode("utf-8", "surrogatepass")  # a lone surrogate reads back as it was
        at, self._end = self._end, self._end + len(data)
        os.pwrite(self._file.fileno(), data, at)
        return at, len(data)

    def read(self, at: int, size: int) -> str:
        return os.pread(self._file.fileno(), size, at).decode("utf-8", "surrogatepass")


@dataclass(slots=True)
class Sample:
    """One run of one case (one epoch), as kept until the run is stored and reported: its output is
    in the run's OutputFile (read back by `output`), so a suite of 100,000 cases holds 100,000 of
    these, a few hundred bytes each, until the gate has judged them all."""

    epoch: int
    outputs: OutputFile | None  # None: no output (an error)
    output_at: int  # where the output's text is in `outputs`, and its size in bytes
    output_size: int
    scores: dict[str, Score]
    cost_micros: int | None  # in `currency`; None: a call was unpriced, or calls were priced in two currencies
    run_id: str
    latency_ms: float  # the target's wall time
    live: bool  # a request went to the network (not replayed): the latency is the provider's
    error: WorkbenchError | None = None
    error_stage: str | None = None  # "target" or "scorer"
    currency: str = "USD"
    # only when `cost_micros` is None (rare: no dict per sample otherwise): the priced money per
    # currency, and the calls nothing priced (counted, never taken as free)
    other_costs: dict[str, int] | None = None
    unpriced_calls: int = 0
    unpriced_models: tuple[str, ...] = ()  # the models of those calls, to name what to price
    # the mean of the gated scores, to 6 places (the precision baselines keep); None when the
    # sample ended in an error. Computed once: a sample never changes, and the gate and the
    # reports ask again and again
    score: float | None = field(init=False)

    def __post_init__(self) -> None:
        gated = [score.value for score in self.scores.values() if score.value is not None]
        self.score = None if self.error is not None else round(sum(gated) / len(gated), 6)

    @property
    def output(self) -> str | None:
        """The output as text (`as_text`), at most OUTPUT_CHARS; None: no output (an error)."""
        return None if self.outputs is None else self.outputs.read(self.output_at, self.output_size)

    def add_costs(self, costs: dict[str, int]) -> int:
        """Add the sample's money to `costs` (by currency); its unpriced calls, returned."""
        if self.cost_micros is not None:
            costs[self.currency] = costs.get(self.currency, 0) + self.cost_micros
            return 0
        for currency, micros in (self.other_costs or {}).items():
            costs[currency] = costs.get(currency, 0) + micros
        return self.unpriced_calls


def bill_costs(billed: Billed | None) -> tuple[dict[str, int], int]:
    """A bill's full cost (what the live calls cost and the replayed ones would have) per currency
    priced in, and its calls nothing priced: the parts no one figure can hold."""
    if billed is None:
        return {}, 0
    costs = {currency: part.cost_micros + part.replayed_cost_micros for currency, part in billed.by_currency().items()
             if part.calls or part.replayed_calls}
    return costs, billed.unpriced_calls + billed.replayed_unpriced_calls


def stored_costs(costs: dict[str, int], unpriced: int) -> dict:
    """A cost's columns in the store (migration 0020): `cost_micros` and its `currency` when it is one
    figure; else `costs` (JSON, each currency's money) and `unpriced_calls`."""
    micros, currency = one_cost(costs, unpriced)
    return {"cost_micros": micros, "currency": currency, "unpriced_calls": unpriced,
            "costs": None if micros is not None else json.dumps(costs, sort_keys=True)}


def costs_of(parts) -> tuple[dict[str, int], int]:
    """Samples' or case results' money by currency, and their unpriced calls."""
    costs: dict[str, int] = {}
    unpriced = sum(part.add_costs(costs) for part in parts)
    return costs, unpriced


@dataclass(slots=True)
class CaseResult:
    # a large suite holds one of these per case until it is stored and reported
    case_id: str
    samples: tuple[Sample, ...]
    errored: tuple[Sample, ...] = field(init=False)  # most cases: the one empty tuple, no list each
    # every sample's score, in epoch order (empty when the case errored)
    values: list[float] = field(init=False)
    # the mean of the samples, to 6 places; None: the case ended in an error, so no score
    score: float | None = field(init=False)

    def __post_init__(self) -> None:  # a case's samples are all in once it is built
        self.samples = tuple(self.samples)
        self.errored = tuple(sample for sample in self.samples if sample.error is not None)
        self.values = [] if self.errored else [sample.score for sample in self.samples]
        values = self.values
        # one sample: its score already is the mean to 6 places (the same float, not a copy a case)
        self.score = (values[0] if len(values) == 1 else round(stats.mean(values), 6)) if values else None

    @property
    def error(self) -> WorkbenchError | None:
        """The first error of the case's samples: an errored case has no score."""
        errored = self.errored
        return errored[0].error if errored else None

    @property
    def target_failed(self) -> bool:
        """Every error of the case is its target's (what `errors_are_failures` turns into a failure)."""
        return bool(self.errored) and all(sample.error_stage == "target" for sample in self.errored)

    @property
    def spread(self) -> float | None:
        """The standard deviation of the samples (None with one sample or an error)."""
        values = self.values
        return None if not values else stats.spread(values)

    @property
    def output(self) -> str | None:
        return self.samples[0].output

    @property
    def scores(self) -> dict[str, Score]:
        return self.samples[0].scores

    @property
    def run_id(self) -> str:
        return self.samples[0].run_id

    @property
    def cost_micros(self) -> int | None:
        """Every sample's cost, added (None: a call was unpriced, or calls were priced in two currencies)."""
        return self.cost[0]

    @property
    def cost(self) -> tuple[int | None, str | None]:
        """`cost_micros` and the currency it is in (`one_cost`)."""
        return one_cost(*self.costs)

    @property
    def costs(self) -> tuple[dict[str, int], int]:
        """Every sample's cost per currency, and the unpriced calls."""
        return costs_of(self.samples)

    def add_costs(self, costs: dict[str, int]) -> int:
        return sum(sample.add_costs(costs) for sample in self.samples)


@dataclass
class EvalRun:
    eval_run_id: str
    suite: Suite
    prompt: Prompt
    mode: RecordMode
    results: list[CaseResult] = field(default_factory=list)
    judge_billed: Billed | None = None  # every judge run's bill, added (None: no judge ran)
    git_commit: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    epochs: int = 1
    model_name: str | None = None  # the model the run asked for, when not the prompt's
    matrix_id: str | None = None  # the `workbench eval compare` this run is a cell of
    matrix_reference: bool = False  # the cell the others were compared with
    outputs: OutputFile = field(default_factory=OutputFile, repr=False)  # the samples' outputs

    @property
    def judged(self) -> list[CaseResult]:
        return [result for result in self.results if result.score is not None]

    @property
    def errored(self) -> list[CaseResult]:
        return [result for result in self.results if result.score is None]

    @property
    def mean(self) -> float | None:
        """The mean of the judged cases' scores; None when no case could be judged."""
        judged = self.judged
        return round(stats.mean([result.score for result in judged]), 6) if judged else None

    @property
    def spread(self) -> float | None:
        """How far the suite's mean moves from one epoch to the next: the standard deviation of the
        per-epoch means of the judged cases (None with one epoch)."""
        judged = self.judged
        if not judged or self.epochs < 2:
            return None
        return stats.spread([stats.mean([result.values[epoch] for result in judged]) for epoch in range(self.epochs)])

    @property
    def costs(self) -> tuple[dict[str, int], int]:
        """The cases' and judges' cost per currency (never one sum of two), and the unpriced calls."""
        costs, unpriced = bill_costs(self.judge_billed)
        return costs, unpriced + sum(result.add_costs(costs) for result in self.results)

    @property
    def cost_micros(self) -> int | None:
        """The cost of the cases and judges; None: a call was unpriced, or calls were priced in two currencies."""
        return one_cost(*self.costs)[0]

    @property
    def judge_cost_micros(self) -> int | None:
        """The judges' cost (0: no judge ran); None: a judge's call was unpriced, or two currencies."""
        return one_cost(*bill_costs(self.judge_billed))[0]

    @property
    def model(self) -> str | None:
        return self.model_name or self.prompt.model

    def __repr__(self) -> str:
        # short: asyncio formats the finished task's result on the way out of `asyncio.run` (a
        # full 1,000-case repr took 60 ms there), and a traceback needs no more than this
        return (f"EvalRun(suite={self.suite.name!r}, cases={len(self.results)}, mean={self.mean}, "
                f"mode={self.mode!r}, eval_run_id={self.eval_run_id!r})")


def git_commit(where: Path | None = None) -> str | None:
    """The commit checked out where the suite lives (not where the command happens to run)."""
    try:
        result = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, cwd=where)
    except (OSError, subprocess.SubprocessError):
        return None
    return (result.stdout.strip() or None) if result.returncode == 0 else None


async def _call(function, *args):
    """A sync or async callable, awaited; sync ones in a thread with the caller's context."""
    if inspect.iscoroutinefunction(function):
        return await function(*args)
    context = contextvars.copy_context()
    result = await asyncio.to_thread(context.run, function, *args)
    return await result if inspect.isawaitable(result) else result


class _Judge:
    """Runs a judge prompt in a run of its own (kind `judge`), outside the case's run, so the
    judge is billed apart from the application, against the suite's judge cassette."""

    def __init__(self, suite: Suite, cassette: Cassette | None, eval_run: EvalRun, network: Network):
        self.suite, self.cassette, self.eval_run, self.network = suite, cassette, eval_run, network
        self._lock = threading.Lock()  # judges run in worker threads; their bills add up under it

    def __call__(self, judge_prompt: Prompt, variables: dict, case_id: str):
        def judged():
            with run(f"judge:{self.suite.name}:{case_id}", kind="judge", prompt=judge_prompt.ref,
                     suite=self.suite.name, case=case_id) as judge_run:
                if callable(self.suite.judge) and not isinstance(self.suite.judge, str):
                    reply = self.suite.judge(judge_prompt, variables, self)
                else:
                    reply = _runtime_answer(self.suite, judge_prompt, variables, self.network.transport(self.cassette),
                                            model=self.suite.judge)
            billed = judge_run.billed
            with self._lock:  # every currency and unpriced call kept: a judge is never free by default
                held = self.eval_run.judge_billed
                self.eval_run.judge_billed = billed if held is None else held + billed
            return reply

        return contextvars.Context().run(judged)  # a fresh context: not inside the case's run


def _runtime_answer(suite: Suite, prompt: Prompt, variables: dict, transport, model: str | None = None):
    """The prompt through Workbench's runtime, its providers on `transport` (the sync path: judges)."""
    from workbench.runtime.gateway import Gateway
    from workbench.runtime.llm import llm

    gateway = Gateway(suite_providers(suite, transport), default_model=prompt.model)
    # a suite sends one prompt many times: the cached prefix pays (llm() alone is off by default)
    return llm(gateway, prompt, variables, output=prompt.output_type, model=model, prompt_cache="auto")


class _RuntimeAnswerer:
    """The cases' prompt through the runtime: ONE gateway for the whole suite run, on the runner's
    event loop (not a gateway, a thread and an event loop per case)."""

    def __init__(self, suite: Suite, prompt: Prompt, transport, model: str | None = None) -> None:
        from workbench.runtime.gateway import Gateway

        self.prompt, self.model = prompt, model
        self.gateway = Gateway(suite_providers(suite, transport), default_model=prompt.model)

    async def __call__(self, variables: dict):
        from workbench.runtime.llm import llm_async

        return await llm_async(self.gateway, self.prompt, variables, output=self.prompt.output_type, model=self.model,
                               prompt_cache="auto")

    async def close(self) -> None:
        await self.gateway.release_loop()


def suite_providers(suite: Suite, transport) -> list:
    """The runtime providers a suite talks to: the suite's `providers(transport)`, else OpenAI and
    Anthropic at their public URLs (keys from OPENAI_API_KEY / ANTHROPIC_API_KEY; replay needs
    none)."""
    from workbench.runtime.providers import AnthropicProvider, OpenAIProvider

    if suite.providers is not None:
        return suite.providers(transport)
    return [
        OpenAIProvider(models=["gpt-*", "o*"], transport=transport),
        AnthropicProvider(models=["claude-*"], transport=transport),
    ]


async def run_suite(
    suite: Suite, mode: RecordMode | None = None, prompt_version: str | None = None, progress=None,
    network: Network | None = None, epochs: int | None = None, model: str | None = None,
    matrix_id: str | None = None,
) -> EvalRun:
    """Every case of `suite`, `epochs` times each (default: the suite's). `model` runs the prompt on
    another model than its own (a target reads it as `ctx.model`)."""
    mode = mode or settings().record_mode
    epochs = check_epochs(epochs if epochs is not None else suite.epochs, "--epochs")
    prompt = suite.prompt if prompt_version is None else prompts.get(suite.prompt.id, prompt_version)
    cassette = None if mode == "live" else Cassette(suite.cassette_path, mode)
    judge_cassette = None
    if suite.judge is not None and mode != "live":
        judge_cassette = Cassette(suite.judge_cassette_path, mode)
    eval_run = EvalRun(new_id(), suite, prompt, mode, git_commit=git_commit(suite.file.parent),
                       started_at=clock.now(), epochs=epochs,
                       model_name=model if model not in (None, prompt.model) else None, matrix_id=matrix_id)
    network = network or Network()
    judge = _Judge(suite, judge_cassette, eval_run, network) if suite.judge is not None else None
    answer = _RuntimeAnswerer(suite, prompt, network.transport(cassette), model) if suite.target is None else None
    results: list[CaseResult | None] = [None] * len(suite.cases)
    # the cassettes whose answers N epochs may outnumber (`--epochs 100000` on a cassette of 3 a case)
    replays_short = ([used for used in (cassette, judge_cassette) if used is not None]
                     if epochs > 1 and mode == "replay" else [])
    pending = iter(enumerate(suite.cases))  # shared: each worker takes the next case when it is free

    async def worker() -> None:
        # `concurrency` workers pulling cases, not a task per case waiting on a semaphore: a pending
        # case costs nothing until a worker takes it (100,000 tasks held 100,000 coroutines)
        for index, case in pending:
            samples = []
            for epoch in range(1, epochs + 1):  # in order: the Nth identical request replays the Nth answer
                context = EvalContext(suite, prompt, case, cassette, network, eval_run.model, epoch)
                samples.append(await _run_sample(context, judge, answer, epochs, eval_run))
                if replays_short and any(used.index.repeated for used in replays_short):
                    return  # an answer replayed twice: the run fails for too few samples; more epochs only repeat
            results[index] = CaseResult(case.id, samples)
            if progress is not None:
                progress()

    # stored before any case runs, with no verdict (and no end): what a killed eval leaves is that,
    # and the samples of every case it finished (each spooled as it ends). The end replaces it
    _store_run_row(eval_run, "error", started=True)
    try:
        # a worker that raises (an interrupt) stops; the others still take every case left
        ended = await asyncio.gather(*(worker() for _ in range(min(max(1, suite.concurrency), len(results)))),
                                     return_exceptions=True)
    except BaseException as exc:  # the loop stopped (an interrupt): what finished is stored, unjudged
        _store_unfinished(eval_run, results, exc)
        raise
    finally:
        if answer is not None:
            await answer.close()
        for used in (cassette, judge_cassette):
            if used is not None:
                used.save()
    failure = next((used.misses[0] for used in (cassette, judge_cassette) if used is not None and used.misses), None)
    if failure is None and epochs > 1 and mode == "replay":
        failure = next((_too_few_samples(suite, used, epochs) for used in (cassette, judge_cassette)
                        if used is not None and used.index.repeated), None)
    failure = failure or next((outcome for outcome in ended if isinstance(outcome, BaseException)), None)
    if failure is not None:
        _store_unfinished(eval_run, results, failure)
        raise failure
    eval_run.results = results  # in the suite's order; every case has its result: a worker only ends when none is left
    eval_run.ended_at = clock.now()
    return eval_run


def _store_unfinished(eval_run: EvalRun, results: list[CaseResult | None], exc: BaseException) -> None:
    """A run that stopped before its verdict (a replay miss, an interrupt): stored as it ended, with
    no verdict, and the cases it finished."""
    eval_run.results = [result for result in results if result is not None]
    eval_run.ended_at = clock.now()
    store_eval_run(eval_run, "error", error_code=exc.code if isinstance(exc, WorkbenchError) else None)


def _too_few_samples(suite: Suite, cassette: Cassette, epochs: int) -> WorkbenchError:
    """Replaying N epochs needs N recordings of each identical request: replaying one answer N times
    would report a spread of zero that was never measured."""
    return WorkbenchError(
        "WB_REPLAY_MISS",
        f"{cassette.path} holds fewer recorded answers than the {epochs} epochs of suite {suite.name} ask for: "
        f"{cassette.index.repeated} requests would have replayed an answer already used",
        f"record the missing samples: workbench eval {suite.name} --epochs {epochs} --mode record, "
        f"then commit {cassette.path.name}",
    )


_INTERRUPTS = (KeyboardInterrupt, asyncio.CancelledError)  # the user or the loop stopping us: not a case's error


def _case_error(exc: BaseException, what: str, fix: str) -> WorkbenchError:
    """What a target or a scorer raised, as the sample's error (a WorkbenchError keeps its code)."""
    if isinstance(exc, WorkbenchError):
        return WorkbenchError(exc.code, exc.cause if what in exc.cause else f"{what}: {exc.cause}", exc.fix)
    raised = f"called sys.exit({exc.code!r})" if isinstance(exc, SystemExit) else f"raised {type(exc).__name__}: {exc}"
    return WorkbenchError("WB_EVAL_CASE_ERROR", f"{what} {raised}"[:500], fix)


# the scores samples hold, each kept once: a suite's cases mostly end the same few ways ("valid
# JSON", "got 'billing', expected 'billing'"), and a sample held its own dict and Score objects for
# them to the end, ~300 bytes a case of a 2,000-case suite. Bounded: cleared when full (a judge
# explaining each case in its own words shares nothing)
_SHARED_SCORES: dict[tuple, dict[str, Score]] = {}
SHARED_SCORES_MAX = 4096


def _shared(scores: dict[str, Score]) -> dict[str, Score]:
    """`scores`, or an equal dict some sample holds already (a sample never changes its scores)."""
    if any(score.value == 0 and math.copysign(1, score.value) < 0 for score in scores.values()):
        return scores  # -0.0 equals 0.0, yet the stored rows write it as it was given
    key = tuple(scores.items())
    try:
        shared = _SHARED_SCORES.get(key)
    except TypeError:  # a Score subclass that is not hashable: kept as it is
        return scores
    if shared is not None:
        return shared
    if len(_SHARED_SCORES) >= SHARED_SCORES_MAX:
        _SHARED_SCORES.clear()
    _SHARED_SCORES[key] = scores
    return scores


async def _run_sample(context: EvalContext, judge, answer, epochs: int, eval_run: EvalRun) -> Sample:
    suite, case = context.suite, context.case
    error, stage, output = None, None, None
    live = [0]
    token = _live_requests.set(live)
    tags = {"epoch": str(context.epoch)} if epochs > 1 else {}
    case_run = None
    started = time.perf_counter()
    try:
        # the exception passes through the case's run, so the run is stored as failed with it
        with run(f"eval:{suite.name}:{case.id}", kind="eval_case", prompt=context.prompt.ref, suite=suite.name,
                 case=case.id, vars=vars_json(case.vars),
                 **tags) as case_run:
            case_run.gathers = True  # the scorers read every call the case made, in runs inside it too
            if suite.target is not None:
                output = await _call(suite.target, case.vars, context)
            else:
                output = await answer(case.vars)
    except _INTERRUPTS:
        raise
    except BaseException as exc:  # noqa: BLE001 - sys.exit() in a target is an error, never a pass
        error, stage = _case_error(exc, "the target", f"fix the target (or the app it calls) for case {case.id}"), "target"
    finally:
        _live_requests.reset(token)
    latency_ms = (time.perf_counter() - started) * 1000
    scores: dict[str, Score] = {}
    if error is None:
        score_context = ScoreContext(case.id, case.vars, output, case.expected, case.metadata, case_run.calls, judge)
        for scorer in suite.scorers:
            try:
                scores[scorer.name] = scorer(score_context) if scorer.inline else await _call(scorer, score_context)
            except _INTERRUPTS:
                raise
            except BaseException as exc:  # noqa: BLE001 - a broken scorer leaves the case unjudged
                error, stage = _case_error(exc, f"scorer {scorer.name}", f"fix scorer {scorer.name}"), "scorer"
                break
        if error is None and all(score.value is None for score in scores.values()):
            error, stage = WorkbenchError(
                "WB_EVAL_CASE_ERROR", f"no scorer gave case {case.id} a score (only labels: "
                f"{', '.join(sorted(scores))})", "add a scorer that returns a bool or a number in [0, 1]",
            ), "scorer"
    scores = _shared(scores)
    cost = case_run.full_cost_micros  # paid or replayed alike: a replayed run compares with a recorded one
    # unpriced or in two currencies (rare): the parts kept, from the run's bill
    other_costs, unpriced = ({}, 0) if cost is not None else bill_costs(case_run.billed)
    unpriced_models = tuple(sorted(case_run.unpriced_models)) if unpriced else ()
    # the object itself is not kept; its text may quote a key, or the credential a call of the case sent
    # (echoed by its provider into an SDK's error): masked before the store and the reports keep it
    sent = sorted(case_run.sent, key=len, reverse=True)
    text = None if output is None else mask_secrets(as_text(output)[:OUTPUT_CHARS + _MASK_MARGIN], sent)[:OUTPUT_CHARS]
    if error is not None:
        error = WorkbenchError(error.code, mask_secrets(error.cause, sent), error.fix)
    at, size = (0, 0) if text is None else eval_run.outputs.keep(text)
    sample = Sample(context.epoch, None if text is None else eval_run.outputs, at, size, scores, cost, case_run.run_id,
                    latency_ms, live[0] > 0, error, stage, case_run.currency, other_costs or None, unpriced,
                    unpriced_models)
    recorder().spool.append("eval_sample", {  # stored now: nothing a killed eval finished is lost
        "eval_run_id": eval_run.eval_run_id, "case_id": case.id, "epoch": sample.epoch,
        "run_id": sample.run_id, "score": sample.score, **stored_costs(*costs_of((sample,))),
        "latency_ms": sample.latency_ms, "live": sample.live, "output": text,
        "scores": json.dumps({name: score.value for name, score in scores.items()}),
        "error": f"{error.code}: {error.cause}" if error else None,
    })
    return sample


def store_eval_run(eval_run: EvalRun, status: str, verdict=None, error_code: str | None = None) -> None:
    """Spool the eval run and its cases (fail-open, like every recording); each sample was spooled
    as it ended. `status`: pass, regression, error (no verdict), recorded (a baseline was written)
    or compared (a cell of `workbench eval compare`); `verdict`: the gate's, when it judged."""
    spool = recorder().spool
    judged = {case.case_id: case for case in verdict.cases} if verdict is not None else {}
    _store_run_row(eval_run, status, verdict, error_code, failed_cases=sum(case.failed for case in judged.values()))
    appended = 0
    for result in eval_run.results:
        case = judged.get(result.case_id)
        spool.append("eval_result", {
            "eval_run_id": eval_run.eval_run_id, "case_id": result.case_id, "run_id": result.run_id,
            "score": result.score, "baseline_score": case.baseline if case else None,
            "delta": case.delta if case else None, "passed": None if case is None else not case.failed,
            **stored_costs(*result.costs), "baseline_cost_micros": case.baseline_cost_micros if case else None,
            "output": result.output,
            "scores": json.dumps({name: score.value for name, score in result.scores.items()}),
            "error": f"{result.error.code}: {result.error.cause}" if result.error else None,
            "samples": len(result.samples), "spread": result.spread, "p_value": case.p_value if case else None,
        })
        appended += 1
        if appended >= STORE_BATCH:  # written as they come: a large suite's rows never wait all at once
            spool.flush(ingest=False)  # (encoded and written now, not all held in memory at the end)
            appended = 0


def _store_run_row(eval_run: EvalRun, status: str, verdict=None, error_code: str | None = None,
                   failed_cases: int | None = None, started: bool = False) -> None:
    """The eval run's own row. `started`: the row of a run under way (no end, no figures yet)."""
    recorder().spool.append("eval_run", {
        "eval_run_id": eval_run.eval_run_id, "suite": eval_run.suite.name, "prompt_id": eval_run.prompt.id,
        "prompt_version": eval_run.prompt.version, "prompt_hash": eval_run.prompt.hash, "model": eval_run.model,
        "mode": eval_run.mode, "git_commit": eval_run.git_commit,
        "started_at": eval_run.started_at.isoformat() if eval_run.started_at else None,
        "ended_at": eval_run.ended_at.isoformat() if eval_run.ended_at else None,
        "mean_score": eval_run.mean, "baseline_mean": verdict.baseline_mean if verdict is not None else None,
        "tolerance": eval_run.suite.tolerance, "verdict": status, "error_code": error_code,
        "cases": len(eval_run.suite.cases) if started else len(eval_run.results), "failed_cases": failed_cases,
        **(dict.fromkeys(("cost_micros", "currency", "costs", "unpriced_calls")) if started
           else stored_costs(*eval_run.costs)), "epochs": eval_run.epochs, "spread": eval_run.spread,
        "confidence": verdict.confidence if verdict is not None else eval_run.suite.confidence,
        "errored_cases": None if started else len(eval_run.errored), "matrix_id": eval_run.matrix_id,
        "matrix_reference": eval_run.matrix_reference if eval_run.matrix_id else None,
    })
