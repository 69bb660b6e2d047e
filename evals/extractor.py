"""Invoice extractor: a schema-checked answer through the runtime, with a numeric tolerance."""

from pathlib import Path

from pydantic import BaseModel

from workbench.evaluate import define_eval, define_prompt, exact, json_schema_valid, numeric_tolerance
from workbench.models import load_registry

load_registry(Path(__file__).parent.parent / "models.toml")


class Invoice(BaseModel):
    vendor: str
    total: float
    currency: str


extractor_v1 = define_prompt(
    "invoice-extractor", "v1",
    system="You extract invoice fields: the vendor, the total due as a number, and its ISO currency code.",
    template="<invoice>\n{{invoice}}\n</invoice>", output=Invoice, model="gpt-4o-mini",
)

suite = define_eval(
    "extractor", extractor_v1, "extractor_cases.jsonl",
    [json_schema_valid(Invoice.model_json_schema()), numeric_tolerance("total", tolerance=0.01), exact("vendor")],
)
