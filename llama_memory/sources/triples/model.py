"""The triples' data model: :class:`KnowledgeTriple`, the tools' and the extracting LLM's
models, the error for malformed triples, and the validation of what a caller gives.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, NamedTuple, Optional

from llama_index.core.bridge.pydantic import BaseModel, Field

from ...core.errors import LlamaMemoryError
from ...core.messages import to_epoch
from ...core.text import describe_unstorable, first_unstorable
from ..change_notes import since_before
from .normalize import display_predicate, normalize_entity, normalize_predicate

if TYPE_CHECKING:  # pragma: no cover - the model needs no storage to run
    from ...storage.ports.triples import StoredTriple

#: Collection-name prefix of the triples' dense index (one collection per user).
TRIPLE_COLLECTION = "llama_memory_triples"

#: Predicates that hold one value at a time for a subject, unless a source is
#: built with another list. Matched after normalisation, so "lived in",
#: "living in" and "lives_in" are all ``lives in``.
DEFAULT_FUNCTIONAL_PREDICATES: tuple[str, ...] = (
    "name", "age", "birthday", "born in", "born on", "lives in", "works at", "started at", "works for",
    "works as", "job title", "occupation", "married to", "email", "phone number",
)  # fmt: skip

#: The longest subject, predicate or object accepted: a triple names things, it
#: does not quote paragraphs (a longer part is nearly always a malformed call).
MAX_PART_CHARS = 300


class TripleError(LlamaMemoryError, ValueError):
    """A triple given to the memory was malformed (empty part, wrong type...); raised
    before anything is written: a batch with one bad triple writes none."""


@dataclass(frozen=True)
class KnowledgeTriple:
    """One fact, ``subject — predicate — object``, with its provenance and validity.

    Build one with the three parts to write it (``KnowledgeTriple("John", "likes",
    "pizza")``; ``valid_from`` or ``event_time`` dates the statement). Triples read back
    from a :class:`TripleSource` carry the rest.

    Attributes:
        subject, predicate, object: the text as first stated (matching uses the
            normalised keys: :func:`normalize_entity`, :func:`normalize_predicate`).
        id: the triple's id in the store.
        user_id, tenant_id: whose fact it is.
        session_id: the session that first stated it.
        session_ids: every session that stated it, in order.
        message_ids: ids of the chat messages it came from (when known).
        event_time: when it was first stated (seconds since the epoch, UTC).
        ingested_at: when it was first stored.
        valid_from: since when it holds.
        valid_to: until when it held (``None``: it is current).
        superseded_by: the id of the triple that replaced it.
        mentions: how many times it was stated.
        expires_at: when it expires (epoch seconds; ``None``: kept until forgotten).
    """

    subject: str
    predicate: str
    object: str
    id: Optional[str] = None
    user_id: Optional[str] = None
    tenant_id: Optional[str] = None
    session_id: Optional[str] = None
    session_ids: tuple[str, ...] = ()
    message_ids: tuple[str, ...] = ()
    event_time: Optional[float] = None
    ingested_at: Optional[float] = None
    valid_from: Optional[float] = None
    valid_to: Optional[float] = None
    superseded_by: Optional[str] = None
    mentions: int = 0
    expires_at: Optional[float] = None

    @property
    def current(self) -> bool:
        """Whether the fact still holds (it has not been superseded)."""
        return self.valid_to is None

    def text(self) -> str:
        """``John — likes — pizza``: the fact alone."""
        return f"{self.subject} — {display_predicate(self.predicate)} — {self.object}"

    def render(self, before: Optional[str] = None) -> str:
        """The fact with its validity, ``John — lives in — New York (since 2023-05-08)``
        or ``(2020-01-01 to 2023-05-08)``; ``before`` adds ``; before: Boston``."""
        if self.valid_from is None:
            return self.text()
        if self.valid_to is None:
            if before is not None:
                return f"{self.text()} ({since_before(self.valid_from, before)})"
            return f"{self.text()} (since {_date(self.valid_from)})"
        return f"{self.text()} ({_date(self.valid_from)} to {_date(self.valid_to)})"


class TripleInput(BaseModel):
    """One fact as (subject, predicate, object)."""

    subject: str = Field(description='Who or what the fact is about, e.g. "John".')
    predicate: str = Field(description='The relation, short and in the present tense, e.g. "likes", "lives in".')
    object: str = Field(description='The value or the other entity, e.g. "pizza".')


class SaveKnowledgeArgs(BaseModel):
    """Arguments of the ``save_knowledge`` tool."""

    triples: list[TripleInput] = Field(description="The facts to save.")


class SearchKnowledgeArgs(BaseModel):
    """Arguments of the ``search_knowledge`` tool."""

    query: str = Field(description="What to look for, in words (names, relations, topics).")


def _date(epoch: float) -> str:
    """``2023-05-08``: an epoch as a UTC date."""
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%d")


class Prepared(NamedTuple):
    """A validated triple ready to be written."""

    subject: str
    predicate: str
    object: str
    subject_key: str
    predicate_key: str
    object_key: str
    stated_at: Optional[float]  # its own time, when the caller dated it


_TRIPLE_FIELDS = ("subject", "predicate", "object")


def _part(value: Any, field: str, where: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise TripleError(f"{where}: {field!r} must be a string, got {type(value).__name__} {value!r}")
    text = " ".join(str(value).split())
    if not text:
        raise TripleError(f"{where}: {field!r} is empty")
    if len(text) > MAX_PART_CHARS:
        raise TripleError(
            f"{where}: {field!r} is {len(text)} characters long; a triple's parts are names "
            f"and short phrases (at most {MAX_PART_CHARS})"
        )
    bad = first_unstorable(text)
    if bad is not None:  # the same refusal as a message's, on every backend
        raise TripleError(f"{where}: {field!r} holds {describe_unstorable(bad)}; nothing was stored")
    return text


def prepare_one(item: Any, position: int) -> Prepared:
    """Validate one triple given as a KnowledgeTriple, a pydantic model, a mapping or a
    3-tuple; the error names it as ``triples[position]``."""
    where = f"triples[{position}]"
    stated_at: Any = None
    if isinstance(item, BaseModel):  # TripleInput, or any model with the three fields
        item = item.model_dump()
    if isinstance(item, KnowledgeTriple):
        parts: tuple[Any, ...] = (item.subject, item.predicate, item.object)
        stated_at = item.valid_from if item.valid_from is not None else item.event_time
    elif isinstance(item, Mapping):
        missing = [f for f in _TRIPLE_FIELDS if f not in item]
        if missing:
            raise TripleError(
                f"{where}: missing {', '.join(map(repr, missing))} "
                f"(a triple needs subject, predicate and object), got {dict(item)!r}"
            )
        parts = tuple(item[f] for f in _TRIPLE_FIELDS)
        stated_at = item.get("valid_from", item.get("event_time"))
    elif isinstance(item, (tuple, list)):
        if len(item) != 3:
            raise TripleError(
                f"{where}: a sequence must have 3 items (subject, predicate, object), "
                f"got {len(item)}: {item!r}"
            )
        parts = tuple(item)
    else:
        raise TripleError(
            f"{where}: expected a KnowledgeTriple, a mapping with subject, predicate and "
            f"object, or a 3-tuple; got {type(item).__name__} {item!r}"
        )
    subject, predicate, obj = (_part(v, f, where) for v, f in zip(parts, _TRIPLE_FIELDS))
    keys = (normalize_entity(subject), normalize_predicate(predicate), normalize_entity(obj))
    for key, field, text in zip(keys, _TRIPLE_FIELDS, (subject, predicate, obj)):
        if not key:
            raise TripleError(f"{where}: {field!r} has no letters or digits: {text!r}")
    if stated_at is not None:
        try:
            stated_at = to_epoch(stated_at)
        except ValueError as exc:
            raise TripleError(f"{where}: {exc}") from exc
    return Prepared(subject, predicate, obj, *keys, stated_at)


def prepare_all(triples: Any) -> list[Prepared]:
    """Validate a batch of triples (all before anything is written); a single triple
    not in a list is refused."""
    # A bare ("Ana", "lives in", "Porto") is one triple, not three: its items are strings.
    one_tuple = isinstance(triples, tuple) and len(triples) == 3 and all(isinstance(t, str) for t in triples)
    if (
        one_tuple or isinstance(triples, (str, bytes, Mapping, KnowledgeTriple, BaseModel))
        or not isinstance(triples, Iterable)
    ):  # fmt: skip
        raise TripleError(
            f"expected a list of triples, got {type(triples).__name__}: {triples!r} "
            "(wrap a single triple in a list)"
        )
    return [prepare_one(item, i) for i, item in enumerate(triples)]


def to_triple(row: "StoredTriple") -> KnowledgeTriple:
    """A stored triple as the API shows it: its provenance summed up from its mentions."""
    mentions = row.mentions
    sessions = tuple(dict.fromkeys(m.session_id for m in mentions if m.session_id))
    message_ids = tuple(dict.fromkeys(i for m in mentions for i in m.message_ids))
    return KnowledgeTriple(
        subject=row.subject, predicate=row.predicate, object=row.object, id=row.id, user_id=row.user_id,
        tenant_id=row.tenant_id, session_id=mentions[0].session_id if mentions else None, session_ids=sessions,
        message_ids=message_ids, event_time=min((m.event_time for m in mentions), default=None),
        ingested_at=row.ingested_at, valid_from=row.valid_from, valid_to=row.valid_to, superseded_by=row.superseded_by,
        mentions=len(mentions), expires_at=row.expires_at,
    )  # fmt: skip
