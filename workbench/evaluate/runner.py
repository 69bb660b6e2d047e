"""The runner: every case of a suite, concurrently (bounded), each in a run of kind `eval_case`
linked to its calls; judges in runs of their own; results into `eval_runs` / `eval_results`.
Replay by default: a case that misses its cassette stops the suite with WB_REPLAY_MISS itself."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import json
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx2

from workbench.ids import new_id
from workbench.capture import clock, recorder, run
from workbench.config import RecordMode, settings
from workbench.errors import WorkbenchError
from workbench.evaluate.prompts import Prompt, prompts
from workbench.evaluate.scorers import Score, ScoreContext, as_text
from workbench.evaluate.suite import Case, Suite
from workbench.replay.clients import AsyncReplayTransport, async_http_client, http_client
from workbench.replay.session import Cassette

# errors that are the model's answer being wrong (the case scores 0), not a failure to judge
CASE_FAILURES = {
    "WB_LLM_OUTPUT_INVALID", "WB_LLM_TRUNCATED", "WB_LLM_REFUSED", "WB_AGENT_MAX_TURNS", "WB_AGENT_TOOL_LOOP",
    "WB_AGENT_DEADLINE", "WB_AGENT_CONTEXT_EXHAUSTED", "WB_BUDGET_EXCEEDED",
}


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
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        if self._inner is not None:
            await self._inner.aclose()


@dataclass
class EvalContext:
    """What a suite's target gets besides the case's vars: clients bound to the suite's cassette."""

    suite: Suite
    prompt: Prompt
    case: Case
    cassette: Cassette | None
    network: Network = field(default_factory=Network)

    def http_client(self, **kwargs) -> httpx2.Client:
        """An httpx2 client for the `openai` / `anthropic` SDKs: recorded, replayed from the cassette."""
        return http_client(self.cassette, transport=self.network.sync_transport(), **kwargs)

    def async_http_client(self, **kwargs) -> httpx2.AsyncClient:
        return async_http_client(self.cassette, transport=_LazyAsyncTransport(self.network.async_), **kwargs)

    @property
    def transport(self) -> httpx2.AsyncBaseTransport:
        """An async transport for the runtime's providers (`OpenAIProvider(..., transport=...)`)."""
        return self.network.transport(self.cassette)


@dataclass
class CaseResult:
    case_id: str
    output: Any
    scores: dict[str, Score]
    cost_micros: int | None  # None: a call was unpriced
    run_id: str
    error: WorkbenchError | None = None

    @property
    def score(self) -> float:
        """The mean of the gated scores, to 6 places: the precision baselines keep."""
        gated = [score.value for score in self.scores.values() if score.value is not None]
        return round(sum(gated) / len(gated), 6) if gated else 0.0


@dataclass
class EvalRun:
    eval_run_id: str
    suite: Suite
    prompt: Prompt
    mode: RecordMode
    results: list[CaseResult] = field(default_factory=list)
    judge_cost_micros: int = 0
    git_commit: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None

    @property
    def mean(self) -> float:
        return round(sum(result.score for result in self.results) / len(self.results), 6) if self.results else 0.0

    @property
    def cost_micros(self) -> int | None:
        costs = [result.cost_micros for result in self.results]
        return None if any(cost is None for cost in costs) else sum(costs) + self.judge_cost_micros

    @property
    def model(self) -> str | None:
        return self.prompt.model

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
            with self._lock:
                self.eval_run.judge_cost_micros += judge_run.billed.full_cost_micros or 0
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

    def __init__(self, suite: Suite, prompt: Prompt, transport) -> None:
        from workbench.runtime.gateway import Gateway

        self.prompt = prompt
        self.gateway = Gateway(suite_providers(suite, transport), default_model=prompt.model)

    async def __call__(self, variables: dict):
        from workbench.runtime.llm import llm_async

        return await llm_async(self.gateway, self.prompt, variables, output=self.prompt.output_type,
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
    network: Network | None = None,
) -> EvalRun:
    mode = mode or settings().record_mode
    prompt = suite.prompt if prompt_version is None else prompts.get(suite.prompt.id, prompt_version)
    cassette = None if mode == "live" else Cassette(suite.cassette_path, mode)
    judge_cassette = None
    if suite.judge is not None and mode != "live":
        judge_cassette = Cassette(suite.judge_cassette_path, mode)
    eval_run = EvalRun(new_id(), suite, prompt, mode, git_commit=git_commit(suite.file.parent),
                       started_at=clock.now())
    network = network or Network()
    judge = _Judge(suite, judge_cassette, eval_run, network) if suite.judge is not None else None
    limit = asyncio.Semaphore(max(1, suite.concurrency))
    answer = _RuntimeAnswerer(suite, prompt, network.transport(cassette)) if suite.target is None else None

    async def one(case: Case) -> CaseResult:
        async with limit:
            result = await _run_case(suite, prompt, case, cassette, judge, network, answer)
            if progress is not None:
                progress()
            return result

    try:
        results = await asyncio.gather(*(one(case) for case in suite.cases), return_exceptions=True)
    finally:
        if answer is not None:
            await answer.close()
        for used in (cassette, judge_cassette):
            if used is not None:
                used.save()
    for used in (cassette, judge_cassette):
        if used is not None and used.misses:
            raise used.misses[0]
    for result in results:
        if isinstance(result, BaseException):
            raise result
    eval_run.results = list(results)  # gather keeps the cases' order
    eval_run.ended_at = clock.now()
    return eval_run


