"""`workbench demo`: five weeks of a small shop's LLM traffic (`workbench/demo/company.py`), recorded
in seconds against the in-process fake provider, through BOTH the official `openai` / `anthropic`
SDKs (with `workbench.http_client()`) and Workbench's runtime. No key, no network.

The traffic is backdated (`workbench.capture.clock`): each day of the 35 before today runs with
capture's clock set to its hours, through the same transports, runs and spool as live traffic, so
the store looks recorded over a month. Its apps, in run names: `support-chat` (OpenAI chat, a long
cached handbook, streamed turns, moved from gpt-4o to gpt-4o-mini in week 3), `docs-qa` (Anthropic
with a cache-marked 3,000-token doc), `ticket-triage` and `nightly-invoices` (the runtime, with the
example suites' prompts; ticket-classifier v2 tried on part of the traffic in week 4),
`support-agent` and `handbook-reader` (agents with tools; the reader compacts), `daily-digest`
(OpenAI Responses), failures of every kind (an Anthropic outage, a cut stream, budgets, turns,
loops, a deadline, a truncation) and the example suites gated every Monday. The fake caches like
the real APIs: Anthropic's minimum prefix per model, and entries gone five minutes after last use.

Deterministic per seed, whatever the date: day `d`'s traffic is drawn from (seed, week, weekday),
and every 35-day window holds each (week, weekday) once, so the same seed gives the same figures."""

from __future__ import annotations

import asyncio
import json
import random
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from workbench.capture import clock, run
from workbench.demo import company
from workbench.demo.answers import respond
from workbench.demo.fake_provider import (
    ANTHROPIC_MIN_CACHE_TOKENS, AsyncFakeTransport, FakeProvider, FakeRequest, FakeTransport, Reply,
)

# a model with a small context window, so an agent's long tool loop compacts within seconds
SMALL_MODEL, SMALL_WINDOW = "claude-haiku-4-5-small-context", 6000
OPENAI_URL, ANTHROPIC_URL = "https://api.openai.com/v1", "https://api.anthropic.com"
WEEKS = 5
CACHE_TTL_S = 300  # the real APIs keep a cache entry about five minutes after its last use
GROWTH = (0.7, 0.85, 1.0, 1.15, 1.3)  # traffic per week: the shop is growing
MINI_FROM_WEEK = 2  # support-chat moves from gpt-4o to gpt-4o-mini
CANARY = (3, (1, 2, 3))  # ticket-classifier v2 on part of the triage traffic: week 3, Tuesday to Thursday
OUTAGE = (2, 3, 13)  # an Anthropic outage: week 2, Thursday, 13:00-13:45 UTC

# the scheduled time of the current context (seconds since the epoch): the fake provider's clock,
# so cache expiry follows the schedule exactly, whatever the machine's speed
_scheduled: ContextVar[float] = ContextVar("demo_scheduled", default=0.0)


@contextmanager
def at(when: datetime) -> Iterator[None]:
    """Record the block as if it started at `when`."""
    token = _scheduled.set(when.timestamp())
    try:
        with clock.backdated(when):
            yield
    finally:
        _scheduled.reset(token)


def pause(seconds: float) -> None:
    """A user's pause between two messages, without waiting for it."""
    clock.skip(seconds)
    _scheduled.set(_scheduled.get() + seconds)


@dataclass(frozen=True)
class Day:
    index: int  # 0: the first day of the window
    start: datetime  # its midnight, UTC
    week: int  # index // 7: every week of the window holds each weekday once
    weekday: int  # the real one: Monday is 0

    @property
    def weekend(self) -> bool:
        return self.weekday >= 5

    def at(self, hour: float) -> datetime:
        return self.start + timedelta(seconds=round(hour * 3600))


