"""Memory formation: structured memories formed from the conversation by an LLM, off
the hot path.

Past messages are remembered as they arrive; the user's profile, knowledge triples,
instructions and session summary are *formed* from the conversation by an LLM.
"Formation" is the one word for it here; one run of it is a *formation pass*. (Public
names older than the word keep theirs: ``ComposableMemory.extract()``, the
``extract_every``, ``extract_after_quiet`` and ``extract_in`` options, the ``"extract"``
job kind stored in the database, :class:`~llama_memory.core.errors.ExtractionError`,
:class:`~llama_memory.core.instrumentation.MemoryExtractionEvent`.)

When formation falls due, ``put()`` queues a formation pass as a job in the same
transaction as the messages; a :class:`FormationWorker` (a thread of the memory, or
``llama-memory worker`` in another process) claims it and runs the pass: the messages of
the session after its persisted cursor go to **one** structured LLM call, outside any
lock, whose JSON answer has one key per :class:`PassPart` (the triple and profile
sources, and any part registered on the memory); every part is parsed (all or nothing),
then applied, and the cursor moved, in one transaction, only if the cursor is still
where the pass started. See docs/formation.md.

The modules: :mod:`.parts` (what takes part in a pass), :mod:`.answer` (the pass's one
LLM answer), :mod:`.run` (one pass, applied once), :mod:`.worker` (passes as jobs) and
:mod:`.passes` (a memory's passes, functions of its runtime; not imported here, since the
runtime imports this package).
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
    "DEFAULT_LEASE",
    "ExtractionError",
    "EXTRACT_JOB",
    "JSON_ONLY",
    "MAX_ATTEMPTS",
    "PASS_ANSWER",
    "PASS_PROMPT",
    "POLL_SECONDS",
    "RETRY_BASE",
    "FormationDeferred",
    "FormationWorker",
    "JobOutcome",
    "PassPart",
    "PassWindow",
    "Proposing",
    "apply_pass",
    "ask_pass",
    "conversation_lines",
    "cursor_key",
    "cursor_position",
    "job_key",
    "parse_answer",
    "pass_prompt",
    "pass_window",
    "retry_in",
    "run_parts",
    "run_pass",
    "structured_output",
    "warm_up",
]
