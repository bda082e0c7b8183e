"""A Model Context Protocol server over a memory store: ``llama-memory mcp``.

Agents outside LlamaIndex (desktop assistants, IDE agents, other frameworks) reach a
user's memory through MCP tools: search it, add to it, read the profile and the
knowledge triples, list the latest records; and, only when the server is started
with ``allow_delete``, delete a record or forget the user. Every tool goes through
the library's public API (:class:`~llama_memory.admin.memory_admin.MemoryAdmin` and the
:class:`~llama_memory.memory.composable.ComposableMemory` it opens), so scope, errors and
instrumentation are those of an application's memory; nothing here reads storage.

A server serves one user, or the users of an allow-list: with one user the tools
take no user argument (an agent cannot reach anyone else's memory); with several,
each tool takes a ``user_id`` that must be on the list.

The MCP Python SDK is an optional dependency (``pip install "llama-memory[mcp]"``),
imported only when a server is built, so the rest of the package works without it.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import signal
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional, TypeVar, Union

from pydantic import Field

# pydantic (which reads the tools' result types) needs this TypedDict on Python < 3.12.
from typing_extensions import TypedDict

from ..core.errors import LlamaMemoryError

if TYPE_CHECKING:
    from llama_index.core.base.embeddings.base import BaseEmbedding

    from ..core.types import MemoryRecord
    from ..memory.composable import ComposableMemory
    from .memory_admin import MemoryAdmin

__all__ = [
    "AddedResult",
    "DeletedResult",
    "ForgottenResult",
    "DEFAULT_PORT",
    "DEFAULT_SESSION",
    "MCPUnavailableError",
    "MemoryTools",
    "ProfileResult",
    "RecordResult",
    "TripleResult",
    "build_server",
    "serve",
]

logger = logging.getLogger(__name__)

#: The port ``--http`` listens on by default (on 127.0.0.1).
DEFAULT_PORT = 8000
#: The session the memories added through the server are written to.
DEFAULT_SESSION = "mcp"
#: Records a search returns when the caller does not say.
DEFAULT_SEARCH_K = 5
#: Records the recent-records tool lists when the caller does not say.
DEFAULT_RECENT = 10
#: The most records one call returns (an agent's context is small).
MAX_RESULTS = 50
#: Where the streamable HTTP transport answers.
HTTP_PATH = "/mcp"
#: The only address ``--http`` binds: the server has no authentication of its own.
LOOPBACK = "127.0.0.1"

T = TypeVar("T")


class MCPUnavailableError(LlamaMemoryError, ImportError):
    """The MCP Python SDK is not installed (it comes with the ``mcp`` extra)."""


# --------------------------------------------------------------------------- results


class RecordResult(TypedDict):
    """One long-term record as a tool returns it."""

    id: Optional[str]
    text: str
    source: str
    session_id: Optional[str]
    date: Optional[str]
    stored_at: Optional[str]
    relevance: Optional[float]


class TripleResult(TypedDict):
    """One knowledge triple as a tool returns it."""

    id: Optional[str]
    subject: str
    predicate: str
    object: str
    current: bool
    valid_from: Optional[str]
    valid_to: Optional[str]
    mentions: int


class ProfileResult(TypedDict):
    """A user's current profile."""

    user_id: str
    profile: dict[str, Any]


class AddedResult(TypedDict):
    """What :meth:`MemoryTools.add_memory` stored."""

    user_id: str
    session_id: str
    message_id: str
    record_ids: list[str]


class DeletedResult(TypedDict):
    """What :meth:`MemoryTools.delete_memory` removed."""

    user_id: str
    deleted: str
    source: str


class ForgottenResult(TypedDict):
    """Whom :meth:`MemoryTools.forget_user` forgot."""

    forgotten: str


def _iso(epoch: Optional[float]) -> Optional[str]:
    if epoch is None:
        return None
    return datetime.fromtimestamp(epoch, tz=timezone.utc).isoformat(timespec="seconds")


