"""`Agent`: a model, a prompt and Python tools, looping until a final answer.

Each turn: compact if the next request would outgrow the window, call the model through the
gateway (budget, retries, fallback), run the turn's tool calls concurrently and pair the results
with the calls by position, record an `agent.turn` event. The run is a workbench run of kind
`agent`, so its span is `invoke_agent {name}` and every error it raises carries its bill."""

from __future__ import annotations

import asyncio
import inspect
import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from pydantic import BaseModel

from workbench.capture import Billed, event, run, semconv
from workbench.errors import WorkbenchError
from workbench.runtime._sync import run_sync
from workbench.runtime.budget import Budget, budget_scope
from workbench.runtime.compaction import (
    Compaction, CompactionInfo, Conversation, compaction_of, transcript,
)
from workbench.runtime.gateway import ContextOverflowError, Gateway
from workbench.runtime.llm import RESPOND, check_turn, respond_tool, validate_arguments
from workbench.runtime.messages import (
    AssistantMessage, Completion, Message, ModelRequest, ToolResult, ToolResults, ToolUse, UserMessage,
)
from workbench.runtime.prompt import PromptLike, as_prompt, prompt_tags
from workbench.runtime.tools import Tool, as_tool

NUDGE = f"Call the {RESPOND} tool with your final answer."


@dataclass(frozen=True)
class TurnInfo:
    """One turn, as the `agent.turn` event records it (and `on_turn` receives it)."""

    turn: int
    model: str
    provider: str
    stop_reason: str | None
    tool_names: list[str]
    tool_errors: int
    cost_micros: int | None
    completion: Completion
    results: list[ToolResult]


@dataclass
class AgentResult:
    output: Any  # the validated `output` model, or the final text
    text: str | None  # the last assistant text
    turns: int
    compactions: list[CompactionInfo]
    run_id: str
    billed: Billed
    messages: list[Message] = field(repr=False, default_factory=list)


class Agent:
    def __init__(
        self,
        gateway: Gateway,
        prompt: PromptLike | str,
        tools: Sequence[Tool | Callable[..., Any]] = (),
        output: type[BaseModel] | None = None,
        max_turns: int = 8,
        max_tokens: int = 4096,
        max_tool_result_chars: int = 4000,
        max_repeated_tool_calls: int = 3,
        deadline_s: float | None = None,
        budget: Budget | None = None,
        compact: Compaction | str | None = "auto",
        prompt_cache: bool | str = "auto",
        on_turn: Callable[[TurnInfo], Any] | None = None,
        on_compact: Callable[[CompactionInfo], Any] | None = None,
        *,
        model: str | None = None,
        name: str | None = None,
        temperature: float | None = None,
    ) -> None:
        self.gateway = gateway
        self.prompt = as_prompt(prompt)
        self.tools = [as_tool(item) for item in tools]
        names = [item.name for item in self.tools]
        if len(set(names)) != len(names) or (output is not None and RESPOND in names):
            raise ValueError(f"tool names must be unique (and {RESPOND!r} is reserved with an output): {names}")
        self.output = output
        self.max_turns = max_turns
        self.max_tokens = max_tokens
        self.max_tool_result_chars = max_tool_result_chars
        self.max_repeated_tool_calls = max_repeated_tool_calls
        self.deadline_s = deadline_s
        self.budget = budget
        self.compaction = compaction_of(compact)
        self.prompt_cache = prompt_cache not in (False, None, "off")
        self.on_turn = on_turn
        self.on_compact = on_compact
        self.model = model
        self.name = name or getattr(self.prompt, "id", None) or "agent"
        self.temperature = temperature

    async def arun(self, vars: Mapping[str, Any] | None = None, *, system_dynamic: str = "",
                   model: str | None = None) -> AgentResult:
        """Run the agent to a final answer (async core)."""
        async with run(self.name, kind="agent", prompt=prompt_tags(self.prompt)) as current:
            with budget_scope(self.budget if self.budget is not None else self.gateway.budget, self.name):
                loop = _Loop(self, current.run_id, vars or {}, system_dynamic, model or self.model)
                if self.deadline_s is None:
                    result = await loop.run()
                else:
                    try:
                        async with asyncio.timeout(self.deadline_s) as timer:
                            result = await loop.run()
                    except TimeoutError:
                        if not timer.expired():
                            raise
                        raise WorkbenchError(
                            "WB_AGENT_DEADLINE",
                            f"agent {self.name!r} ran past its deadline of {self.deadline_s:g} s during turn "
                            f"{loop.turn} ({loop.phase})",
                            "raise deadline_s, lower max_turns, or make the slow tool faster",
                        ) from None
            result.billed = current.billed
            return result

    def run(self, vars: Mapping[str, Any] | None = None, **options) -> AgentResult:
        """The sync twin of `arun` (same arguments)."""
        return run_sync(lambda: self.arun(vars, **options), self.gateway)

    run_sync = run


