"""Knowledge-triple memory: facts as (subject, predicate, object), superseded instead of lost.

A :class:`TripleSource` remembers structured facts about the user and the people,
places and things in their life, such as ``(Alice, has friend, John)``. Update
rules (see ``docs/triples.md``):

- a triple identical to a current one (after normalisation) is stored once, and
  every new statement of it is recorded as a *mention* (session, message ids,
  event and ingestion time): its provenance grows;
- for a *functional* predicate (one value at a time: ``lives in``, ``name``...),
  a new object for the same subject supersedes the current triple: the old one
  gets ``valid_to`` and ``superseded_by`` and stays in :meth:`TripleSource.history`;
- retrieval returns only current triples unless history is asked for; nothing is
  deleted except by an explicit ``reset``/``forget``.

The package, read in this order: :mod:`.normalize` (matching keys), :mod:`.model`
(:class:`KnowledgeTriple`, validation), :mod:`.timeline` (the update rules, pure),
:mod:`.writes`, :mod:`.search` (ranking), :mod:`.index`, :mod:`.source`
(:class:`TripleSource`), :mod:`.tools` and :mod:`.extraction`.

Built on SQLite + Chroma by :func:`llama_memory.memory.wiring.default_triple_source`.
"""

from ...core.errors import ExtractionError
from .extraction import PART_PROMPT
from .model import (
    DEFAULT_FUNCTIONAL_PREDICATES,
    MAX_PART_CHARS,
    TRIPLE_COLLECTION,
    ExtractedTriples,
    KnowledgeTriple,
    SaveKnowledgeArgs,
    SearchKnowledgeArgs,
    TripleError,
    TripleInput,
)
from .normalize import USER_ENTITY, display_predicate, normalize_entity, normalize_predicate
from .source import TripleSource, Who

__all__ = [
    "DEFAULT_FUNCTIONAL_PREDICATES",
    "PART_PROMPT",
    "MAX_PART_CHARS",
    "TRIPLE_COLLECTION",
    "USER_ENTITY",
    "ExtractedTriples",
    "ExtractionError",
    "KnowledgeTriple",
    "SaveKnowledgeArgs",
    "SearchKnowledgeArgs",
    "TripleError",
    "TripleInput",
    "TripleSource",
    "Who",
    "display_predicate",
    "normalize_entity",
    "normalize_predicate",
]
