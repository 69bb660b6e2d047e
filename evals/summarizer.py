"""Article summarizer graded by an LLM judge whose own prompt is versioned (its hash names the
scorer); the judge's calls are recorded, replayed and billed apart from the summarizer's. A judge
does not grade the same summary the same way twice, so every case is judged three times (epochs):
its score is the mean, and the gate allows for the spread."""

from pathlib import Path

from workbench.evaluate import define_eval, define_prompt, llm_judge, regex
from workbench.models import load_registry

load_registry(Path(__file__).parent.parent / "models.toml")

summarizer_v1 = define_prompt(
    "article-summarizer", "v1", system="You summarize articles in one sentence.",
    template="<article>{{article}}</article>", model="claude-haiku-4-5",
)
judge_v1 = define_prompt(
    "summary-judge", "v1",
    system="You grade summaries: reply with JSON {\"score\": 0..1, \"reason\": \"...\"}; 1 means faithful.",
    template="<article>{{input}}</article>\n<summary>{{output}}</summary>", model="claude-haiku-4-5",
)

suite = define_eval(
    "summarizer", summarizer_v1, "summarizer_cases.jsonl", [llm_judge(judge_v1), regex(r"\w+")],
    judge="claude-haiku-4-5", epochs=3,
)
