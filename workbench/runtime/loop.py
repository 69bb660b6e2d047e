"""The agent's turn loop.

Each turn: compact if the next request would outgrow the window, call the model through the gateway
(budget, retries, fallback), run the turn's tool calls concurrently and pair the results with the
calls by position, record an `agent.turn` event, then write a checkpoint before the next turn is
bought.

The structured answer is the `respond` tool (a prose answer holding its JSON is read too). A turn
that answers the wrong shape is a REPAIR turn: the issues go back to the model, and it neither
counts toward nor resets tool-loop detection. A `respond` emitted in the same turn as other tool calls
is SUPERSEDED (it was written before their results existed): it is answered with an error result and
the loop goes on with the results in hand. Two exhaustions, two codes: every turn used with the last
failure a wrong shape is `WB_LLM_OUTPUT_INVALID`; with the loop still calling tools, `WB_AGENT_MAX_TURNS`."""

from __future__ import annotations

import asyncio
import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from workbench.capture import Billed, Run, event, semconv
from workbench.errors import WorkbenchError
from workbench.models import ModelSpec, Usage
from workbench.runtime import checkpoint
from workbench.runtime.budget import Budget, Ledger
from workbench.runtime.compaction import CompactionInfo, Conversation, summary_request, with_text
from workbench.runtime.gateway import ContextOverflowError
from workbench.runtime.llm import RESPOND, call_hook, check_turn, json_in_text, redacted, respond_tool, validate_arguments
from workbench.runtime.messages import (
    AssistantMessage, Completion, ModelRequest, ToolResult, ToolResults, ToolUse, UserMessage,
)
from workbench.runtime.prompt import prompt_tags
from workbench.runtime.tools import Tool
from workbench.runtime.transcript import RunState

if TYPE_CHECKING:
    from workbench.runtime.agent import Agent, AgentResult

NUDGE = f"Call the {RESPOND} tool with your final answer."
SUPERSEDED = (f"superseded: this {RESPOND} call was written before the results of the other tools this turn "
              f"called existed; read them, then call {RESPOND} again")


@dataclass(frozen=True)
class TurnInfo:
    """One turn, as the `agent.turn` event records it (and `on_turn` receives it)."""

    turn: int  # 1-based, counting every earlier run of the conversation: turn == max_turns is the last
    max_turns: int
    model: str
    provider: str
    stop_reason: str | None
    tool_names: list[str]  # in the order the model called them; `respond` is not one
    tool_errors: int
    cost_micros: int | None  # this turn alone
    usage: Usage  # this turn alone
    run: Billed  # the running total, this turn (and every earlier run of the conversation) included
    repair_of: str | None  # on a repair turn: what the model was told to fix
    completion: Completion
    results: list[ToolResult]


@dataclass
class Picks:
    """One run's choices inside the declaration."""

    model: str
    spec: ModelSpec
    tools: list[Tool]
    max_turns: int
    max_tokens: int
    max_tool_result_chars: int
    max_repeated_tool_calls: int
    deadline_s: float | None
    budget: Budget | None = None
    actor: str | None = None

    def offered_names(self, with_respond: bool) -> list[str]:
        return [item.name for item in self.tools] + ([RESPOND] if with_respond else [])


@dataclass
class _Attempts:
    shape_failures: list[str] = field(default_factory=list)
    last: str = "none"  # "shape" (a repair turn is due) or "tools"


