"""Support-ticket classifier: structured output through the runtime, scored exactly."""

from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from workbench.evaluate import define_eval, define_prompt, exact, json_valid
from workbench.models import load_registry

load_registry(Path(__file__).parent.parent / "models.toml")


class Ticket(BaseModel):
    category: Literal["billing", "account", "bug", "other"]


SYSTEM = "You classify support tickets into exactly one category: billing, account, bug or other."

classifier_v1 = define_prompt(
    "ticket-classifier", "v1", system=SYSTEM, template="<ticket>{{ticket}}</ticket>", output=Ticket,
    model="claude-haiku-4-5",
)
# v2 adds a policy the product team asked for; `workbench eval compare classifier v1 v2` shows its effect, and
# `workbench eval compare classifier --versions v1,v2 --models claude-haiku-4-5,gpt-4o-mini` on two models
classifier_v2 = define_prompt(
    "ticket-classifier", "v2", system=SYSTEM + " Refunds are account issues.",
    template="<ticket>{{ticket}}</ticket>", output=Ticket, model="claude-haiku-4-5",
)

suite = define_eval(
    "classifier", classifier_v1, "classifier_cases.jsonl", [exact("category"), json_valid()], tolerance=0.05,
)