def _record(record: MemoryRecord) -> RecordResult:
    relevance = None if record.relevance is None else round(record.relevance, 3)
    return RecordResult(
        id=record.id,
        text=record.transcript,
        source=record.source,
        session_id=record.session_id,
        date=_iso(record.event_time),
        stored_at=_iso(record.ingested_at),
        relevance=relevance,
    )


# --------------------------------------------------------------------------- the tools


def _allowed_users(users: Iterable[str]) -> tuple[str, ...]:
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


def _count(value: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_RESULTS:
        raise ValueError(f"{what} must be a whole number from 1 to {MAX_RESULTS}, got {value!r}")
    return value


class MemoryTools:
    """What the MCP tools do, on one open :class:`MemoryAdmin`, in plain Python.

    Each method takes the user first; :func:`build_server` turns them into tools
    (with or without a ``user_id`` argument) and runs them one at a time on one
    thread, as the admin's store expects.

    Args:
        admin: the open store and tenant.
        users: the users the server may serve; any other is refused.
        allow_delete: whether :meth:`delete_memory` and :meth:`forget_user` may run.
        session_id: the session the added memories are written to.
    """

    def __init__(
        self,
        admin: MemoryAdmin,
        users: Sequence[str],
        *,
        allow_delete: bool = False,
        session_id: str = DEFAULT_SESSION,
    ) -> None:
        if not isinstance(session_id, str) or not session_id.strip():
            raise ValueError(f"session_id must be a non-empty, non-blank string, got {session_id!r}")
        self.admin = admin
        self.users = _allowed_users(users)
        self.allow_delete = allow_delete
        self.session_id = session_id
        # One memory per user for the writes, kept: opening one reads its session's
        # messages, and an add should not pay that every time.
        self._writers: dict[str, ComposableMemory] = {}

    def check_user(self, user_id: Any) -> str:
        """``user_id`` when the server serves it; ValueError naming the served users otherwise."""
        if user_id not in self.users:
            served = ", ".join(map(repr, self.users))
            raise ValueError(f"this server does not serve user {user_id!r}: it serves {served}")
        return str(user_id)

    def search_memory(
        self,
        user_id: str,
        query: Annotated[str, Field(description="what to look for, e.g. a question about the user")],
        k: Annotated[int, Field(description=f"how many records at most (1-{MAX_RESULTS})")] = DEFAULT_SEARCH_K,
    ) -> list[RecordResult]:
        """The records ``memory.search(query, k)`` returns for the user, best first."""
        user = self.check_user(user_id)
        if not isinstance(query, str) or not query.strip():
            raise ValueError(f"query must be a non-empty text, got {query!r}")
        _count(k, "k")
        # A memory on a new session, as MemoryAdmin.search builds it; a user with
        # nothing stored yet has nothing to find (not an error: the server serves them).
        return [_record(r) for r in self.admin.memory(user).search(query, k)]

    def add_memory(
        self,
        user_id: str,
        text: Annotated[str, Field(description="what to remember, as one self-contained statement")],
    ) -> AddedResult:
        """Store ``text`` as a message of the user in the server's session (``put``), so
        it is searched, deduplicated and formed into memories as any other turn."""
        from llama_index.core.base.llms.types import ChatMessage, MessageRole

        from ..core.messages import message_id

        user = self.check_user(user_id)
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"the memory to add must be a non-empty text, got {text!r}")
        message = ChatMessage(role=MessageRole.USER, content=text)
        mid = message_id(message)
        message.additional_kwargs["message_id"] = mid
        memory = self._writers.get(user)
        if memory is None:
            memory = self._writers[user] = self.admin.memory(user, self.session_id)
        memory.put(message)
        written = self.admin.records(user, session_id=self.session_id, limit=MAX_RESULTS, newest_first=True)
        return AddedResult(
            user_id=user,
            session_id=self.session_id,
            message_id=mid,
            record_ids=[r.id for r in written if r.id and mid in r.message_ids],
        )

    def read_profile(self, user_id: str) -> ProfileResult:
        """The user's current profile (``{}`` when none)."""
        user = self.check_user(user_id)
        return ProfileResult(user_id=user, profile=self.admin.profile(user))

    def read_triples(
        self,
        user_id: str,
        include_history: Annotated[bool, Field(description="also the triples that no longer hold")] = False,
    ) -> list[TripleResult]:
        """The user's knowledge triples that hold now, oldest first; with
        ``include_history``, the superseded ones too."""
        user = self.check_user(user_id)
        if not isinstance(include_history, bool):
            raise ValueError(f"include_history must be true or false, got {include_history!r}")
        return [
            TripleResult(
                id=t.id,
                subject=t.subject,
                predicate=t.predicate,
                object=t.object,
                current=t.current,
                valid_from=_iso(t.valid_from),
                valid_to=_iso(t.valid_to),
                mentions=t.mentions,
            )
            for t in self.admin.triples(user, include_history=include_history)
        ]

    def recent_memories(
        self,
        user_id: str,
        limit: Annotated[int, Field(description=f"how many records at most (1-{MAX_RESULTS})")] = DEFAULT_RECENT,
    ) -> list[RecordResult]:
        """The user's latest long-term records, newest first."""
        from .memory_admin import UnknownUserError

        user = self.check_user(user_id)
        _count(limit, "limit")
        try:
            records = self.admin.records(user, limit=limit, newest_first=True)
        except UnknownUserError:
            return []  # nothing stored of them yet
        return [_record(r) for r in records]

    def delete_memory(
        self,
        user_id: str,
        record_id: Annotated[str, Field(description="the id of the record or triple to delete")],
    ) -> DeletedResult:
        """Delete one of the user's records or triples from every index."""
        user = self._check_delete(user_id, "delete_memory")
        if not isinstance(record_id, str) or not record_id.strip():
            raise ValueError(f"record_id must be a record's id (from search_memory), got {record_id!r}")
        source = self.admin.delete_record(user, record_id)
        return DeletedResult(user_id=user, deleted=record_id, source=source)

    def forget_user(self, user_id: str) -> ForgottenResult:
        """Delete everything remembered of the user, for good."""
        user = self._check_delete(user_id, "forget_user")
        self._writers.pop(user, None)  # its window holds what is being forgotten
        self.admin.forget(user)
        return ForgottenResult(forgotten=user)

    def _check_delete(self, user_id: str, tool: str) -> str:
        if not self.allow_delete:
            raise PermissionError(
                f"{tool} is turned off: this server was started without --allow-delete"
            )
        return self.check_user(user_id)