async def _run_case(
    suite: Suite, prompt: Prompt, case: Case, cassette: Cassette | None, judge, network: Network, answer=None
) -> CaseResult:
    context = EvalContext(suite, prompt, case, cassette, network)
    error = None
    with run(f"eval:{suite.name}:{case.id}", kind="eval_case", prompt=prompt.ref, suite=suite.name, case=case.id,
             vars=json.dumps(case.vars, sort_keys=True, ensure_ascii=False, default=str)) as case_run:
        try:
            if suite.target is not None:
                output = await _call(suite.target, case.vars, context)
            else:
                output = await answer(case.vars)
        except WorkbenchError as exc:
            if exc.code not in CASE_FAILURES:
                raise
            output, error = None, exc
    scores: dict[str, Score] = {}
    for scorer in suite.scorers:
        if error is not None:
            scores[scorer.name] = Score(0.0, f"{error.code}: {error.cause}"[:200], assertion=True)
            continue
        score_context = ScoreContext(case.id, case.vars, output, case.expected, case.metadata, case_run.calls, judge)
        scores[scorer.name] = scorer(score_context) if scorer.inline else await _call(scorer, score_context)
    billed = case_run.billed
    cost = billed.full_cost_micros  # paid or replayed alike: a replayed run compares with a recorded one
    return CaseResult(case.id, output, scores, cost, case_run.run_id, error)


def store_eval_run(eval_run: EvalRun, verdict: str, baseline=None, error_code: str | None = None) -> None:
    """Spool the eval run and its results (fail-open, like every recording)."""
    spool = recorder().spool
    baseline_cases = baseline.cases if baseline is not None else {}
    spool.append("eval_run", {
        "eval_run_id": eval_run.eval_run_id, "suite": eval_run.suite.name, "prompt_id": eval_run.prompt.id,
        "prompt_version": eval_run.prompt.version, "prompt_hash": eval_run.prompt.hash, "model": eval_run.model,
        "mode": eval_run.mode, "git_commit": eval_run.git_commit,
        "started_at": eval_run.started_at.isoformat() if eval_run.started_at else None,
        "ended_at": eval_run.ended_at.isoformat() if eval_run.ended_at else None,
        "mean_score": eval_run.mean, "baseline_mean": baseline.mean if baseline is not None else None,
        "tolerance": eval_run.suite.tolerance, "verdict": verdict, "error_code": error_code,
        "cases": len(eval_run.results),
        "failed_cases": sum(
            1 for result in eval_run.results
            if result.case_id in baseline_cases and baseline_cases[result.case_id].score - result.score > eval_run.suite.tolerance
        ),
        "cost_micros": eval_run.cost_micros,
    })
    for result in eval_run.results:
        recorded = baseline_cases.get(result.case_id)
        spool.append("eval_result", {
            "eval_run_id": eval_run.eval_run_id, "case_id": result.case_id, "run_id": result.run_id,
            "score": result.score, "baseline_score": recorded.score if recorded else None,
            "delta": result.score - recorded.score if recorded else None,
            "passed": recorded is None or recorded.score - result.score <= eval_run.suite.tolerance,
            "cost_micros": result.cost_micros, "baseline_cost_micros": recorded.cost_micros if recorded else None,
            "output": as_text(result.output)[:4000] if result.output is not None else None,
            "scores": json.dumps({name: score.value for name, score in result.scores.items()}),
            "error": f"{result.error.code}: {result.error.cause}" if result.error else None,
        })
