"""The knowledge tools an agent is given: ``save_knowledge`` and ``search_knowledge``,
bound to one user (the LLM's arguments never choose the user)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...core.types import Scope
from .model import SaveKnowledgeArgs, SearchKnowledgeArgs, TripleInput
from .timeline import Written
from .writes import TripleAccess


def knowledge_tools(source: TripleAccess, scope: Scope) -> list[Any]:
    """``save_knowledge`` and ``search_knowledge`` as LlamaIndex ``FunctionTool``s on
    ``source``, acting for the scope's user."""
    from llama_index.core.tools import FunctionTool

    scope.require_user(f"the {source.name!r} memory tools")

    def save_knowledge(triples: list[TripleInput]) -> str:
        written = source._write(triples, scope, None, (), origin="tool")
        return describe_writes(source, written, scope)

    def search_knowledge(query: str) -> str:
        records = source.search(query, scope, 10)
        if not records:
            return f"No saved facts match {query!r}."
        return "\n".join(f"- {r.text}" for r in records)

    return [
        # Explicit schemas: inferring them from the closures' (postponed)
        # annotations fails, and the LLM should see field descriptions anyway.
        FunctionTool.from_defaults(
            fn=save_knowledge,
            name="save_knowledge",
            fn_schema=SaveKnowledgeArgs,
            description=(
                "Save lasting facts about the user and the people, places and things in "
                "their life, as (subject, predicate, object) triples, e.g. "
                '{"subject": "Alice", "predicate": "has friend", "object": "John"}. '
                "Use short names and short present-tense predicates. A new value for a "
                "one-value predicate (lives in, works at, name, age...) replaces the old "
                "one, which stays in history."
            ),
        ),
        FunctionTool.from_defaults(
            fn=search_knowledge,
            name="search_knowledge",
            fn_schema=SearchKnowledgeArgs,
            description=(
                "Search the facts saved about the user and the people, places and things "
                "in their life; returns current facts as 'subject — predicate — object'."
            ),
        ),
    ]


def describe_writes(source: TripleAccess, written: Sequence[Written], scope: Scope) -> str:
    """What ``save_knowledge`` answers: each fact, saved or already known, and what it
    replaced."""
    triples = {t.id: t for t in source._by_ids([w.id for w in written], scope)}
    replaced = {t.id: t for t in source._by_ids([i for w in written for i in w.superseded], scope)}
    lines = []
    for w in written:
        fact = triples[w.id].text()
        status = "saved" if w.created else "already known"
        if w.superseded:
            status += "; replaces " + ", ".join(replaced[i].text() for i in w.superseded if i in replaced)
        lines.append(f"- {fact} ({status})")
    return "\n".join(lines) if lines else "Nothing to save: the list of triples was empty."
