"""Every error a user can meet: a stable code, the cause (with the values involved) and a fix.

The registry below is the one list of codes; `WorkbenchError` refuses a code that is not in it, and a
test checks that every code used in the source is registered and documented in the README.
"""

from __future__ import annotations

# code -> one line: what it means. Exit code 2 (could not judge) unless EXIT_CODES says otherwise.
CODES: dict[str, str] = {
    "WB_CONFIG_INVALID": "a setting in [tool.workbench] or a WORKBENCH_* variable has a wrong value",
    "WB_CLI_USAGE": "a command got an option or argument it does not take, or a value it does not accept",
    "WB_PATH_INVALID": "a file or folder given to a command cannot be read or written",
    "WB_MODELS_INVALID": "models.toml (or a register_model call) has a malformed row",
    "WB_MODEL_UNKNOWN": "a model is not in the model registry, so it cannot be routed or priced",
    "WB_MODEL_UNRESOLVED": "no model was given by the call, the prompt or the gateway default",
    "WB_CASSETTE_INVALID": "a cassette file cannot be read as a vcrpy cassette",
    "WB_CASSETTE_NOT_FOUND": "a cassette file or folder does not exist",
    "WB_CASSETTE_UNWRITABLE": "a recording cannot be written to its cassette: a full disk, a read-only folder, permissions",
    "WB_CASSETTE_SECRET": "a cassette holds a value that looks like a secret",
    "WB_REPLAY_MISS": "replay mode got a request that the cassette has no recording for",
    "WB_NETWORK_BLOCKED": "a test under --block-network tried to connect to a host it does not allow",
    "WB_STORE_LOCKED": "the store stayed locked by another process past the retry window",
    "WB_STORE_INVALID": "the store file is not a Workbench store, or is newer than this version",
    "WB_LOCK_UNSAFE": "a lock file is a symbolic link, not a regular file, or another user's: it is refused, so ingestion (or what else takes it) stops",
    "WB_STORE_UNWRITABLE": "the store cannot be created or written: a full disk, a read-only file system, permissions",
    "WB_LAKE_UNREACHABLE": "the DuckLake store named by WORKBENCH_DB cannot be attached: its catalog database is down or refuses",
    "WB_LAKE_EXTENSION_MISSING": "DuckDB cannot load the ducklake (or catalog) extension a DuckLake store needs",
    "WB_RUN_NOT_FOUND": "no run with that id is in the store",
    "WB_RUN_AMBIGUOUS": "the start of a run id given matches several runs",
    "WB_RUN_STILL_RUNNING": "the run to resume is still running in a live process",
    "WB_PORT_UNAVAILABLE": "the port to serve on is taken or not allowed",
    "WB_COLLECT_TOKEN": "workbench collect would listen beyond loopback without WORKBENCH_COLLECT_TOKEN, or the token is too short",
    "WB_PROVIDER_ERROR": "the provider answered with an error that retries did not clear",
    "WB_BUDGET_EXCEEDED": "a token or cost budget would be exceeded by the next call",
    "WB_BUDGET_CURRENCY": "a cost budget would have to count a call priced in another currency than its own",
    "WB_LLM_OUTPUT_INVALID": "the model's structured output did not validate, even after one repair turn",
    "WB_LLM_TRUNCATED": "the model stopped at its output token ceiling",
    "WB_LLM_REFUSED": "the model refused to answer",
    "WB_AGENT_MAX_TURNS": "the agent used all its turns without a final answer",
    "WB_AGENT_TOOL_LOOP": "the agent repeated the same tool calls and results",
    "WB_AGENT_DEADLINE": "the agent ran past its deadline",
    "WB_AGENT_CONTEXT_EXHAUSTED": "the conversation no longer fits the model's context, even after compaction",
    "WB_AGENT_TOOL_UNDECLARED": "a run offered the agent a tool name its declaration does not list",
    "WB_AGENT_TRANSCRIPT_INVALID": "a transcript handed back to an agent is forged, spliced, malformed or another agent's",
    "WB_AGENT_CHECKPOINT_MISSING": "the run to resume has no checkpoint in the store",
    "WB_TRANSCRIPT_SECRET_MISSING": "a transcript was to be signed or checked, but WORKBENCH_TRANSCRIPT_SECRET is not set",
    "WB_LLM_CONTEXT_OVERFLOW": "the provider refused an llm() call as longer than the model's context window",
    "WB_LLM_STREAM_INVALID": "a streamed answer did not validate (a stream takes no repair turn)",
    "WB_LLM_CONTENT_UNSUPPORTED": "an image or document was sent to a model whose row does not take that input kind",
    "WB_RUNTIME_OPTION_INVALID": "a runtime option is not a valid value, or one the model or the declaration does not allow",
    "WB_PROMPT_SECRET": "a secret-typed value (e.g. pydantic SecretStr) was passed as a prompt variable",
    "WB_ABORTED": "the run was cancelled while it was running",
    "WB_PROMPT_RENDER": "a prompt template has a {{variable}} that was not given a value",
    "WB_PROMPT_VERSION": "a released prompt version's content changed without a version bump",
    "WB_EVAL_SUITE_INVALID": "an eval suite file or its cases cannot be loaded",
    "WB_EVAL_BASELINE_MISSING": "the suite has never recorded a baseline",
    "WB_EVAL_BASELINE_INVALID": "the baseline file is unreadable or has the wrong shape",
    "WB_EVAL_RECORDING": "the gate was asked to run while WORKBENCH_EVAL_RECORD=1 is set",
    "WB_EVAL_CASE_ERROR": "cases ended in an error (the target or a scorer raised), so the suite has no verdict",
    "WB_EVAL_SCORE_INVALID": "a scorer or a judge gave a score that is not a number in [0, 1] (NaN, 5, a word)",
    "WB_EVAL_THRESHOLD": "a score dropped from the baseline by more than the tolerance, beyond the noise of its samples",
    "WB_EVAL_CASE_FAILED": "a case's target raised, and its suite declares errors as failures",
    "WB_EVAL_COST": "the cost per case rose more than --max-cost-increase allows",
    "WB_EVAL_COST_CURRENCY": "--max-cost-increase cannot compare the cost per case: the run's is in another currency than the baseline's",
    "WB_EVAL_COST_UNPRICED": "--max-cost-increase cannot compare the cost per case: a call of the run, or of the baseline when it was recorded, had no price",
    "WB_EVAL_MISSING": "a declared prompt is not named by any eval suite",
    "WB_SPEND_ABOVE": "the spend in a cost report is above --fail-above (in total, or for a group with --by)",
    "WB_CHECK_EMPTY": "`workbench check` found no suites, prompts lock or cassettes to check",
    "WB_DASHBOARD_EXPOSED": "the dashboard was asked to listen beyond this machine without a password",
    "WB_EXPORT_REFUSED": "an export would write outside the folder it must stay in, or over a file unasked",
}

# Exit codes of the CLI: 1 is a regression found by the gate (or spend above an alert's line), 2 anything
# that prevented a verdict.
EXIT_CODES: dict[str, int] = {"WB_EVAL_THRESHOLD": 1, "WB_EVAL_CASE_FAILED": 1, "WB_EVAL_COST": 1, "WB_SPEND_ABOVE": 1}


class WorkbenchError(Exception):
    """An error with a stable `code`, a `cause` naming the values involved and a `fix` to apply."""

    def __init__(self, code: str, cause: str, fix: str) -> None:
        if code not in CODES:
            raise ValueError(f"unregistered error code {code!r}: add it to workbench.errors.CODES")
        self.code = code
        self.cause = cause
        self.fix = fix
        super().__init__(f"{code}: {cause} (fix: {fix})")

    @property
    def exit_code(self) -> int:
        return EXIT_CODES.get(self.code, 2)