# --------------------------------------------------------------------------- the server

#: The tools every server offers: (MemoryTools method and tool name, what the tool tells
#: the agent, whether it only reads).
TOOLS: tuple[tuple[str, str, bool], ...] = (
    (
        "search_memory",
        "Search the user's long-term memory (past conversations, facts learnt, session "
        "summaries) for `query`. Returns up to `k` records, best first, each with its id, "
        "text, source, session, date (when it happened, UTC) and relevance (0..1, the "
        "estimated chance it answers the query).",
        True,
    ),
    (
        "add_memory",
        "Remember something about or for the user: a statement they want kept, e.g. "
        "'I prefer dark mode in every editor'. It is stored as a message of the user and "
        "found by later searches. Returns the ids of the records written.",
        False,
    ),
    (
        "read_profile",
        "Read the user's profile: the fields known about them (name, preferences...), as JSON.",
        True,
    ),
    (
        "read_triples",
        "Read the knowledge triples known about the user (subject, predicate, object) that "
        "hold now; with include_history, also the ones that were superseded, with the dates "
        "each held.",
        True,
    ),
    (
        "recent_memories",
        "List the user's latest long-term records, newest first, with their ids, sources and dates.",
        True,
    ),
)
#: The tools a server offers only when started with ``allow_delete``.
DELETE_TOOLS: tuple[tuple[str, str, bool], ...] = (
    (
        "delete_memory",
        "Delete one record or knowledge triple of the user by its id (from search_memory, "
        "recent_memories or read_triples), from every index. Cannot be undone.",
        False,
    ),
    (
        "forget_user",
        "Delete everything remembered of the user: conversations, records, profile, triples. "
        "Cannot be undone; only when the user asks for it.",
        False,
    ),
)