def window(today: datetime) -> list[Day]:
    """The 35 days before today (UTC), oldest first."""
    midnight = today.astimezone(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    first = midnight - timedelta(days=7 * WEEKS)
    days = [first + timedelta(days=index) for index in range(7 * WEEKS)]
    return [Day(index, start, index // 7, start.weekday()) for index, start in enumerate(days)]


@dataclass(order=True)
class Event:
    when: datetime
    order: int  # ties keep the order they were planned in
    action: Callable[[], None] = field(compare=False)


@dataclass
class Demo:
    seed: int
    root: Path = Path(".")
    fake: FakeProvider = field(init=False)

    def __post_init__(self) -> None:
        self.fake = FakeProvider(
            responder=self._respond, context_window={SMALL_MODEL: SMALL_WINDOW},
            anthropic_min_cache_tokens=ANTHROPIC_MIN_CACHE_TOKENS, cache_ttl_s=CACHE_TTL_S, clock=_scheduled.get,
        )
        self._clients: dict[str, object] = {}
        self.suites: dict = {}  # the project's example suites, whose prompts the runtime apps use

    def _respond(self, request: FakeRequest) -> Reply | None:
        return respond(request) or company.answer(request) or _read_handbook(request)

    # --- clients ---------------------------------------------------------------------------------
    def openai(self):
        if "openai" not in self._clients:
            import openai

            from workbench.replay.clients import http_client

            self._clients["openai"] = openai.OpenAI(base_url=OPENAI_URL, api_key="demo-key", max_retries=2,
                                                    http_client=http_client(transport=FakeTransport(self.fake)))
        return self._clients["openai"]

    def anthropic(self):
        if "anthropic" not in self._clients:
            import anthropic

            from workbench.replay.clients import http_client

            self._clients["anthropic"] = anthropic.Anthropic(
                base_url=ANTHROPIC_URL, api_key="demo-key", max_retries=2,
                http_client=http_client(transport=FakeTransport(self.fake)))
        return self._clients["anthropic"]

    def gateway(self):
        if "gateway" not in self._clients:
            from workbench.runtime import AnthropicProvider, Gateway, OpenAIProvider, RetryPolicy

            transport = AsyncFakeTransport(self.fake)
            self._clients["gateway"] = Gateway(
                [AnthropicProvider(ANTHROPIC_URL, "demo-key", ["claude-*"], transport=transport),
                 OpenAIProvider(OPENAI_URL, "demo-key", ["gpt-*"], transport=transport)],
                default_model="claude-haiku-4-5", retry=RetryPolicy(base_delay_s=0.01, max_delay_s=0.05),
            )
        return self._clients["gateway"]

    def scenario(self, name: str, body: Callable[[], object], **tags) -> None:
        """Run `body` in a run named `name`; a failure is the point of some scenarios, kept as data
        (the run is stored as failed, with its bill)."""
        try:
            with run(name, kind="app", **tags):
                body()
        except Exception:  # noqa: BLE001 - a WorkbenchError, or an SDK's own (an outage, a cut stream)
            pass
        finally:
            self.fake.clear_script()  # the next scenario starts clean

    # --- the month ---------------------------------------------------------------------------------
    def record(self, today: datetime, progress: Callable[[Day], None] | None = None) -> None:
        """Record the 35 days before `today`, day by day, in time order."""
        from workbench.evaluate.suite import load_suites

        self.suites = load_suites([self.root / "evals"]) if (self.root / "evals").is_dir() else {}
        for day in window(today):
            events = sorted(self.plan(day))
            for event in events:
                with at(event.when):
                    event.action()
            if progress is not None:
                progress(day)

    def plan(self, day: Day) -> list[Event]:
        """One day's traffic, drawn from (seed, week, weekday) only."""
        rng = random.Random(f"{self.seed}:{day.week}:{day.weekday}")
        volume = GROWTH[day.week] * (0.35 if day.weekend else 1.0)
        events: list[Event] = []

        def add(hour: float, action: Callable[[], None]) -> None:
            events.append(Event(day.at(hour), len(events), action))

        def office_hour() -> float:
            return min(21.9, max(7.0, rng.gauss(13.5, 3.2)))

        model = "gpt-4o-mini" if day.week >= MINI_FROM_WEEK else "gpt-4o"
        for _ in range(round(5 * volume)):
            add(office_hour(), self._support_chat(rng, model))
        outage = (day.week, day.weekday) == OUTAGE[:2]
        for _ in range(round(5 * volume)):
            add(office_hour(), self._docs_qa(rng, overloaded=rng.random() < 0.08))
        if outage:
            for minute in (5, 20, 35):
                add(OUTAGE[2] + minute / 60, self._docs_qa(rng, down=True))
        canary = day.week == CANARY[0] and day.weekday in CANARY[1]
        for hour in range(8, 19, 2 if day.weekend else 1):
            tickets = [rng.choice(company.TICKETS) for _ in range(rng.randint(1, 4))]
            add(hour + rng.random() / 2, self._triage(rng, tickets, canary))
        add(2 + rng.random() / 4, self._invoices(rng, round(11 * volume)))
        for _ in range(round(2 * volume)):
            add(office_hour(), self._support_agent(rng))
        add(6, self._digest(rng, fail=(day.week, day.weekday) in {(1, 4), (3, 2)}))
        if day.weekday in (1, 4):
            add(15 + rng.random(), self._handbook_reader(rng.randint(10, 24), summarizer_down=(day.week, day.weekday)
                                                        == SUMMARIZER_DOWN))
        if day.weekday == 0:
            add(8, self._gate(("classifier", None), ("extractor", None), ("summarizer", None)))
            if day.week == CANARY[0]:
                add(8.5, self._gate(("classifier", "v2")))
        for name, slots in _FAILURES.items():
            if (day.week, day.weekday) in slots:
                add(office_hour(), getattr(self, f"_{name.replace('-', '_')}"))
        return events

    # --- the official SDKs -----------------------------------------------------------------------
    def _support_chat(self, rng: random.Random, model: str) -> Callable[[], None]:
        user = rng.choice(company.USERS)
        turns = [rng.choice(company.TICKETS), *rng.sample(company.FOLLOW_UPS, rng.randint(1, 3))]
        pauses = [rng.randint(20, 150) for _ in turns]
        streamed = [rng.random() < 0.15 for _ in turns]

        def conversation():
            client = self.openai()
            messages = [{"role": "system", "content": company.SUPPORT_HANDBOOK}]
            for text, wait, stream in zip(turns, pauses, streamed):
                messages.append({"role": "user", "content": text})
                if stream:
                    chunks = client.chat.completions.create(model=model, messages=messages, stream=True,
                                                            stream_options={"include_usage": True}, user=user)
                    reply = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
                else:
                    reply = client.chat.completions.create(model=model, messages=messages,
                                                           user=user).choices[0].message.content
                messages.append({"role": "assistant", "content": reply})
                pause(wait)

        return lambda: self.scenario("support-chat", conversation, user=user, customer=company.USER_CUSTOMER[user],
                                     channel="chat")

    def _docs_qa(self, rng: random.Random, overloaded: bool = False, down: bool = False) -> Callable[[], None]:
        user = rng.choice(company.USERS)
        questions = rng.sample(company.DOCS_QUESTIONS, rng.randint(1, 3))
        pauses = [rng.randint(30, 200) for _ in questions]
        system = [{"type": "text", "text": company.DOCS, "cache_control": {"type": "ephemeral"}}]

        def session():
            if down:  # every attempt of the SDK's retries answers 529
                self.fake.script(*[Reply(status=529, retry_after=0.01)] * 3)
            elif overloaded:  # one 529, then the SDK's retry gets through
                self.fake.script(Reply(status=529, retry_after=0.01))
            for question, wait in zip(questions, pauses):
                self.anthropic().messages.create(model="claude-sonnet-4-5", max_tokens=400, system=system,
                                                 messages=[{"role": "user", "content": question}])
                pause(wait)

        return lambda: self.scenario("docs-qa", session, user=user, channel="docs")

    def _digest(self, rng: random.Random, fail: bool) -> Callable[[], None]:
        tickets = [f"ticket {n}: {rng.choice(company.TICKETS)}" for n in range(rng.randint(20, 40))]

        def digest():
            self.openai().responses.create(
                model="gpt-4o", instructions="You write the daily support digest for the team: volumes, themes, "
                "incidents.", input="\n".join(tickets))
            if fail:
                raise RuntimeError("the mailer is down: the digest was written but not sent")

        return lambda: self.scenario("daily-digest", digest, job="digest", channel="batch")

    def _live_feed(self) -> None:
        def stream_cut_midway():
            self.fake.script(Reply(text="A long answer " * 20, cut_after_events=5))
            with self.anthropic().messages.stream(model="claude-haiku-4-5", max_tokens=400, messages=[
                    {"role": "user", "content": "Summarize today's orders as they come in."}]) as stream:
                for _ in stream.text_stream:
                    pass

        self.scenario("live-feed", stream_cut_midway, channel="stream")

    # --- Workbench's runtime ---------------------------------------------------------------------
    def _prompt(self, suite: str, version: str | None = None):
        from workbench.evaluate.prompts import prompts

        found = self.suites.get(suite)
        if found is None:
            return None
        return prompts.get(found.prompt.id, version) if version else found.prompt

    def _triage(self, rng: random.Random, tickets: list[str], canary: bool) -> Callable[[], None]:
        versions = ["v2" if canary and rng.random() < 0.5 else "v1" for _ in tickets]
        users = [rng.choice(company.USERS) for _ in tickets]

        def batch():
            from workbench.runtime import llm_async

            async def one(ticket: str, version: str, user: str) -> None:
                prompt = self._prompt("classifier", version)
                try:
                    async with run("ticket-triage", kind="app", user=user, customer=company.USER_CUSTOMER[user],
                                   channel="email"):
                        if prompt is None:
                            await llm_async(self.gateway(), "Classify this support ticket: {{ticket}}", {"ticket": ticket})
                        else:
                            await llm_async(self.gateway(), prompt, {"ticket": ticket}, output=prompt.output_type)
                except Exception:  # noqa: BLE001 - kept as data in the store
                    pass

            async def all_of_them() -> None:
                try:
                    await asyncio.gather(*(one(*item) for item in zip(tickets, versions, users)))
                finally:
                    await self.gateway().release_loop()

            asyncio.run(all_of_them())

        return batch

    def _invoices(self, rng: random.Random, count: int) -> Callable[[], None]:
        invoices = []
        for _ in range(count):
            vendor, symbol = rng.choice(company.VENDORS)
            invoices.append(f"From: {vendor}\nItems: {rng.randint(1, 40)} units\n"
                            f"Total: {symbol}{rng.randint(20, 9000):,}.{rng.randint(0, 99):02d}")

        def nightly():
            from workbench.runtime import llm_async

            prompt = self._prompt("extractor")
            if prompt is None:
                return

            async def all_of_them() -> None:
                try:
                    await asyncio.gather(*(llm_async(self.gateway(), prompt, {"invoice": text},
                                                     output=prompt.output_type) for text in invoices))
                finally:
                    await self.gateway().release_loop()

            asyncio.run(all_of_them())

        return lambda: self.scenario("nightly-invoices", nightly, job="invoices", channel="batch")

    def _support_agent(self, rng: random.Random) -> Callable[[], None]:
        from workbench.runtime import Agent

        user = rng.choice(company.USERS)
        order = f"A-{rng.randint(1000, 9999)}"
        region = rng.choice(["EU", "US", "UK"])

        def order_status(order_id: str) -> str:
            """The status of an order."""
            return f"order {order_id}: shipped, arriving Thursday"

        def refund_policy(region: str) -> str:
            """The refund policy of a region."""
            return f"{region}: refunds within 30 days, card payments only"

        def researcher():
            self.fake.script(
                Reply(tool_calls=[("order_status", {"order_id": order}), ("refund_policy", {"region": region})]),
                Reply(tool_calls=[("order_status", {"order_id": order})]),
                f"Order {order} has shipped and arrives Thursday; in the {region}, refunds are possible within 30 days.",
            )
            Agent(self.gateway(), _AgentPrompt(), [order_status, refund_policy], name="support-agent").run(
                {"question": f"Where is my order {order}, and can I get a refund?"},
                system_dynamic=f"Customer: {company.USER_CUSTOMER[user]}, region {region}.")

        return lambda: self.scenario("support-agent", researcher, user=user, customer=company.USER_CUSTOMER[user],
                                     channel="agent")

    def _handbook_reader(self, pages: int, summarizer_down: bool = False) -> Callable[[], None]:
        from workbench.runtime import Agent

        def fetch(page: int) -> str:
            """Fetch one page of the handbook."""
            return f"page {page}{UNSUMMARISABLE if summarizer_down else ''}: " + "policy text " * 150

        return lambda: self.scenario("handbook-reader", lambda: Agent(
            self.gateway(), HANDBOOK_TASK.format(pages=pages), [fetch], max_turns=pages + 2, max_tokens=300,
            model=SMALL_MODEL, name="handbook-reader").run(), channel="agent")

    def _gate(self, *suites: tuple[str, str | None]) -> Callable[[], None]:
        def gate():
            from workbench.errors import WorkbenchError
            from workbench.evaluate.gate import evaluate

            for name, version in suites:
                if name in self.suites:
                    try:
                        evaluate(self.suites[name], mode="replay", prompt_version=version)
                    except WorkbenchError:
                        pass  # a verdict that could not be reached is not the demo's to report

        return gate

    # failures of every kind, each with its bill
    def _failing(self, name: str, body: Callable[[], object], replies: list[Reply | str]) -> None:
        def scripted():
            self.fake.script(*replies)
            body()

        self.scenario(name, scripted, channel="agent")

    def _budget_refused(self) -> None:
        from workbench.runtime import Agent, Budget

        self._failing("trip-planner", lambda: Agent(self.gateway(), "Plan a trip.", [weather], max_tokens=1000,
                                                    budget=Budget(tokens_per_run=1100), name="trip-planner").run(),
                      [Reply(tool_calls=[("weather", {"city": f"c{n}"})]) for n in range(3)])

    def _max_turns(self) -> None:
        from workbench.runtime import Agent

        self._failing("city-checker", lambda: Agent(self.gateway(), "Check every city.", [weather], max_turns=3,
                                                    name="city-checker").run(),
                      [Reply(tool_calls=[("weather", {"city": f"city{n}"})]) for n in range(3)])

    def _tool_loop(self) -> None:
        from workbench.runtime import Agent

        self._failing("looper", lambda: Agent(self.gateway(), "Check Paris.", [weather], name="looper").run(),
                      [Reply(tool_calls=[("weather", {"city": "Paris"})]) for _ in range(3)])

    def _truncated(self) -> None:
        from workbench.runtime import llm

        self._failing("essay-writer", lambda: llm(self.gateway(), "Write a long essay about {{topic}}.",
                                                  {"topic": "caching"}, max_tokens=20), [Reply(text="word " * 200)])

    def _deadline(self) -> None:
        from workbench.runtime import Agent

        self._failing("archivist", lambda: Agent(self.gateway(), "Search the archive.", [slow_search], deadline_s=0.3,
                                                 name="archivist").run(),
                      [Reply(tool_calls=[("slow_search", {"query": "refunds"})])])


# which (week, weekday) slots each failure scenario happens in
_FAILURES = {
    "live-feed": {(1, 2), (4, 4)}, "budget-refused": {(1, 1), (3, 3)}, "max-turns": {(2, 0)},
    "tool-loop": {(3, 4)}, "truncated": {(0, 3), (4, 1)}, "deadline": {(2, 2)},
}


def weather(city: str) -> str:
    """The weather of a city."""
    return f"{city}: 21C"


def slow_search(query: str) -> str:
    """Search the archive (slow)."""
    import time

    time.sleep(0.6)
    return "results"


HANDBOOK_TASK = "Read the {pages}-page handbook page by page, then answer: what is the refund window?"
UNSUMMARISABLE = " (scanned copy)"  # pages the summary model answers nothing for: the compaction fails
SUMMARIZER_DOWN = (2, 4)  # when: week 2, Friday


def _read_handbook(request: FakeRequest) -> Reply | None:
    """The handbook reader's model: fetch the next page until the last, then answer; summarise
    when the runtime compacts (its summary request ends with the compaction instruction)."""
    from workbench.demo.answers import read
    from workbench.runtime.compaction import INSTRUCTIONS

    _, user, _ = read(request)
    whole = request.body.decode("utf-8", "replace")
    if INSTRUCTIONS in user:  # the runtime compacting the reader's conversation (its whole request)
        if UNSUMMARISABLE in whole:
            return Reply(text="")
        pages = re.findall(r"page (\d+): ", whole)
        return Reply(text=f"Summary: pages {pages[0]} to {pages[-1]} say refunds are allowed within 30 days."
                     if pages else "Summary: nothing read yet.")
    body = request.json if isinstance(request.json, dict) else {}
    text = json.dumps(body.get("messages", []))
    task = re.search(r"Read the (\d+)-page handbook", text)
    if task is None:
        return None
    pages = [int(number) for number in re.findall(r'"page": (\d+)', text)]
    page = 1 + max(pages, default=0)
    if page > int(task.group(1)):
        return Reply(text="The handbook allows refunds within 30 days.")
    return Reply(tool_calls=[("fetch", {"page": page})])


class _AgentPrompt:
    """The support agent's prompt: a stable system block (cached: over Sonnet's 1,024 tokens) and a
    per-question message."""

    id, version, model = "support-agent", "v1", "claude-sonnet-4-5"
    hash = "wb1:demo-support-agent-v1"
    system = company.AGENT_POLICY

    def render(self, vars):
        return vars["question"]
