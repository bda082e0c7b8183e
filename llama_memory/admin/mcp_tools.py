"""What the MCP server's tools do, in plain Python, on one open
:class:`~llama_memory.admin.memory_admin.MemoryAdmin`, with their descriptions and the
checks of their arguments; :mod:`llama_memory.admin.mcp_server` serves them."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Optional

from pydantic import Field

from ..core.text import first_unstorable, shown
from .mcp_results import (
    MAX_TEXT_CHARS,
    AddedResult,
    DeletedRecord,
    DeletedResult,
    ForgottenResult,
    ProfileResult,
    RecordResult,
    TripleResult,
    record_result,
    triple_result,
)
from .memory_admin import MemoryAdmin, UnknownUserError

if TYPE_CHECKING:
    from ..core.types import MemoryRecord
    from ..memory.composable import ComposableMemory

__all__ = ["DEFAULT_SESSION", "MAX_RESULTS", "MemoryTools", "allowed_users"]

#: The session the memories added through the server are written to.
DEFAULT_SESSION = "mcp"
#: Records a search returns when the caller does not say.
DEFAULT_SEARCH_K = 5
#: Records the recent-records tool lists when the caller does not say.
DEFAULT_RECENT = 10
#: The most records one call returns (an agent's context is small).
MAX_RESULTS = 50


def allowed_users(users: Iterable[str]) -> tuple[str, ...]:
    """The users a server serves, in the order given, each once; ValueError for none
    or for an id that is empty or blank."""
    kept: list[str] = []
    for user in users:
        if not isinstance(user, str) or not user.strip():
            raise ValueError(f"a user id must be a non-empty, non-blank string, got {user!r}")
        if user not in kept:
            kept.append(user)
    if not kept:
        raise ValueError("the MCP server needs the user whose memory it serves: --user ID (or --users a,b)")
    return tuple(kept)


def _count(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_RESULTS:
        raise ValueError(f"{what} must be a whole number from 1 to {MAX_RESULTS}, got {shown(value)}.")
    return value


def _text(value: Any, what: str) -> str:
    """``value`` when it is a text a memory can hold; ValueError saying what is wrong."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{what} must be a non-empty text, got {shown(value)}.")
    bad = first_unstorable(value)
    if bad is not None:
        raise ValueError(
            f"{what} holds a character a memory cannot store (U+{ord(bad):04X}); "
            "send it again without that character."
        )
    return value


#: The arguments' types, as the tools' input schemas give them (strict: nothing coerced).
Count = Annotated[int, Field(strict=True, ge=1, le=MAX_RESULTS)]
Text = Annotated[str, Field(strict=True)]
Flag = Annotated[bool, Field(strict=True)]