def _import_sdk() -> Any:
    """The SDK's ``MCPServer`` class; :class:`MCPUnavailableError` saying how to install it."""
    try:
        from mcp.server.mcpserver import MCPServer
    except ImportError as exc:
        raise MCPUnavailableError(
            "the MCP server needs the MCP Python SDK, which is not installed: "
            f'pip install "llama-memory[mcp]" ({exc})'
        ) from None
    return MCPServer


def build_server(
    tools: MemoryTools,
    executor: Optional[ThreadPoolExecutor] = None,
    warm_up: Optional[Callable[[], Any]] = None,
) -> Any:
    """An ``MCPServer`` (of the MCP Python SDK) offering ``tools``' operations.

    With one user the tools take no ``user_id``; with an allow-list each takes one
    (``user_id``, first). Every call runs on ``executor`` (default: a new one-thread
    pool), so the store is used by one thread at a time. Errors of the library and of
    bad arguments come back as tool errors carrying their message. ``warm_up`` runs
    on the executor when a session starts, before its first call (load the model).
    """
    mcp_server_class = _import_sdk()
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.types import ToolAnnotations

    from .. import __version__

    pool = executor or ThreadPoolExecutor(max_workers=1, thread_name_prefix="llama-memory-mcp")
    one_user = len(tools.users) == 1
    who = (
        f"the user {tools.users[0]!r}" if one_user
        else "the users " + ", ".join(map(repr, tools.users)) + " (pass user_id)"
    )  # fmt: skip
    server = mcp_server_class(
        "llama-memory",
        version=__version__,
        lifespan=None if warm_up is None else (lambda _: _warm(pool, warm_up)),
        instructions=(
            f"Long-term memory of {who}: search it before answering questions about the "
            "user's past, preferences or facts; add what the user asks you to remember."
        ),
    )

    async def run(call: Callable[[], T]) -> T:
        try:
            return await asyncio.get_running_loop().run_in_executor(pool, call)
        except (LlamaMemoryError, ValueError, KeyError, TypeError, PermissionError, OSError) as exc:
            message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
            raise ToolError(str(message)) from exc

    offered = TOOLS + (DELETE_TOOLS if tools.allow_delete else ())
    for name, description, read_only in offered:
        server.add_tool(
            _tool_function(getattr(tools, name), run, one_user, tools.users),
            name=name,
            description=description,
            annotations=ToolAnnotations(
                read_only_hint=read_only,
                destructive_hint=name in {n for n, _, _ in DELETE_TOOLS},
                idempotent_hint=read_only,
                open_world_hint=False,
            ),
        )
    return server


def _tool_function(
    method: Callable[..., T],
    run: Callable[[Callable[[], T]], Awaitable[T]],
    one_user: bool,
    users: Sequence[str],
) -> Callable[..., Awaitable[T]]:
    """An async tool for ``method``, whose signature (the tool's input schema) is the
    method's without ``user_id`` when the server serves one user."""
    signature = inspect.signature(method, eval_str=True)
    params = [p for p in signature.parameters.values() if p.name != "user_id"]
    if not one_user:
        described = Annotated[str, Field(description="whose memory: one of " + ", ".join(users))]
        params.insert(0, inspect.Parameter("user_id", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=described))

    async def tool(**arguments: Any) -> T:
        user = users[0] if one_user else arguments.pop("user_id")
        return await run(lambda: method(user, **arguments))

    tool.__name__ = method.__name__
    tool.__doc__ = method.__doc__
    tool.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    return tool


