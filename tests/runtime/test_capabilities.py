"""Model capability rows: what a model's registry row says it takes decides what is sent. Sampling
parameters it does not take are withheld (and the withholding recorded); a reasoning control or an
input kind it lacks is refused before anything is sent; a model that refuses a forced tool choice
gets `respond` unforced; below its minimum cacheable prefix nothing is marked; and registration
order per family is the ladder a refusal's fix climbs."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

import workbench
from runtime_support import CLAUDE, GPT
from workbench.capture import billed_of
from workbench.demo.fake_provider import AsyncFakeTransport, Reply
from workbench.errors import WorkbenchError
from workbench.models import registry
from workbench.runtime import Agent, AnthropicProvider, Gateway, Image, OpenAIProvider, llm
from workbench.runtime.messages import Document

COMMON = {"provider": "test", "context_window": 200_000, "max_output": 4096, "input": 100, "output": 500,
          "source": "test", "as_of": "2026-01-01"}


def register(model_id: str, **capabilities) -> str:
    workbench.register_model(id=model_id, **COMMON, **capabilities)
    return model_id


def anthropic(fake, *models) -> Gateway:
    return Gateway([AnthropicProvider("http://anthropic.test", "k", list(models), transport=AsyncFakeTransport(fake))],
                   models[0])


def openai(fake, *models) -> Gateway:
    return Gateway([OpenAIProvider("http://openai.test/v1", "k", list(models), transport=AsyncFakeTransport(fake))],
                   models[0])


class Verdict(BaseModel):
    label: str


def test_sampling_parameters_a_row_does_not_list_are_withheld_and_recorded(store, fake):
    plain = register("cap-plain")
    sampled = register("cap-sampled", sampling=["temperature", "seed"])
    fake.script("a", "b", "c")
    assert llm(anthropic(fake, plain), "Hi", temperature=0.2, seed=7) == "a"
    assert llm(openai(fake, sampled), "Hi", temperature=0.2, seed=7) == "b"
    assert llm(anthropic(fake, sampled), "Hi", temperature=0.2, seed=7) == "c"
    bodies = [request.json for request in fake.requests]
    assert "temperature" not in bodies[0] and "seed" not in bodies[0]  # the row takes neither
    assert (bodies[1]["temperature"], bodies[1]["seed"]) == (0.2, 7)
    assert bodies[2]["temperature"] == 0.2 and "seed" not in bodies[2]  # the Messages API has no seed
    runs = store.rows("SELECT run_id FROM runs WHERE kind = 'llm' ORDER BY started_at")
    withheld = [store.events(row["run_id"], "gateway.withheld") for row in runs]
    assert [[event["params"] for event in events] for events in withheld] == [
        ['["temperature", "seed"]'], [], ['["seed"]']]


def test_a_reasoning_control_the_row_lacks_is_refused_before_anything_is_sent(store, fake):
    plain = register("cap-no-effort")
    with pytest.raises(WorkbenchError) as caught:
        llm(openai(fake, plain), "Think.", effort="high")
    assert caught.value.code == "WB_RUNTIME_OPTION_INVALID" and "effort" in caught.value.cause
    with pytest.raises(WorkbenchError) as caught:
        Agent(anthropic(fake, plain), "Think.", thinking=True).run()
    assert caught.value.code == "WB_RUNTIME_OPTION_INVALID" and "thinking" in caught.value.cause
    assert fake.requests == [] and billed_of(caught.value) is None


def test_a_reasoning_control_the_row_takes_is_sent_in_each_wire_s_field(store, fake):
    thinker = register("cap-thinker", reasoning_effort=True, thinking=True)
    fake.script("a", "b", "c")
    llm(openai(fake, thinker), "Think.", effort="high")
    llm(anthropic(fake, thinker), "Think.", effort="low", thinking=True)
    llm(openai(fake, thinker), "Quick.", thinking=False)
    first, second, third = (request.json for request in fake.requests)
    assert first["reasoning_effort"] == "high"
    assert second["output_config"] == {"effort": "low"} and second["thinking"] == {"type": "adaptive"}
    assert third["reasoning_effort"] == "none"
    with pytest.raises(WorkbenchError, match="WB_RUNTIME_OPTION_INVALID"):
        llm(openai(fake, thinker), "Both?", effort="high", thinking=False)  # one field for both on that wire
    with pytest.raises(WorkbenchError, match="WB_RUNTIME_OPTION_INVALID"):
        llm(openai(fake, thinker), "Hi", effort="extreme")


def test_a_model_that_refuses_a_forced_choice_answers_in_prose_with_fenced_json(store, fake):
    unforced = register("cap-unforced", forced_tool_choice=False)
    gateway = openai(fake, unforced)
    fake.script('Sure. Here it is:\n\n```json\n{"label": "billing"}\n```\nAnything else?')
    assert llm(gateway, "Classify.", output=Verdict) == Verdict(label="billing")
    body = fake.requests[0].json
    assert "tool_choice" not in body and [t["function"]["name"] for t in body["tools"]] == ["respond"]
    # prose with no JSON takes the repair turn, which the model answers through respond
    fake.script("It is about billing.", Reply(tool_calls=[("respond", {"label": "billing"})]))
    assert llm(gateway, "Classify.", output=Verdict) == Verdict(label="billing")
    assert "did not call the respond tool" in str(fake.requests[-1].json["messages"][-1]["content"])


def test_below_the_minimum_cacheable_prefix_nothing_is_marked(store, fake):
    minimum = register("cap-min-cache", cache_min_tokens=1024)
    gateway = anthropic(fake, minimum)
    fake.script("short", "long")
    llm(gateway, "A short prompt.", prompt_cache="auto")
    llm(gateway, "A long prompt. " * 400, prompt_cache="auto")
    short, long = fake.requests
    assert "cache_control" not in short.body.decode()
    assert "cache_control" in long.body.decode()


def test_an_input_kind_the_row_lacks_is_refused_and_one_it_takes_is_sent(store, fake):
    text_only = register("cap-text-only")
    vision = register("cap-vision", input_kinds=["text", "image"])
    image = Image(media_type="image/png", data=b"\x89PNG fake")
    with pytest.raises(WorkbenchError) as caught:
        llm(anthropic(fake, text_only), "Describe it.", attachments=[image])
    assert caught.value.code == "WB_LLM_CONTENT_UNSUPPORTED" and "image" in caught.value.cause
    with pytest.raises(WorkbenchError, match="WB_LLM_CONTENT_UNSUPPORTED"):
        llm(anthropic(fake, vision), "Read it.", attachments=[Document(b"%PDF-1.7")])
    with pytest.raises(WorkbenchError, match="WB_LLM_CONTENT_UNSUPPORTED"):
        llm(anthropic(fake, vision), "Describe it.", attachments=[Image(url="http://plain.test/a.png")])
    assert fake.requests == []
    fake.script("a cat", "a cat")
    llm(anthropic(fake, vision), "Describe it.", attachments=[image])
    llm(openai(fake, vision), "Describe it.", attachments=[image])
    blocks = fake.requests[0].json["messages"][0]["content"]
    assert blocks[1] == {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                     "data": "iVBORyBmYWtl"}}
    parts = fake.requests[1].json["messages"][0]["content"]
    assert parts[1] == {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORyBmYWtl"}}


def test_a_refusal_names_the_next_more_capable_model_of_its_family(store, fake):
    top, middle, bottom = (register(name, family="ladder-test") for name in ("lad-top", "lad-middle", "lad-bottom"))
    register("other-family", family="elsewhere")
    gateway = anthropic(fake, bottom, middle, top)
    fake.script(Reply(text="No.", stop_reason="refusal"))
    with pytest.raises(WorkbenchError) as caught:
        llm(gateway, "Something risky", model=bottom)
    assert caught.value.code == "WB_LLM_REFUSED" and "lad-middle" in caught.value.fix
    # re-registering a row (a negotiated price) keeps its rung
    workbench.register_model(id=middle, **{**COMMON, "input": 1}, family="ladder-test")
    assert registry.more_capable_than(bottom).id == middle and registry.more_capable_than(middle).id == top
    fake.script(Reply(text="No.", stop_reason="refusal"))
    with pytest.raises(WorkbenchError) as caught:
        llm(gateway, "Something risky", model=top)
    assert "model=" not in caught.value.fix  # nothing above the top: no suggestion, never a downgrade
    assert registry.more_capable_than("never-registered") is None


def test_the_registry_rows_of_the_fake_keep_their_defaults(store):
    spec = registry.get(CLAUDE)
    assert (spec.sampling, spec.reasoning_effort, spec.thinking, spec.forced_tool_choice, spec.cache_min_tokens,
            spec.input_kinds, spec.family) == ([], False, False, True, None, ["text"], None)
    with pytest.raises(WorkbenchError, match="WB_MODELS_INVALID"):
        workbench.register_model(id="bad-row", **COMMON, sampling=["top_k"])
    assert registry.get(GPT).forced_tool_choice
