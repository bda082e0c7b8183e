"""Memory formation: the profile, triples, instructions and session summary formed from
the conversation by one structured LLM call per *formation pass*, off the hot path
(docs/formation.md; names older than the word keep "extract"). :mod:`.parts` (what takes
part), :mod:`.answer` (the one LLM answer), :mod:`.run` (one pass, applied once),
:mod:`.worker` (passes as jobs) and :mod:`.passes` (a memory's passes; not imported here,
since the runtime imports this package).
"""

from ...core.errors import ExtractionError
from .answer import (
    JSON_ONLY,
    PASS_ANSWER,
    PASS_PROMPT,
    ask_pass,
    conversation_lines,
    parse_answer,
    pass_prompt,
    structured_output,
    warm_up,
)
from .parts import PassPart, PassWindow, Proposing, apply_pass, pass_window
from .run import cursor_key, cursor_position, run_parts, run_pass
from .worker import (
    DEFAULT_LEASE,
    EXTRACT_JOB,
    MAX_ATTEMPTS,
    POLL_SECONDS,
    RETRY_BASE,
    FormationDeferred,
    FormationWorker,
    JobOutcome,
    job_key,
    retry_in,
)

__all__ = [
    "DEFAULT_LEASE", "ExtractionError", "EXTRACT_JOB", "JSON_ONLY", "MAX_ATTEMPTS", "PASS_ANSWER",
    "PASS_PROMPT", "POLL_SECONDS", "RETRY_BASE", "FormationDeferred", "FormationWorker",
    "JobOutcome", "PassPart", "PassWindow", "Proposing", "apply_pass", "ask_pass",
    "conversation_lines", "cursor_key", "cursor_position", "job_key", "parse_answer", "pass_prompt",
    "pass_window", "retry_in", "run_parts", "run_pass", "structured_output", "warm_up",
]
