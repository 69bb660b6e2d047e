"""OpenTelemetry attribute names: the GenAI semantic conventions and our own, in one place.

Mind the one difference in meaning: `gen_ai.usage.input_tokens` INCLUDES cache reads and writes,
while Workbench's `input_tokens` column is the uncached part only."""

OPERATION_NAME = "gen_ai.operation.name"
# its value per wire (a span is named "{operation} {model}"); any other wire's calls are "chat"
OPERATIONS = {"openai.embeddings": "embeddings", "openai.completions": "text_completion",
              "anthropic.complete": "text_completion", "google.gemini": "generate_content"}
PROVIDER_NAME = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
RESPONSE_ID = "gen_ai.response.id"
FINISH_REASONS = "gen_ai.response.finish_reasons"
USAGE_INPUT = "gen_ai.usage.input_tokens"
USAGE_OUTPUT = "gen_ai.usage.output_tokens"
USAGE_CACHE_READ = "gen_ai.usage.cache_read.input_tokens"
USAGE_CACHE_CREATION = "gen_ai.usage.cache_creation.input_tokens"
USAGE_REASONING = "gen_ai.usage.reasoning.output_tokens"
AGENT_NAME = "gen_ai.agent.name"
ERROR_TYPE = "error.type"
HTTP_STATUS = "http.response.status_code"
SERVER_ADDRESS = "server.address"

COST_MICROS = "workbench.cost_micros"
CURRENCY = "workbench.currency"  # the currency COST_MICROS is in, beside it
# a run's span: every currency's live money, exact (JSON, {"EUR": 3300, "USD": 1300}), when it spent in
# two or more (COST_MICROS is then its main currency's alone); and its calls no price covered
COSTS = "workbench.costs"
UNPRICED_CALLS = "workbench.unpriced_calls"
REPLAYED = "workbench.replayed"
CALL_ID = "workbench.call_id"
RUN_ID = "workbench.run_id"
RUN_NAME = "workbench.run.name"
RUN_KIND = "workbench.run.kind"
SETTLED = "workbench.settled"
EVENT_AGENT_TURN = "agent.turn"
EVENT_AGENT_COMPACT = "agent.compact"
EVENT_GATEWAY_RETRY = "gateway.retry"
EVENT_GATEWAY_FALLBACK = "gateway.fallback"
EVENT_GATEWAY_WITHHELD = "gateway.withheld"
EVENT_GATEWAY_CACHE_HIT = "gateway.cache_hit"
EVENT_AGENT_CHECKPOINT = "agent.checkpoint"
REDACTED = "workbench.redacted"

# Names other instrumentations use, read by `workbench collect` (workbench/capture/genai_spans.py).
# The older OpenTelemetry GenAI names, still in the field (and OpenLLMetry's, which Traceloop emits).
SYSTEM = "gen_ai.system"
USAGE_PROMPT = "gen_ai.usage.prompt_tokens"
USAGE_COMPLETION = "gen_ai.usage.completion_tokens"
USAGE_CACHE_READ_OLD = "gen_ai.usage.cache_read_input_tokens"
USAGE_CACHE_CREATION_OLD = "gen_ai.usage.cache_creation_input_tokens"
USAGE_REASONING_OLD = "gen_ai.usage.reasoning_tokens"
# OpenLLMetry's own `llm.*` names
LLM_REQUEST_TYPE = "llm.request.type"
LLM_USAGE_PROMPT = "llm.usage.prompt_tokens"
LLM_USAGE_COMPLETION = "llm.usage.completion_tokens"
LLM_USAGE_CACHE_READ = "llm.usage.cache_read_input_tokens"
LLM_USAGE_CACHE_CREATION = "llm.usage.cache_creation_input_tokens"
# OpenInference (Arize Phoenix)
OI_SPAN_KIND = "openinference.span.kind"
OI_MODEL_NAME = "llm.model_name"
OI_PROVIDER = "llm.provider"
OI_SYSTEM = "llm.system"
OI_PROMPT = "llm.token_count.prompt"
OI_COMPLETION = "llm.token_count.completion"
OI_CACHE_READ = "llm.token_count.prompt_details.cache_read"
OI_CACHE_WRITE = "llm.token_count.prompt_details.cache_write"
OI_REASONING = "llm.token_count.completion_details.reasoning"
SERVER_PORT = "server.port"
SERVICE_NAME = "service.name"