@contextlib.asynccontextmanager
async def _warm(pool: ThreadPoolExecutor, warm_up: Callable[[], Any]) -> AsyncIterator[None]:
    """Run ``warm_up`` while the client initialises, on the thread every call runs on."""
    try:
        await asyncio.get_running_loop().run_in_executor(pool, warm_up)
    except LlamaMemoryError as exc:  # the tools report it again, call by call
        logger.error("llama-memory: %s", exc)
    yield None


def _open_sources(admin: MemoryAdmin, embed_model: BaseEmbedding) -> None:
    """Open the store's sources and load the offline model (an API model is not called),
    so that the first search does not pay for them."""
    from ..embeddings.offline import OfflineEmbedding

    admin.vector_source  # noqa: B018 (opened on first use)
    if isinstance(embed_model, OfflineEmbedding):
        embed_model.load()


def serve(
    store: Union[str, Path],
    users: Sequence[str],
    *,
    tenant_id: str = "default",
    allow_delete: bool = False,
    http: bool = False,
    port: int = DEFAULT_PORT,
    session_id: str = DEFAULT_SESSION,
    create: bool = False,
    **admin_options: Any,
) -> None:
    """Serve the memory of ``users`` on ``store`` over MCP until the client goes away
    (stdio) or the process is stopped (``http``).

    Args:
        store: the memory directory (``path=`` of ``from_defaults``) or a
            ``postgresql://`` URL.
        users: the user served, or the allow-list of users (then the tools take a
            ``user_id``).
        tenant_id: the tenant.
        allow_delete: offer ``delete_memory`` and ``forget_user``.
        http: streamable HTTP on ``127.0.0.1:port`` (path ``/mcp``) instead of stdio.
        port: the HTTP port.
        session_id: the session added memories are written to.
        create: create the store when ``store`` holds none (else an error).
        **admin_options: passed to :class:`MemoryAdmin` (``embed_model``, ``chroma_url``...).
    """
    _import_sdk()  # before the store is opened: a missing extra fails at once
    allowed = _allowed_users(users)
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ValueError(f"port must be a whole number from 1 to 65535, got {port!r}")
    from ..memory.wiring import resolve_embed_model
    from .memory_admin import MemoryAdmin, StoreNotFoundError

    embed_model = resolve_embed_model(admin_options.pop("embed_model", None))
    try:
        admin = MemoryAdmin(store, tenant_id, create=create, embed_model=embed_model, **admin_options)
    except StoreNotFoundError as exc:
        raise StoreNotFoundError(f"{exc}; or let the server create it: --create (create=True)") from None
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llama-memory-mcp")
    previous = _interrupt_on_sigterm()
    try:
        tools = MemoryTools(admin, allowed, allow_delete=allow_delete, session_id=session_id)
        server = build_server(tools, pool, lambda: _open_sources(admin, embed_model))
        if http:
            print(
                f"llama-memory: serving {len(allowed)} user(s) of {admin.location} over MCP at "
                f"http://{LOOPBACK}:{port}{HTTP_PATH}",
                file=sys.stderr,
            )
            server.run("streamable-http", host=LOOPBACK, port=port, streamable_http_path=HTTP_PATH)
        else:
            server.run("stdio")
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        pool.submit(admin.close).result()  # on the thread that used the store
        pool.shutdown()


def _interrupt_on_sigterm() -> Any:
    """Make SIGTERM (a service manager or an MCP client stopping the server) end it as
    Ctrl-C does, so the store is closed on the way out (waiting vectors written) instead
    of the process dying at once; the previous handler, or None off the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    return signal.signal(signal.SIGTERM, interrupt)
