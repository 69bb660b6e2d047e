"""`workbench demo`: a realistic workload against the in-process fake provider, through BOTH the
official `openai` / `anthropic` SDKs (with `workbench.http_client()`) and Workbench's runtime. No
key, no network, deterministic per seed. Every scenario runs in a named run so the dashboard shows
what each one cost, the failed ones included."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from workbench.capture import run
from workbench.demo.answers import respond
from workbench.demo.fake_provider import AsyncFakeTransport, FakeProvider, FakeRequest, FakeTransport, Reply
from workbench.errors import WorkbenchError

# a model with a small context window, so an agent's long tool loop compacts within seconds
SMALL_MODEL, SMALL_WINDOW = "claude-haiku-4-5-small-context", 6000
OPENAI_URL, ANTHROPIC_URL = "https://api.openai.com/v1", "https://api.anthropic.com"
DOCS = (
    "Workbench records every LLM call with its exact cost, replays recorded calls offline, gates CI on "
    "eval regressions and shows where the money went. "
) * 60  # a long, stable system prompt: worth caching
CUSTOMERS = ["acme", "globex", "initech", "umbrella", "hooli", "stark", "wayne", "tyrell"]
TICKETS = [
    "I was charged twice, please refund me.", "The password reset link never arrives.",
    "The app crashes when I export a report.", "Can I get a dark mode?", "My invoice shows the wrong VAT number.",
    "I am locked out after three login attempts.", "Sync fails with error 500.",
]


@dataclass
class Outcome:
    """What a scenario did, for the summary: its name and the error it ended with, if any."""

    name: str
    error: str | None = None


@dataclass
class Demo:
    seed: int
    fake: FakeProvider = field(init=False)
    outcomes: list[Outcome] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.random = random.Random(self.seed)
        self.fake = FakeProvider(responder=self._respond, context_window={SMALL_MODEL: SMALL_WINDOW})

    def _respond(self, request: FakeRequest) -> Reply | None:
        return respond(request) or _read_handbook(request)

    # --- clients -------------------------------------------------------------------------------
    def openai(self):
        import openai

        from workbench.replay.clients import http_client

        return openai.OpenAI(base_url=OPENAI_URL, api_key="demo-key", max_retries=2,
                             http_client=http_client(transport=FakeTransport(self.fake)))

    def anthropic(self):
        import anthropic

        from workbench.replay.clients import http_client

        return anthropic.Anthropic(base_url=ANTHROPIC_URL, api_key="demo-key", max_retries=2,
                                   http_client=http_client(transport=FakeTransport(self.fake)))

    def gateway(self, **options):
        from workbench.runtime import AnthropicProvider, Gateway, OpenAIProvider, RetryPolicy

        transport = AsyncFakeTransport(self.fake)
        return Gateway(
            [AnthropicProvider(ANTHROPIC_URL, "demo-key", ["claude-*"], transport=transport),
             OpenAIProvider(OPENAI_URL, "demo-key", ["gpt-*"], transport=transport)],
            default_model="claude-haiku-4-5", retry=RetryPolicy(base_delay_s=0.01, max_delay_s=0.05), **options,
        )

    def scenario(self, name: str, body: Callable[[], object], **tags) -> None:
        """Run `body` in a run named `name`; a failure is the point of some scenarios, kept as data."""
        try:
            with run(name, kind="app", **tags):
                body()
            self.outcomes.append(Outcome(name))
        except WorkbenchError as exc:
            self.outcomes.append(Outcome(name, exc.code))
        except Exception as exc:  # noqa: BLE001 - an SDK's own error (a cut stream) is an outcome too
            self.outcomes.append(Outcome(name, type(exc).__name__))

    # --- the official SDKs -----------------------------------------------------------------------
    def sdk_traffic(self) -> None:
        client, claude = self.openai(), self.anthropic()
        for customer in self.random.sample(CUSTOMERS, 4):
            ticket = self.random.choice(TICKETS)

            def conversation(customer=customer, ticket=ticket):
                client.chat.completions.create(model="gpt-4o-mini", messages=[
                    {"role": "system", "content": "You are a helpful support agent."},
                    {"role": "user", "content": ticket}])
                stream = client.chat.completions.create(
                    model="gpt-4o-mini", stream=True, stream_options={"include_usage": True},
                    messages=[{"role": "user", "content": f"Follow up for {customer}: {ticket}"}])
                for _ in stream:
                    pass
                client.responses.create(model="gpt-4o", input=f"Summarize the ticket of {customer}: {ticket}")

            self.scenario("support-chat", conversation, customer=customer, channel="chat")
        for question in self.random.sample(["What does replay do?", "How is cost computed?", "What is a gate?",
                                            "Where are spans stored?"], 3):
            self.scenario("docs-qa", lambda question=question: claude.messages.create(
                model="claude-sonnet-4-5", max_tokens=300,
                system=[{"type": "text", "text": DOCS, "cache_control": {"type": "ephemeral"}}],
                messages=[{"role": "user", "content": question}]), channel="docs")

        def overloaded_then_ok():
            self.fake.script(Reply(status=529, retry_after=0.01))
            claude.messages.create(model="claude-haiku-4-5", max_tokens=100,
                                   messages=[{"role": "user", "content": "Are you there?"}])

        self.scenario("provider-overloaded", overloaded_then_ok, channel="chat")

        def stream_cut_midway():
            self.fake.script(Reply(text="A long answer " * 20, cut_after_events=5))
            with claude.messages.stream(model="claude-haiku-4-5", max_tokens=400,
                                        messages=[{"role": "user", "content": "Tell me a story."}]) as stream:
                for _ in stream.text_stream:
                    pass

        self.scenario("live-feed", stream_cut_midway, channel="stream")

    # --- Workbench's runtime ---------------------------------------------------------------------
    def runtime_traffic(self, root: Path) -> None:
        from workbench.evaluate.suite import load_suites
        from workbench.runtime import Agent, Budget, llm

        suites = load_suites([root / "evals"]) if (root / "evals").is_dir() else {}
        classifier = suites.get("classifier")
        gateway = self.gateway()
        if classifier is not None:
            from workbench.evaluate.prompts import prompts

            for version in ("v1", "v2"):
                prompt = prompts.get(classifier.prompt.id, version)
                for ticket in self.random.sample(TICKETS, 3):
                    self.scenario("triage", lambda prompt=prompt, ticket=ticket: llm(
                        gateway, prompt, {"ticket": ticket}, output=prompt.output_type), channel="email")

        def order_status(order_id: str) -> str:
            """The status of an order."""
            return f"order {order_id}: shipped, arriving Thursday"

        def refund_policy(region: str) -> str:
            """The refund policy of a region."""
            return f"{region}: refunds within 30 days, card payments only"

        def researcher():
            self.fake.script(
                Reply(tool_calls=[("order_status", {"order_id": "A-1001"}), ("refund_policy", {"region": "EU"})]),
                Reply(tool_calls=[("order_status", {"order_id": "A-1002"})]),
                "Order A-1001 has shipped; EU refunds are possible within 30 days.",
            )
            Agent(gateway, _AgentPrompt(), [order_status, refund_policy], name="support-agent").run(
                {"question": "Where is my order, and can I get a refund?"}, system_dynamic="Customer tier: gold.")

        for _ in range(2):
            self.scenario("support-agent", researcher, channel="agent")

        def reader():
            def fetch(page: int) -> str:
                """Fetch one page of the handbook."""
                return f"page {page}: " + "policy text " * 150

            Agent(gateway, HANDBOOK_TASK, [fetch], max_turns=HANDBOOK_PAGES + 2, max_tokens=300, model=SMALL_MODEL,
                  name="handbook-reader").run()

        self.scenario("handbook-reader", reader, channel="agent")

        # failures of every kind, each with its bill
        def weather(city: str) -> str:
            """The weather of a city."""
            return f"{city}: 21C"

        def slow_search(query: str) -> str:
            """Search the archive (slow)."""
            import time

            time.sleep(0.6)
            return "results"

        failures = {
            "budget-refused": (lambda: Agent(gateway, "Plan a trip.", [weather], max_tokens=1000,
                                             budget=Budget(tokens_per_run=1100), name="trip-planner").run(),
                               [Reply(tool_calls=[("weather", {"city": f"c{n}"})]) for n in range(3)]),
            "max-turns": (lambda: Agent(gateway, "Check every city.", [weather], max_turns=3, name="city-checker").run(),
                          [Reply(tool_calls=[("weather", {"city": f"city{n}"})]) for n in range(3)]),
            "tool-loop": (lambda: Agent(gateway, "Check Paris.", [weather], name="looper").run(),
                          [Reply(tool_calls=[("weather", {"city": "Paris"})]) for _ in range(3)]),
            "truncated": (lambda: llm(gateway, "Write a long essay about {{topic}}.", {"topic": "caching"}, max_tokens=20),
                          [Reply(text="word " * 200)]),
            "deadline": (lambda: Agent(gateway, "Search the archive.", [slow_search], deadline_s=0.3,
                                       name="archivist").run(),
                         [Reply(tool_calls=[("slow_search", {"query": "refunds"})])]),
        }
        for name, (body, replies) in failures.items():
            def scripted(body=body, replies=replies):
                self.fake.script(*replies)
                try:
                    body()
                finally:
                    self.fake.clear_script()  # the next scenario starts clean

            self.scenario(name, scripted, channel="agent")

HANDBOOK_TASK = "Read the handbook page by page, then answer: what is the refund window?"
HANDBOOK_PAGES = 14


def _read_handbook(request: FakeRequest) -> Reply | None:
    """The handbook reader's model: fetch the next page until the last, then answer; summarise
    when the runtime compacts (its summary request ends with the compaction instruction)."""
    from workbench.demo.answers import read
    from workbench.runtime.compaction import INSTRUCTIONS

    system, user, _ = read(request)
    if INSTRUCTIONS in user:
        return Reply(text="Summary: pages read so far say refunds are allowed within 30 days.")
    body = request.json if isinstance(request.json, dict) else {}
    text = json.dumps(body.get("messages", []))
    if HANDBOOK_TASK not in text:
        return None
    pages = [int(number) for number in re.findall(r'"page": (\d+)', text)]
    page = 1 + max(pages, default=0)
    if page > HANDBOOK_PAGES:
        return Reply(text="The handbook allows refunds within 30 days.")
    return Reply(tool_calls=[("fetch", {"page": page})])


class _AgentPrompt:
    """The support agent's prompt: a stable system block (cached) and a per-question message."""

    id, version, model = "support-agent", "v1", "claude-sonnet-4-5"
    hash = "wb1:demo-support-agent-v1"
    system = ("You are the support agent of an online shop. Use the tools to look orders and policies up; "
              "answer in two sentences. ") * 20

    def render(self, vars):
        return vars["question"]
