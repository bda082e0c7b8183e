"""Knowledge-triple memory: facts as (subject, predicate, object), superseded instead of
lost (update rules: docs/triples.md). Read in this order: :mod:`.normalize`,
:mod:`.model`, :mod:`.timeline`, :mod:`.writes`, :mod:`.search`, :mod:`.index`,
:mod:`.source` (:class:`TripleSource`), :mod:`.tools`, :mod:`.extraction`.
"""

from ...core.errors import ExtractionError
from .extraction import PART_PROMPT
from .model import (
    DEFAULT_FUNCTIONAL_PREDICATES,
    MAX_PART_CHARS,
    TRIPLE_COLLECTION,
    KnowledgeTriple,
    SaveKnowledgeArgs,
    SearchKnowledgeArgs,
    TripleError,
    TripleInput,
)
from .normalize import USER_ENTITY, display_predicate, normalize_entity, normalize_predicate
from .source import TripleSource, Who

__all__ = [
    "DEFAULT_FUNCTIONAL_PREDICATES", "PART_PROMPT", "MAX_PART_CHARS", "TRIPLE_COLLECTION",
    "USER_ENTITY", "ExtractionError", "KnowledgeTriple", "SaveKnowledgeArgs", "SearchKnowledgeArgs",
    "TripleError", "TripleInput", "TripleSource", "Who", "display_predicate", "normalize_entity",
    "normalize_predicate",
]