class Loop:
    def __init__(self, agent: Agent, picks: Picks, current: Run, state: RunState | None, *,
                 vars: dict | None = None, system_dynamic: str = "", attachments: tuple = (),
                 user: str | None = None) -> None:
        self.agent, self.picks, self.current = agent, picks, current
        self.run_id = current.run_id
        self.model = picks.model
        self.phase = "starting"
        self.answered = False  # a provider answered in this run: a failure then leaves a transcript
        self.ledger: Ledger | None = None
        self.compactions: list[CompactionInfo] = []
        self.attempts = _Attempts()
        self.repair_of: str | None = None
        self.request_turns = 0  # how many turns the last request sent held (for a failure's transcript)
        self.tool_calls = 0
        self.checkpoints = checkpoint.Writer(self.run_id)
        gateway = agent.gateway
        if state is None:
            self.start: RunState | None = None
            self.prior = Billed()
            self.turn, self.ratio, self.signatures = 0, 1.0, []
            self.compaction_count, self.compaction_wait = 0, False
            self.system_dynamic = redacted(gateway, system_dynamic)
            task = (redacted(gateway, agent.prompt.render(vars or {})), *attachments)
            self.conversation = Conversation(task)
        else:
            self.start = state
            self.prior = state.billed
            self.turn, self.ratio = state.turn, state.ratio
            # tool-loop detection is per call: a continuation starts afresh, a resumed run goes on
            self.signatures = list(state.signatures) if user is None else []
            self.compaction_count, self.compaction_wait = state.compactions, state.compaction_wait
            self.system_dynamic = state.system_dynamic
            conversation = state.conversation
            self.conversation = Conversation(conversation.task, conversation.summary, conversation.summarised,
                                             list(conversation.turns))
            if user is not None:
                self._append_user(state.final, redacted(gateway, user))

    def _append_user(self, final: AssistantMessage | None, user: str) -> None:
        """One user turn after the transcript: answering the final message (and its respond call),
        or, for a transcript that ended on a failure, joining the last user message."""
        conversation = self.conversation
        if final is not None:
            responds = tuple(ToolResult(use.id, use.name, "accepted") for use in final.tool_uses)
            follow = ToolResults(responds, (user,)) if responds else UserMessage((user,))
            conversation.turns.append((final, follow))
        elif conversation.turns:
            assistant, follow = conversation.turns[-1]
            conversation.turns[-1] = (assistant, with_text(follow, user))
        else:
            conversation.task = (*conversation.task, user)

    # -- state, checkpoints, transcripts
    def state(self, final: AssistantMessage | None = None, failed: bool = False) -> RunState:
        conversation = self.conversation
        turns = conversation.turns[: self.request_turns] if failed else conversation.turns
        spent = self.ledger.spent() if self.ledger is not None else (0, {})
        return RunState(
            agent=self.agent.name, prompt=prompt_tags(self.agent.prompt) or {}, model=self.model,
            tools=self.picks.offered_names(self.agent.output is not None), system_dynamic=self.system_dynamic,
            conversation=Conversation(conversation.task, conversation.summary, conversation.summarised, list(turns)),
            final=final, turn=self.turn, billed=self.prior + self.current.billed, spent=spent,
            compactions=self.compaction_count, compaction_wait=self.compaction_wait, ratio=self.ratio,
            signatures=list(self.signatures),
        )

    async def _checkpoint(self) -> None:
        agent = self.agent
        if not agent.checkpoints and agent.on_checkpoint is None:
            return
        state = self.state()
        checkpoint_id = self.checkpoints.write(state) if agent.checkpoints else ""
        event(semconv.EVENT_AGENT_CHECKPOINT, turn=self.turn, checkpoint_id=checkpoint_id)
        await call_hook(agent.on_checkpoint, checkpoint.CheckpointInfo(
            checkpoint_id=checkpoint_id, run_id=self.run_id, turn=self.turn, run=state.billed, state=state))

    # -- the loop
    async def run(self) -> AgentResult:
        agent, picks, spec = self.agent, self.picks, self.picks.spec
        self.max_tokens = min(picks.max_tokens, spec.max_output)
        self.room = spec.context_window - self.max_tokens
        compaction = agent.compaction
        self.limit = int(compaction.at * self.room) if compaction else self.room
        self.tool_specs = [item.spec for item in picks.tools]
        if agent.output is not None:
            self.tool_specs.append(respond_tool(agent.output))
        self.tools = {item.name: item for item in picks.tools}
        if self.start is not None:
            await self._checkpoint()  # a resumed or continued run can itself be resumed at once
        while self.turn < picks.max_turns:
            self.turn += 1
            self.phase = "model call"
            completion = await self._call_model()
            self.answered = True
            if completion.stop in ("refusal", "length"):
                await self._turn_done(completion, [])  # the failed turn is on the record too
            check_turn(completion, self.model, f"on turn {self.turn} of agent {agent.name!r}", self.max_tokens,
                       agent.gateway)
            outcome = await self._take(completion)
            if outcome is not None:
                return outcome
            await self._checkpoint()
            if self.attempts.last == "tools":
                self._check_loop(self._last_signature)
        raise self._exhausted_turns()

    async def _take(self, completion: Completion) -> AgentResult | None:
        """Act on one answered turn; the result when it was the final answer."""
        agent, conversation = self.agent, self.conversation
        uses = completion.tool_uses
        assistant = AssistantMessage(completion.text, tuple(uses))
        responds = [use for use in uses if use.name == RESPOND and agent.output is not None]
        others = [use for use in uses if use not in responds]
        repair_of, self.repair_of = self.repair_of, None
        if not others:
            if agent.output is None:
                await self._turn_done(completion, [], repair_of)
                return self._result(completion.text or "", completion, assistant)
            arguments = responds[0].arguments if responds else json_in_text(completion.text)
            value, problem = validate_arguments(agent.output, arguments) if arguments is not None else (None, NUDGE)
            if value is not None:
                await self._turn_done(completion, [], repair_of)
                return self._result(value, completion, assistant)
            # a repair turn: the model answered the wrong shape, and is told what to fix
            results = [ToolResult(use.id, use.name, problem, True) for use in responds]
            follow = ToolResults(tuple(results)) if responds else UserMessage(
                (NUDGE if arguments is None else f"{problem}. {NUDGE}",))
            await self._turn_done(completion, results, repair_of)
            conversation.turns.append((assistant, follow))
            self.attempts.shape_failures.append(problem if responds else "no answer through respond")
            self.attempts.last, self.repair_of = "shape", problem
            return None
        self.phase = "tools " + ", ".join(use.name for use in others)
        self.tool_calls += len(others)
        results = list(await asyncio.gather(*(self._run_tool(use) for use in uses)))
        await self._turn_done(completion, results, repair_of)
        conversation.turns.append((assistant, ToolResults(tuple(results))))
        self.attempts.last = "tools"
        self._last_signature = tuple(
            (use.name, _canonical(use.arguments), result.content, result.is_error)
            for use, result in zip(uses, results) if use.name != RESPOND
        )
        return None

    def _exhausted_turns(self) -> WorkbenchError:
        agent, attempts = self.agent, self.attempts
        if attempts.last == "shape":
            return WorkbenchError(
                "WB_LLM_OUTPUT_INVALID",
                f"agent {agent.name!r} used all {self.picks.max_turns} turns and its last answer was still the wrong "
                f"shape for {agent.output.__name__} ({len(attempts.shape_failures)} wrong answer(s); last: "
                f"{attempts.shape_failures[-1][:500]})",
                f"describe the shape of {agent.output.__name__} in the prompt, or simplify the model",
            )
        return WorkbenchError(
            "WB_AGENT_MAX_TURNS",
            f"agent {agent.name!r} used all {self.picks.max_turns} turns calling tools without a final answer "
            f"({self.tool_calls} tool call(s) in this run; last tools: "
            f"{', '.join(use.name for use in self._last_uses()) or 'none'})",
            "raise max_turns, or make the prompt say when to stop"
            + (f" and to call {RESPOND}" if agent.output is not None else ""),
        )

    # -- one model call, with compaction before it and after an overflow refusal
    def _request(self) -> ModelRequest:
        agent = self.agent
        return ModelRequest(
            model=self.model, messages=self.conversation.messages(), system=redacted(agent.gateway, agent.prompt.system or ""),
            system_dynamic=self.system_dynamic, tools=self.tool_specs, max_tokens=self.max_tokens,
            cache=agent.prompt_cache, session=agent.session, prompt_hash=getattr(agent.prompt, "hash", None),
            **agent.knobs,
        )

    def _estimate(self, request: ModelRequest) -> int:
        return math.ceil(self.agent.gateway.estimate(request) * self.ratio)

    async def _call_model(self) -> Completion:
        gateway = self.agent.gateway
        request = self._request()
        if self.agent.compaction is not None and self.conversation.turns:
            estimate = self._estimate(request)
            # after a failed summary the next attempt waits until the request no longer fits
            if estimate > self.limit and (not self.compaction_wait or estimate > self.room):
                info = await self._compact(estimate, "threshold")
                if info is not None and info.outcome == "ok":
                    request = self._request()
                elif estimate > self.room:
                    self._exhausted(estimate, info)
            elif estimate > self.room:
                self._exhausted(estimate, None)
        forced: CompactionInfo | None = None
        while True:
            self.request_turns = len(self.conversation.turns)
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
        if completion.call.settled and completion.estimate and not completion.cached:
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
            "lower max_tool_result_chars or Compaction(keep_turns=...), use a model with a larger window, "
            "or split the task",
        ) from cause

    async def _compact(self, tokens_before: int, trigger: str) -> CompactionInfo | None:
        agent, conversation = self.agent, self.conversation
        compaction = agent.compaction
        assert compaction is not None
        count = len(conversation.turns) - compaction.keep_turns
        if count <= 0:
            return None
        self.phase = "compaction"
        summary_model, spec = agent.gateway.resolve(compaction.model or self.model)
        max_summary = min(compaction.max_summary_tokens or min(2048, self.max_tokens), spec.max_output)
        request, form, clipped, omitted = summary_request(
            self._request(), conversation, count, compaction, summary_model, max_summary,
            spec.context_window - max_summary, self._estimate)
        usage, cost, error, text = Usage(), 0, None, None
        if request is None:
            error = "the turns to summarise do not fit the summary model even with every tool result left out"
        else:
            try:
                completion = await agent.gateway.complete(request, input_scale=self.ratio)
            except WorkbenchError as exc:
                if exc.code not in ("WB_PROVIDER_ERROR", "WB_LLM_CONTEXT_OVERFLOW"):
                    raise  # a budget refusal is the run's answer, not a failed summary
                error = exc.cause[:300]
            else:
                usage, cost = completion.usage, completion.cost_micros or 0
                if completion.stop != "end" or not (completion.text or "").strip():
                    error = (f"the summary stopped with {completion.stop_reason!r} and "
                             f"{len(completion.text or '')} characters")
                else:
                    text = completion.text.strip()
        if text is not None:
            conversation.summary = text
            conversation.summarised += count
            conversation.turns = conversation.turns[count:]
            tokens_after = self._estimate(self._request())
            self.compaction_count += 1
            self.compaction_wait = False
        else:
            tokens_after = tokens_before
            self.compaction_wait = True
        info = CompactionInfo(
            turn=self.turn, outcome="ok" if text is not None else "failed", trigger=trigger,
            tokens_before=tokens_before, tokens_after=tokens_after, limit=self.limit,
            summarised_turns=count if text is not None else 0, kept_turns=len(conversation.turns),
            compactions=self.compaction_count, model=summary_model, summary_input=form, clipped=clipped,
            omitted=omitted, usage=usage, cost_micros=cost, error=error,
        )
        self.compactions.append(info)
        event(semconv.EVENT_AGENT_COMPACT, turn=info.turn, outcome=info.outcome, trigger=info.trigger,
              tokens_before=info.tokens_before, tokens_after=info.tokens_after, limit=info.limit,
              summarised_turns=info.summarised_turns, kept_turns=info.kept_turns, compactions=info.compactions,
              model=info.model, summary_input=info.summary_input, clipped=info.clipped, omitted=info.omitted,
              input_tokens=usage.input_tokens, cache_read_tokens=usage.cache_read_tokens,
              cache_write_tokens=usage.cache_write_tokens, output_tokens=usage.output_tokens,
              cost_micros=info.cost_micros, error=info.error)
        await call_hook(agent.on_compact, info)
        self.phase = "model call"
        return info

    # -- tools
    async def _run_tool(self, use: ToolUse) -> ToolResult:
        agent = self.agent
        if use.name == RESPOND and agent.output is not None:
            return ToolResult(use.id, use.name, SUPERSEDED, True)
        tool = self.tools.get(use.name)
        if tool is None:
            known = ", ".join(self.tools) or "none"
            return ToolResult(use.id, use.name, f"there is no tool named {use.name!r} (tools: {known})", True)
        result = await tool(use, self.picks.max_tool_result_chars)
        content = redacted(agent.gateway, result.content)  # a tool result leaves the process too
        return result if content == result.content else ToolResult(result.call_id, result.name, content, result.is_error)

    def _check_loop(self, signature: tuple) -> None:
        self.signatures.append(signature)
        repeats = self.picks.max_repeated_tool_calls
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

    async def _turn_done(self, completion: Completion, results: list[ToolResult], repair_of: str | None = None) -> None:
        usage = completion.usage
        names = [use.name for use in completion.tool_uses if use.name != RESPOND or self.agent.output is None]
        errors = sum(result.is_error for result in results)
        event(
            semconv.EVENT_AGENT_TURN, turn=self.turn, max_turns=self.picks.max_turns, model=completion.model,
            provider=completion.provider, input_tokens=usage.input_tokens, cache_read_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_tokens, output_tokens=usage.output_tokens,
            reasoning_tokens=usage.reasoning_tokens, cost_micros=completion.cost_micros,
            stop_reason=completion.stop_reason, tool_names=names, tool_errors=errors,
            attempts=completion.attempts, cached=completion.cached, repair_of=repair_of,
        )
        await call_hook(self.agent.on_turn, TurnInfo(
            turn=self.turn, max_turns=self.picks.max_turns, model=completion.model, provider=completion.provider,
            stop_reason=completion.stop_reason, tool_names=names, tool_errors=errors,
            cost_micros=completion.cost_micros, usage=usage, run=self.prior + self.current.billed,
            repair_of=repair_of, completion=completion, results=results,
        ))

    def _result(self, output: Any, completion: Completion, final: AssistantMessage) -> AgentResult:
        from workbench.runtime.agent import AgentResult

        return AgentResult(
            output=output, text=completion.text, turns=self.turn, compactions=list(self.compactions),
            run_id=self.run_id, billed=Billed(), messages=self.conversation.messages(),
            state=self.state(final=final),
        )


def _canonical(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments or "{}"), sort_keys=True, separators=(",", ":"))
    except json.JSONDecodeError:
        return arguments
