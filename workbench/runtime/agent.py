"""`Agent`: a model, a prompt and Python tools, looping until a final answer.

The declaration is the agent's ceiling, screened when it is made (a NaN `max_tokens` is
`WB_RUNTIME_OPTION_INVALID` here, not a pydantic error at the first call). One run may pick inside
it: `model=`, `offer_tools=` (a subset of the declared tools), `limits=` (lower only) and a
`budget=` of its own (applied with the declaration's, so only the tighter counts).

A run is a workbench run of kind `agent`, so its span is `invoke_agent {name}` and every error it
raises carries its bill (`billed_of`) and, once a provider answered, its signed transcript
(`transcript_of`). A run can go on later in two ways: `resume(run_id)` from its last checkpoint in
the store (a crashed run: nothing paid is paid again), and `continue_(transcript, user)` from the
signed transcript a run returned (a correction: one more user turn). `continue` is a Python keyword,
hence the trailing underscore."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from pydantic import BaseModel

from workbench.capture import Billed, run
from workbench.errors import WorkbenchError
from workbench.runtime import checkpoint
from workbench.runtime._sync import run_sync
from workbench.runtime.budget import Budget, budget_scope
from workbench.runtime.caching import prompt_cache_of
from workbench.runtime.checkpoint import CheckpointInfo
from workbench.runtime.compaction import Compaction, CompactionInfo, compaction_of
from workbench.runtime.gateway import Gateway
from workbench.runtime.llm import RESPOND
from workbench.runtime.loop import Loop, Picks, TurnInfo
from workbench.runtime.messages import Document, Image, Message
from workbench.runtime.options import Limits, count, invalid, model_options, number
from workbench.runtime.prompt import PromptLike, as_prompt, prompt_tags, screen_secrets
from workbench.runtime.response_cache import acting_for
from workbench.runtime.tools import Tool, as_tool
from workbench.runtime.transcript import RunState, attach, sign, verify

__all__ = ["Agent", "AgentResult", "TurnInfo"]


@dataclass
class AgentResult:
    output: Any  # the validated `output` model, or the final text
    text: str | None  # the last assistant text
    turns: int  # turns used, every earlier run of the conversation included
    compactions: list[CompactionInfo]
    run_id: str
    billed: Billed  # what THIS run was billed
    messages: list[Message] = field(repr=False, default_factory=list)
    state: RunState | None = field(repr=False, default=None)

    @property
    def transcript(self) -> str:
        """The signed transcript handle to `continue_()` from (needs WORKBENCH_TRANSCRIPT_SECRET)."""
        assert self.state is not None
        return sign(self.state)


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
        prompt_cache: bool | str | dict = "auto",
        on_turn: Callable[[TurnInfo], Any] | None = None,
        on_compact: Callable[[CompactionInfo], Any] | None = None,
        *,
        on_checkpoint: Callable[[CheckpointInfo], Any] | None = None,
        checkpoints: bool = True,
        model: str | None = None,
        name: str | None = None,
        temperature: float | None = None,
        seed: int | None = None,
        effort: str | None = None,
        thinking: bool | None = None,
    ) -> None:
        self.gateway = gateway
        self.prompt = as_prompt(prompt)
        self.tools = [as_tool(item) for item in tools]
        names = [item.name for item in self.tools]
        if len(set(names)) != len(names) or (output is not None and RESPOND in names):
            raise invalid("tools", names, f"tools with unique names (and none named {RESPOND!r} with an output)")
        self.output = output
        self.max_turns = count("max_turns", max_turns)
        self.max_tokens = count("max_tokens", max_tokens)
        self.max_tool_result_chars = count("max_tool_result_chars", max_tool_result_chars)
        self.max_repeated_tool_calls = count("max_repeated_tool_calls", max_repeated_tool_calls, 2)
        self.deadline_s = number("deadline_s", deadline_s, 0, low_open=True, optional=True)
        if budget is not None and not isinstance(budget, Budget):
            raise invalid("budget", budget, "a Budget(...)")
        self.budget = budget
        self.compaction = compaction_of(compact)
        self.prompt_cache, self.session = prompt_cache_of(prompt_cache)
        self.on_turn = on_turn
        self.on_compact = on_compact
        self.on_checkpoint = on_checkpoint
        self.checkpoints = checkpoints
        self.model = model
        self.name = name or getattr(self.prompt, "id", None) or "agent"
        self.knobs = model_options(temperature, seed, effort, thinking)

    # -- the three ways to run
    async def arun(self, vars: Mapping[str, Any] | None = None, *, system_dynamic: str = "",
                   model: str | None = None, offer_tools: Sequence[str] | None = None, limits: Limits | None = None,
                   budget: Budget | None = None, actor: str | None = None,
                   attachments: Sequence[Image | Document] = ()) -> AgentResult:
        """Run the agent to a final answer (async core)."""
        screen_secrets(vars or {}, f"the variables of agent {self.name!r}")
        return await self._run(lambda: (self._picks(model, offer_tools, limits, budget, actor), None), {},
                               vars=vars or {}, system_dynamic=system_dynamic, attachments=tuple(attachments))

    async def aresume(self, run_id: str, *, offer_tools: Sequence[str] | None = None, limits: Limits | None = None,
                      budget: Budget | None = None, actor: str | None = None) -> AgentResult:
        """Go on from the last checkpoint of `run_id` in a new run (tagged `resumed_from`): the turns
        and tool results it holds are not bought or run again; `max_turns` and the budget count
        from what it had used."""
        def prepare() -> tuple[Picks, RunState]:
            state = checkpoint.load(run_id)
            picks = self._picks(state.model, offer_tools, limits, budget, actor)
            self._bound(state, picks, f"the checkpoint of run {run_id!r}")
            return picks, state

        return await self._run(prepare, {"resumed_from": run_id})

    async def acontinue(self, transcript: str, user: str, *, model: str | None = None,
                        offer_tools: Sequence[str] | None = None, limits: Limits | None = None,
                        budget: Budget | None = None, actor: str | None = None) -> AgentResult:
        """Append ONE user turn to a signed transcript and go on. Checked before anything is sent
        or spent (`WB_AGENT_TRANSCRIPT_INVALID`); the conversation is re-sent byte for byte, so its
        prefix reads from the provider's cache, and no tool runs twice."""
        if not isinstance(user, str) or not user.strip():
            raise invalid("user", user, "the text of the user turn to add")

        def prepare() -> tuple[Picks, RunState]:
            picks = self._picks(model, offer_tools, limits, budget, actor)
            return picks, verify(transcript, agent=self.name, prompt=prompt_tags(self.prompt) or {}, model=picks.model,
                                 tools=picks.offered_names(self.output is not None))

        return await self._run(prepare, {"continued": "true"}, user=user)

    def run(self, vars: Mapping[str, Any] | None = None, **options) -> AgentResult:
        """The sync twin of `arun` (same arguments)."""
        return run_sync(lambda: self.arun(vars, **options), self.gateway)

    run_sync = run

    def resume(self, run_id: str, **options) -> AgentResult:
        """The sync twin of `aresume`."""
        return run_sync(lambda: self.aresume(run_id, **options), self.gateway)

    def continue_(self, transcript: str, user: str, **options) -> AgentResult:
        """The sync twin of `acontinue` (`continue` is a keyword)."""
        return run_sync(lambda: self.acontinue(transcript, user, **options), self.gateway)

    # -- per-run picks, inside the declaration
    def _picks(self, model: str | None, offer_tools: Sequence[str] | None, limits: Limits | None,
               budget: Budget | None, actor: str | None) -> Picks:
        if limits is not None and not isinstance(limits, Limits):
            raise invalid("limits", limits, "a Limits(...)")
        if budget is not None and not isinstance(budget, Budget):
            raise invalid("budget", budget, "a Budget(...)")
        declared = {name: getattr(self, name) for name in
                    ("max_turns", "max_tokens", "max_tool_result_chars", "max_repeated_tool_calls", "deadline_s")}
        ceilings = limits.lowered(declared) if limits is not None else declared
        tools = self.tools
        if offer_tools is not None:
            if isinstance(offer_tools, str) or not all(isinstance(name, str) for name in offer_tools):
                raise invalid("offer_tools", offer_tools, "a list of tool names")
            known = {item.name for item in self.tools}
            unknown = sorted(set(offer_tools) - known)
            if unknown:
                raise WorkbenchError(
                    "WB_AGENT_TOOL_UNDECLARED",
                    f"agent {self.name!r} was asked to offer {', '.join(unknown)}, which it does not declare "
                    f"(declared: {', '.join(sorted(known)) or 'none'})",
                    "offer a subset of the tools the Agent declares, or add the tool to Agent(tools=[...])",
                )
            tools = [item for item in self.tools if item.name in set(offer_tools)]  # declaration order: same bytes
        resolved, spec = self.gateway.resolve(model or self.model, self.prompt)
        return Picks(model=resolved, spec=spec, tools=tools, budget=budget, actor=actor, **ceilings)

    def _bound(self, state: RunState, picks: Picks, what: str) -> None:
        for label, held, wanted in (("agent", state.agent, self.name),
                                    ("prompt", state.prompt, prompt_tags(self.prompt) or {}),
                                    ("tools", sorted(state.tools), sorted(picks.offered_names(self.output is not None)))):
            if held != wanted:
                raise WorkbenchError(
                    "WB_AGENT_TRANSCRIPT_INVALID", f"{what} was written for {label} {held!r}, and this run's is {wanted!r}",
                    "resume it with the same agent, prompt version and tools, or run the agent again from the start",
                )

    async def _run(self, prepare: Callable[[], tuple[Picks, RunState | None]], tags: dict, **start) -> AgentResult:
        async with run(self.name, kind="agent", prompt=prompt_tags(self.prompt), **tags) as current:
            picks, state = prepare()  # inside the run: a refusal is on the record, before anything is sent
            spent = state.spent if state is not None else (0, {})
            declared = self.budget if self.budget is not None else self.gateway.budget
            loop = Loop(self, picks, current, state, **start)
            try:
                with budget_scope(declared, self.name, spent) as loop.ledger, acting_for(picks.actor):
                    if picks.budget is not None:  # the run's own: both ledgers count, the tighter refuses
                        with budget_scope(picks.budget, f"{self.name} (this run)", spent):
                            result = await self._timed(loop, picks)
                    else:
                        result = await self._timed(loop, picks)
            except BaseException as exc:
                if loop.answered:
                    attach(exc, loop.state(failed=True))
                raise
            result.billed = current.billed
            return result

    async def _timed(self, loop: Loop, picks: Picks) -> AgentResult:
        if picks.deadline_s is None:
            return await loop.run()
        try:
            async with asyncio.timeout(picks.deadline_s) as timer:
                return await loop.run()
        except TimeoutError:
            if not timer.expired():
                raise
            raise WorkbenchError(
                "WB_AGENT_DEADLINE",
                f"agent {self.name!r} ran past its deadline of {picks.deadline_s:g} s during turn "
                f"{loop.turn} ({loop.phase})",
                "raise deadline_s, lower max_turns, or make the slow tool faster",
            ) from None