class MemoryTools:
    """What the MCP tools do, on one open :class:`MemoryAdmin`, in plain Python: each
    method takes the user first; a memory of each user is opened on first use and kept.

    Args:
        admin: the open store and tenant.
        users: the users the server may serve; any other is refused.
        allow_delete: whether :meth:`delete_memory` and :meth:`forget_user` may run.
        session_id: the session the added memories are written to.
    """

    def __init__(
        self, admin: MemoryAdmin, users: Sequence[str], *, allow_delete: bool = False, session_id: str = DEFAULT_SESSION
    ) -> None:
        if not isinstance(session_id, str) or not session_id.strip():
            raise ValueError(f"session_id must be a non-empty, non-blank string, got {session_id!r}")
        self.admin = admin
        self.users = allowed_users(users)
        self.allow_delete = allow_delete
        self.session_id = session_id
        # One memory per user to write to (opening one reads its session's messages)
        # and one to search with, on a session of its own: a search must not leave out
        # what was added through the server as "already in the conversation".
        self._writers: dict[str, ComposableMemory] = {}
        self._readers: dict[str, ComposableMemory] = {}

    def check_user(self, user_id: Any) -> str:
        """``user_id`` when the server serves it; ValueError naming the served users otherwise."""
        if user_id not in self.users:
            served = ", ".join(map(shown, self.users))
            raise ValueError(f"this server does not serve user {shown(user_id)}: it serves {served}.")
        return str(user_id)

    def _memory(self, opened: dict[str, ComposableMemory], user: str, session_id: Optional[str] = None) -> ComposableMemory:
        if user not in opened:
            opened[user] = self.admin.memory(user, session_id)
        return opened[user]

    def search_memory(
        self,
        user_id: str,
        query: Annotated[Text, Field(description="what to look for, e.g. a question about the user")],
        k: Annotated[Count, Field(description=f"how many memories at most (1-{MAX_RESULTS})")] = DEFAULT_SEARCH_K,
    ) -> list[RecordResult]:
        """The memories ``memory.search(query, k)`` returns for the user, most relevant
        first, each cut at :data:`MAX_TEXT_CHARS` characters."""
        user = self.check_user(user_id)
        _text(query, "query")
        _count(k, "k")
        # An agent takes the first result for the answer: by relevance, not by the sources'
        # priorities (a 0.01 triple came before a 0.98 message).
        found = sorted(self._memory(self._readers, user).search(query, k), key=lambda r: -1.0 if r.relevance is None else -r.relevance)
        return [record_result(r) for r in found]

    def read_memory(
        self, user_id: str, record_id: Annotated[Text, Field(description="one id of a memory's record_ids")]
    ) -> RecordResult:
        """One of the user's records (or triples) by id, whole: what a cut text left out."""
        user = self.check_user(user_id)
        _text(record_id, "record_id")
        return record_result(self._stored(user, [record_id])[0], whole=True)

    def add_memory(
        self, user_id: str, text: Annotated[Text, Field(description="what to remember, as one self-contained statement")]
    ) -> AddedResult:
        """Store ``text`` as a message of the user in the server's session (``put``), so
        it is searched, deduplicated and formed into memories as any other turn; marked
        standalone (:data:`~llama_memory.core.types.STANDALONE_KEY`), it is found as
        itself with its own id, never joined with the other memories added."""
        from llama_index.core.base.llms.types import ChatMessage, MessageRole

        from ..core.messages import message_id
        from ..core.types import STANDALONE_KEY

        user = self.check_user(user_id)
        _text(text, "text")
        message = ChatMessage(role=MessageRole.USER, content=text)
        mid = message_id(message)
        message.additional_kwargs["message_id"] = mid
        message.additional_kwargs[STANDALONE_KEY] = True
        self._memory(self._writers, user, self.session_id).put(message)
        written = self.admin.records(user, session_id=self.session_id, limit=MAX_RESULTS, newest_first=True)
        return AddedResult(
            user_id=user, session_id=self.session_id, message_id=mid,
            record_ids=[r.id for r in written if r.id and mid in r.message_ids],
        )  # fmt: skip

    def read_profile(self, user_id: str) -> ProfileResult:
        """The user's current profile (``{}`` when none)."""
        user = self.check_user(user_id)
        return ProfileResult(user_id=user, profile=self.admin.profile(user))

    def read_triples(
        self,
        user_id: str,
        include_history: Annotated[Flag, Field(description="also the triples that no longer hold")] = False,
    ) -> list[TripleResult]:
        """The user's knowledge triples that hold now, oldest first; with
        ``include_history``, the superseded ones too."""
        user = self.check_user(user_id)
        if not isinstance(include_history, bool):
            raise ValueError(f"include_history must be true or false, got {shown(include_history)}.")
        return [triple_result(t) for t in self.admin.triples(user, include_history=include_history)]

    def recent_memories(
        self,
        user_id: str,
        limit: Annotated[Count, Field(description=f"how many memories at most (1-{MAX_RESULTS})")] = DEFAULT_RECENT,
    ) -> list[RecordResult]:
        """The user's latest long-term records, newest first, each cut at
        :data:`MAX_TEXT_CHARS` characters."""
        user = self.check_user(user_id)
        _count(limit, "limit")
        try:
            records = self.admin.records(user, limit=limit, newest_first=True)
        except UnknownUserError:
            return []  # nothing stored of them yet
        return [record_result(r) for r in records]

    def delete_memory(
        self,
        user_id: str,
        record_ids: Annotated[
            list[Text], Field(min_length=1, description="the ids to delete: a memory's record_ids, or a triple's id"),
        ],
    ) -> DeletedResult:
        """Delete records or triples of the user from every index: all of them, or none
        when one of the ids is not the user's."""
        user = self._check_delete(user_id, "delete_memory")
        if not isinstance(record_ids, list) or not record_ids:
            raise ValueError(f"record_ids must be a list of ids (at least one), got {shown(record_ids)}.")
        for record_id in record_ids:
            _text(record_id, "each of record_ids")
        ids = list(dict.fromkeys(record_ids))  # each once, in the order given
        self._stored(user, ids)  # every id checked before anything is deleted
        deleted = [DeletedRecord(id=i, source=self.admin.delete_record(user, i)) for i in ids]
        return DeletedResult(user_id=user, deleted=deleted)

    def forget_user(self, user_id: str) -> ForgottenResult:
        """Delete everything remembered of the user, for good (done at once when nothing
        is stored of them)."""
        user = self._check_delete(user_id, "forget_user")
        # Their memories' windows hold what is being forgotten.
        self._writers.pop(user, None)
        self._readers.pop(user, None)
        try:
            self.admin.forget(user)
        except UnknownUserError:  # its message lists the store's other users: not the agent's to read
            pass
        return ForgottenResult(forgotten=user)

    def _stored(self, user: str, ids: Sequence[str]) -> list[MemoryRecord]:
        """The user's records (or triples) of ``ids``; ValueError naming those the user
        has none of (another user's id is one of them)."""
        found: list[MemoryRecord] = []
        unknown: list[str] = []
        for record_id in ids:
            try:
                found.append(self.admin.record(user, record_id))
            except KeyError:  # UnknownUserError too
                unknown.append(record_id)
        if unknown:
            raise ValueError(
                f"no memory of this user has the {'id' if len(unknown) == 1 else 'ids'} "
                f"{', '.join(map(shown, unknown))}; take ids from "
                "the record_ids of search_memory or recent_memories, or a triple's id from read_triples."
            )
        return found

    def _check_delete(self, user_id: str, tool: str) -> str:
        if not self.allow_delete:
            raise PermissionError(f"{tool} is turned off: this server was started without --allow-delete.")
        return self.check_user(user_id)