class _Loop:
    def __init__(self, agent: Agent, run_id: str, vars: Mapping[str, Any], system_dynamic: str,
                 model: str | None) -> None:
        self.agent = agent
        self.run_id = run_id
        self.vars = vars
        self.system_dynamic = system_dynamic
        self.model_arg = model
        self.turn = 0
        self.phase = "starting"
        self.ratio = 1.0  # reported input tokens / raw estimate, from the last turn
        self.signatures: list[tuple] = []
        self.compactions: list[CompactionInfo] = []

    async def run(self) -> AgentResult:
        agent = self.agent
        gateway = agent.gateway
        self.model, spec = gateway.resolve(self.model_arg, agent.prompt)
        self.max_tokens = min(agent.max_tokens, spec.max_output)
        self.room = spec.context_window - self.max_tokens
        compaction = agent.compaction
        self.limit = int(compaction.at * self.room) if compaction else self.room
        self.tool_specs = [item.spec for item in agent.tools]
        if agent.output is not None:
            self.tool_specs.append(respond_tool(agent.output))
        self.tools = {item.name: item for item in agent.tools}
        conversation = Conversation(agent.prompt.render(self.vars))
        self.conversation = conversation

        while self.turn < agent.max_turns:
            self.turn += 1
            self.phase = "model call"
            completion = await self._call_model()
            if completion.stop in ("refusal", "length"):
                await self._turn_done(completion, [])  # the failed turn is on the record too
            check_turn(completion, self.model, f"on turn {self.turn} of agent {agent.name!r}", self.max_tokens)
            uses = completion.tool_uses
            assistant = AssistantMessage(completion.text, tuple(uses))
            if not uses:
                if agent.output is None:
                    await self._turn_done(completion, [])
                    return self._result(completion.text or "", completion)
                conversation.turns.append((assistant, UserMessage((NUDGE,))))
                await self._turn_done(completion, [])
                self._check_loop((("(text)", completion.text or ""),))
                continue
            self.phase = "tools " + ", ".join(use.name for use in uses)
            answers: dict[int, BaseModel] = {}
            results = list(await asyncio.gather(*(self._run_tool(index, use, answers) for index, use in enumerate(uses))))
            await self._turn_done(completion, results)
            if answers:
                return self._result(answers[min(answers)], completion)
            conversation.turns.append((assistant, ToolResults(tuple(results))))
            self._check_loop(tuple(
                (use.name, _canonical(use.arguments), result.content, result.is_error)
                for use, result in zip(uses, results)
            ))
        raise WorkbenchError(
            "WB_AGENT_MAX_TURNS",
            f"agent {agent.name!r} used all {agent.max_turns} turns without a final answer "
            f"(last tools: {', '.join(use.name for use in self._last_uses()) or 'none'})",
            "raise max_turns, or make the prompt say when to stop"
            + (f" and to call {RESPOND}" if agent.output is not None else ""),
        )

    # -- one model call, with compaction before it and after an overflow refusal
    def _request(self) -> ModelRequest:
        agent = self.agent
        return ModelRequest(
            model=self.model, messages=self.conversation.messages(), system=agent.prompt.system or "",
            system_dynamic=self.system_dynamic, tools=self.tool_specs, max_tokens=self.max_tokens,
            temperature=agent.temperature, cache=agent.prompt_cache,
        )

    def _estimate(self, request: ModelRequest) -> int:
        return math.ceil(self.agent.gateway.estimate(request) * self.ratio)

    async def _call_model(self) -> Completion:
        gateway = self.agent.gateway
        request = self._request()
        if self.agent.compaction is not None and self.conversation.turns:
            estimate = self._estimate(request)
            if estimate > self.limit:
                info = await self._compact(estimate, "threshold")
                if info is not None and info.outcome == "ok":
                    request = self._request()
                elif estimate > self.room:
                    self._exhausted(estimate, info)
        forced: CompactionInfo | None = None
        while True:
            try:
                completion = await gateway.complete(request, input_scale=self.ratio)
                break
            except ContextOverflowError as exc:
                if forced is not None or self.agent.compaction is None:
                    self._exhausted(self._estimate(request), forced, exc)
                info = forced = await self._compact(self._estimate(request), "overflow")
                if info is None or info.outcome != "ok":
                    self._exhausted(self._estimate(request), info, exc)
                request = self._request()
        if completion.call.settled and completion.estimate:
            self.ratio = completion.usage.total_input / completion.estimate
        return completion

    def _exhausted(self, estimate: int, info: CompactionInfo | None, cause: Exception | None = None):
        agent = self.agent
        if agent.compaction is None:
            why = "compaction is off"
        elif info is None:
            why = f"there is nothing older than the last {agent.compaction.keep_turns} turn(s) to summarise"
        elif info.outcome == "ok":
            why = f"it still does not fit after {info.summarised_turns} turn(s) were summarised"
        else:
            why = f"the summary failed ({info.error})"
        raise WorkbenchError(
            "WB_AGENT_CONTEXT_EXHAUSTED",
            f"turn {self.turn} of agent {agent.name!r} needs about {estimate:,} input tokens but {self.model} has room "
            f"for {self.room:,} (context window minus max_tokens={self.max_tokens}), and {why}"
            + (f"; the provider said: {cause.cause}" if isinstance(cause, WorkbenchError) else ""),
            "lower max_tool_result_chars or keep_turns, use a model with a larger window, or split the task",
        ) from cause

    async def _compact(self, tokens_before: int, trigger: str) -> CompactionInfo | None:
        agent, conversation = self.agent, self.conversation
        compaction = agent.compaction
        assert compaction is not None
        count = len(conversation.turns) - compaction.keep_turns
        if count <= 0:
            return None
        self.phase = "compaction"
        model = compaction.model or self.model
        old = conversation.turns[:count]
        summary_model, spec = agent.gateway.resolve(model)
        request = ModelRequest(
            model=summary_model, system=compaction.instructions, cache=False,
            messages=[UserMessage((transcript(conversation.summary, old, conversation.summarised + 1),))],
            max_tokens=min(compaction.max_summary_tokens, spec.max_output),
        )
        cost, error, text = 0, None, None
        try:
            completion = await agent.gateway.complete(request)
        except WorkbenchError as exc:
            if exc.code != "WB_PROVIDER_ERROR":
                raise  # a budget refusal is the run's answer, not a failed summary
            error = exc.cause[:300]
        else:
            cost = completion.cost_micros or 0
            if completion.stop != "end" or not (completion.text or "").strip():
                error = f"the summary stopped with {completion.stop_reason!r} and {len(completion.text or '')} characters"
            else:
                text = completion.text.strip()
        if text is not None:
            conversation.summary = text
            conversation.summarised += count
            conversation.turns = conversation.turns[count:]
            tokens_after = self._estimate(self._request())
        else:
            tokens_after = tokens_before
        info = CompactionInfo(
            turn=self.turn, outcome="ok" if text is not None else "failed", trigger=trigger,
            tokens_before=tokens_before, tokens_after=tokens_after, limit=self.limit,
            summarised_turns=count if text is not None else 0, kept_turns=len(conversation.turns),
            model=summary_model, cost_micros=cost, error=error,
        )
        self.compactions.append(info)
        event(semconv.EVENT_AGENT_COMPACT, turn=info.turn, outcome=info.outcome, trigger=info.trigger,
              tokens_before=info.tokens_before, tokens_after=info.tokens_after, limit=info.limit,
              summarised_turns=info.summarised_turns, kept_turns=info.kept_turns, model=info.model,
              cost_micros=info.cost_micros, error=info.error)
        await _callback(agent.on_compact, info)
        self.phase = "model call"
        return info

    # -- tools
    async def _run_tool(self, index: int, use: ToolUse, answers: dict[int, BaseModel]) -> ToolResult:
        agent = self.agent
        if use.name == RESPOND and agent.output is not None:
            value, problem = validate_arguments(agent.output, use.arguments)
            if value is None:
                return ToolResult(use.id, use.name, problem, True)
            answers[index] = value
            return ToolResult(use.id, use.name, "accepted")
        tool = self.tools.get(use.name)
        if tool is None:
            known = ", ".join(self.tools) or "none"
            return ToolResult(use.id, use.name, f"there is no tool named {use.name!r} (tools: {known})", True)
        return await tool(use, agent.max_tool_result_chars)

    def _check_loop(self, signature: tuple) -> None:
        self.signatures.append(signature)
        repeats = self.agent.max_repeated_tool_calls
        history = self.signatures
        for period in (1, 2, 3):
            if len(history) < period * repeats:
                continue
            blocks = [tuple(history[len(history) - period * (k + 1): len(history) - period * k]) for k in range(repeats)]
            if all(block == blocks[0] for block in blocks):
                calls = "; ".join(f"{name}({args})" for turn in blocks[0] for name, args, *_ in turn)
                raise WorkbenchError(
                    "WB_AGENT_TOOL_LOOP",
                    f"agent {self.agent.name!r} repeated the same tool calls with the same results "
                    f"{repeats} times in a cycle of {period} turn(s), ending at turn {self.turn}: {calls[:500]}",
                    "make the tool's result say what to do next, or the prompt say when to stop; "
                    "max_repeated_tool_calls sets how many repeats are allowed",
                )

    def _last_uses(self) -> tuple[ToolUse, ...]:
        return self.conversation.turns[-1][0].tool_uses if self.conversation.turns else ()

    async def _turn_done(self, completion: Completion, results: list[ToolResult]) -> None:
        usage = completion.usage
        names = [use.name for use in completion.tool_uses]
        errors = sum(result.is_error for result in results)
        event(
            semconv.EVENT_AGENT_TURN, turn=self.turn, model=completion.model, provider=completion.provider,
            input_tokens=usage.input_tokens, cache_read_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_tokens, output_tokens=usage.output_tokens,
            reasoning_tokens=usage.reasoning_tokens, cost_micros=completion.cost_micros,
            stop_reason=completion.stop_reason, tool_names=names, tool_errors=errors,
            attempts=completion.attempts,
        )
        await _callback(self.agent.on_turn, TurnInfo(
            turn=self.turn, model=completion.model, provider=completion.provider,
            stop_reason=completion.stop_reason, tool_names=names, tool_errors=errors,
            cost_micros=completion.cost_micros, completion=completion, results=results,
        ))

    def _result(self, output: Any, completion: Completion) -> AgentResult:
        return AgentResult(
            output=output, text=completion.text, turns=self.turn, compactions=list(self.compactions),
            run_id=self.run_id, billed=Billed(), messages=self.conversation.messages(),
        )


async def _callback(function: Callable[[Any], Any] | None, value: Any) -> None:
    if function is not None:
        result = function(value)
        if inspect.isawaitable(result):
            await result


def _canonical(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments or "{}"), sort_keys=True, separators=(",", ":"))
    except json.JSONDecodeError:
        return arguments