_MEMORY_FIELDS = (
    f"each with its text (at most {MAX_TEXT_CHARS:,} characters: a longer one is cut, ends with a "
    "marker and has truncated: true), record_ids (the ids of every record the text shows: "
    "read_memory reads one whole; delete_memory removes them), role (the speaker of a single "
    "message), source, session_id, date (when it happened, UTC)"
)

#: The tools every server offers: (MemoryTools method and tool name, what the tool tells
#: the agent, whether it only reads).
TOOLS: tuple[tuple[str, str, bool], ...] = (
    (
        "search_memory",
        "Search the user's long-term memory (past conversations, facts learnt, session "
        "summaries) for `query`. Returns up to `k` memories, most relevant first, "
        + _MEMORY_FIELDS
        + " and relevance (0..1, the estimated chance it answers the query).",
        True,
    ),
    ("read_memory", "Read one memory whole by its id (one of a memory's record_ids, or a triple's id): "
     "what a cut text left out.", True),
    (
        "add_memory",
        "Remember something about or for the user: a statement they want kept, e.g. "
        "'I prefer dark mode in every editor'. It is stored as a statement of the user and "
        "found by later searches as itself, with its own id (never joined with other "
        "memories). Returns the ids of the records written.",
        False,
    ),
    ("read_profile", "Read the user's profile: the fields known about them (name, preferences...), as JSON.", True),
    (
        "read_triples",
        "Read the knowledge triples known about the user (subject, predicate, object) that "
        "hold now; with include_history, also the ones that were superseded, with the dates "
        "each held.",
        True,
    ),
    ("recent_memories", "List the user's latest long-term records, newest first, " + _MEMORY_FIELDS + ".", True),
)
#: The tools a server offers only when started with ``allow_delete``.
DELETE_TOOLS: tuple[tuple[str, str, bool], ...] = (
    (
        "delete_memory",
        "Delete records or knowledge triples of the user from every index: pass a memory's "
        "record_ids (from search_memory or recent_memories) to remove all that it showed, or "
        "a triple's id (from read_triples). A memory added with add_memory is always shown "
        "alone, with its one id, so its record_ids delete that memory only. A memory whose "
        "text shows several messages of a conversation (one 'role: text' line each) has one "
        "id per message, in the order shown: to remove one message, pass its id alone "
        "(read_memory shows which). Nothing is deleted when an id is not the user's. "
        "Cannot be undone.",
        False,
    ),
    (
        "forget_user",
        "Delete everything remembered of the user: conversations, records, profile, triples. "
        "Cannot be undone; only when the user asks for it.",
        False,
    ),
)


