"""A Model Context Protocol server over a memory store: ``llama-memory mcp``.

Agents outside LlamaIndex search, add to and read a user's memory through MCP tools
(:mod:`.mcp_tools`), delete only with ``allow_delete``; every tool goes through
:class:`~llama_memory.admin.memory_admin.MemoryAdmin`. A server serves one user (tools
take no ``user_id``) or an allow-list (each tool takes one), and opens the store once.
The MCP SDK (the ``mcp`` extra) is imported only when a server is built.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import signal
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Optional, TypeVar, Union

from pydantic import Field

from ..core.distribution import install_hint
from ..core.errors import LlamaMemoryError
from ..core.text import listed
from .mcp_arguments import argument_problem, unknown_tool
from .mcp_results import (
    MAX_TEXT_CHARS,
    AddedResult,
    DeletedResult,
    ForgottenResult,
    ProfileResult,
    RecordResult,
    TripleResult,
)
from .mcp_tools import DEFAULT_SESSION, DELETE_TOOLS, TOOLS, MemoryTools, Text, allowed_users

if TYPE_CHECKING:
    from llama_index.core.base.embeddings.base import BaseEmbedding

    from .memory_admin import MemoryAdmin

__all__ = [
    "AddedResult", "DeletedResult", "ForgottenResult", "DEFAULT_LOG_LEVEL", "DEFAULT_PORT", "MAX_TEXT_CHARS",
    "MCPUnavailableError", "ProfileResult", "RecordResult", "TripleResult", "build_server", "serve",
]

logger = logging.getLogger(__name__)

#: The port ``--http`` listens on by default (on 127.0.0.1).
DEFAULT_PORT = 8000
#: Where the streamable HTTP transport answers.
HTTP_PATH = "/mcp"
#: The only address ``--http`` binds: the server has no authentication of its own.
LOOPBACK = "127.0.0.1"
LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]
#: What the server logs by default: warnings and errors (a refused call is the agent's
#: to read, not the operator's); ``"INFO"`` also logs each call the SDK handles.
DEFAULT_LOG_LEVEL: LogLevel = "WARNING"
#: The levels ``log_level`` takes.
LOG_LEVELS: tuple[str, ...] = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
T = TypeVar("T")


class MCPUnavailableError(LlamaMemoryError, ImportError):
    """The MCP Python SDK is not installed (it comes with the ``mcp`` extra)."""


def _import_sdk() -> Any:
    """The SDK's ``MCPServer`` class; :class:`MCPUnavailableError` saying how to install it."""
    try:
        from mcp.server.mcpserver import MCPServer
    except ImportError as exc:
        raise MCPUnavailableError(
            "the MCP server needs the MCP Python SDK, which is not installed: "
            f'{install_hint("mcp")} ({exc})'
        ) from None
    return MCPServer


def build_server(
    tools: MemoryTools, executor: Optional[ThreadPoolExecutor] = None, warm_up: Optional[Callable[[], Any]] = None,
    log_level: LogLevel = DEFAULT_LOG_LEVEL,
) -> Any:  # fmt: skip
    """An ``MCPServer`` offering ``tools``' operations: with one user the tools take no
    ``user_id`` (a call passing one is refused), with an allow-list each takes one first.
    Arguments are checked strictly against the input schema
    (:func:`~llama_memory.admin.mcp_arguments.argument_problem`) and calls run on
    ``executor`` (default a one-thread pool); errors come back as tool errors carrying
    their message alone. ``warm_up`` runs when a session starts; ``log_level``: the
    SDK's logging.
    """
    mcp_server_class = _import_sdk()
    from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
    from mcp.server.mcpserver.tools.base import Tool
    from mcp.types import CallToolResult, TextContent, ToolAnnotations
    from pydantic import ValidationError

    from .. import __version__

    pool = executor or ThreadPoolExecutor(max_workers=1, thread_name_prefix="llama-memory-mcp")
    one_user = len(tools.users) == 1
    who = (
        f"the user {tools.users[0]!r}" if one_user
        else "the users " + ", ".join(map(repr, tools.users)) + " (pass user_id)"
    )  # fmt: skip
    # A server of one user refuses a user_id: an agent that names a user must not
    # believe it reached that user's memory.
    refused = (
        {"user_id": "this server serves one user's memory, so its tools take no user_id: call it again without user_id."}
        if one_user else {}
    )  # fmt: skip

    async def run(call: Callable[[], T]) -> T:
        try:
            return await asyncio.get_running_loop().run_in_executor(pool, call)
        except (LlamaMemoryError, ValueError, KeyError, TypeError, PermissionError, OSError) as exc:
            message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
            raise ToolError(str(message)) from exc

    delete_names = {n for n, _, _ in DELETE_TOOLS}
    offered = TOOLS + (DELETE_TOOLS if tools.allow_delete else ())
    registered = [
        Tool.from_function(
            _tool_function(getattr(tools, name), run, one_user, tools.users),
            name=name, description=description,
            annotations=ToolAnnotations(
                read_only_hint=read_only, destructive_hint=name in delete_names,
                idempotent_hint=read_only, open_world_hint=False,
            ),
        )  # fmt: skip
        for name, description, read_only in offered
    ]
    schemas = {tool.name: tool.parameters for tool in registered}

    class MemoryServer(mcp_server_class):  # type: ignore[misc, valid-type]
        """The SDK's server, whose calls are checked first and whose errors are the
        tools' messages alone (no "Error executing tool" prefix, no pydantic dump)."""

        async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
            schema = schemas.get(name)
            if schema is None and name in delete_names:  # not offered: say why
                raise ToolError(f"{name} is turned off: this server was started without --allow-delete.")
            if schema is None:  # the SDK's "Unknown tool: x" names none to call instead
                raise ToolError(unknown_tool(name, list(schemas)))
            problem = argument_problem(name, schema, arguments, refused)
            if problem is not None:
                raise ToolError(problem)
            try:
                result = await super().call_tool(name, arguments, context)
            except ToolError as exc:
                cause = exc.__cause__
                if isinstance(exc, UnexpectedToolError) or cause is None:
                    raise
                if isinstance(cause, ValidationError):  # what the check above let through
                    raise ToolError(_validation_message(cause)) from cause
                raise ToolError(str(cause)) from cause
            # The SDK gives an empty list no text at all: an agent reading the text would
            # see no answer rather than "nothing found". Said as the JSON it is.
            if isinstance(result, CallToolResult) and not result.content and not result.is_error:
                result.content = [TextContent(type="text", text="[]")]
            return result

    return MemoryServer(
        "llama-memory", version=__version__, tools=registered, log_level=log_level,
        lifespan=None if warm_up is None else (lambda _: _warm(pool, warm_up)),
        instructions=(
            f"Long-term memory of {who}: search it before answering questions about the "
            "user's past, preferences or facts; add what the user asks you to remember."
        ),
    )  # fmt: skip


def _validation_message(error: Any) -> str:
    """A pydantic ValidationError as one line naming each argument, without its dump."""
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'the arguments'}: {e['msg']}" for e in error.errors()) + "."


def _tool_function(
    method: Callable[..., T], run: Callable[[Callable[[], T]], Awaitable[T]], one_user: bool, users: Sequence[str]
) -> Callable[..., Awaitable[T]]:
    """An async tool for ``method``, whose signature (the tool's input schema) is the
    method's without ``user_id`` when the server serves one user."""
    signature = inspect.signature(method, eval_str=True)
    params = [p for p in signature.parameters.values() if p.name != "user_id"]
    if not one_user:
        described = Annotated[Text, Field(description="whose memory: one of " + ", ".join(users))]
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
    log_level: LogLevel = DEFAULT_LOG_LEVEL,
    **admin_options: Any,
) -> None:
    """Serve the memory of ``users`` on ``store`` over MCP until the client goes away
    (stdio) or the process is stopped (``http``); the store is opened once. Over stdio on
    the main thread, Ctrl-C (SIGINT) or SIGTERM closes the store and ends the process
    (status 130 or 0) at once.

    Args:
        store: the memory directory or a ``postgresql://`` URL.
        users: the user served, or the allow-list (then the tools take a ``user_id``).
        tenant_id: the tenant.
        allow_delete: offer ``delete_memory`` and ``forget_user``.
        http: streamable HTTP on ``127.0.0.1:port`` (path ``/mcp``) instead of stdio.
        port: the HTTP port.
        session_id: the session added memories are written to.
        create: create the store when ``store`` holds none (else an error).
        log_level: what is logged on stderr, one line per record (default warnings).
        **admin_options: passed to :class:`MemoryAdmin` (``embed_model``, ``chroma_url``...).
    """
    _import_sdk()  # before the store is opened: a missing extra fails at once
    allowed = allowed_users(users)
    if log_level not in LOG_LEVELS:
        raise ValueError(f"log_level must be one of {', '.join(LOG_LEVELS)}, got {log_level!r}")
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
    previous = _stop_on_signals(None if http else lambda: pool.submit(admin.close).result())
    try:
        tools = MemoryTools(admin, allowed, allow_delete=allow_delete, session_id=session_id)
        _log_in_lines(log_level)
        _warn_of_new_users(admin, allowed)
        server = build_server(tools, pool, lambda: _open_sources(admin, embed_model), log_level)
        if http:
            print(
                f"llama-memory: serving {len(allowed)} user(s) of {admin.location} over MCP at "
                f"http://{LOOPBACK}:{port}{HTTP_PATH}", file=sys.stderr,
            )  # fmt: skip
            server.run("streamable-http", host=LOOPBACK, port=port, streamable_http_path=HTTP_PATH)
        else:
            if _on_a_terminal():  # someone trying it by hand: say why nothing happens
                print(
                    f"llama-memory: serving {len(allowed)} user(s) of {admin.location} over MCP on stdin "
                    "and stdout, for an MCP client that starts this command (a desktop assistant, an "
                    "IDE); on a terminal it waits for the client's messages. Ctrl-D (end of input) "
                    "stops it, as does Ctrl-C; --http serves at a URL instead", file=sys.stderr,
                )  # fmt: skip
            server.run("stdio")
    finally:
        for signum, handler in (previous or {}).items():
            signal.signal(signum, handler)
        pool.submit(admin.close).result()  # on the thread that used the store
        pool.shutdown()


def _warn_of_new_users(admin: MemoryAdmin, users: Sequence[str]) -> None:
    """Warn of each served user the store holds nothing of, when it holds others: a
    mistyped ``--user`` would otherwise serve an empty memory in silence."""
    known = [summary.user_id for summary in admin.users()]
    new = [user for user in users if user not in known]
    if known and new:
        shown = listed([repr(u) for u in known])
        logger.warning(
            "the store %s holds nothing of %s in tenant %r yet (its users: %s): the server "
            "starts %s memory from nothing; if that is a typo, restart it with the id as the store has it",
            admin.location, ", ".join(map(repr, new)), admin.tenant_id, shown,
            "this user's" if len(new) == 1 else "these users'",
        )  # fmt: skip


def _on_a_terminal() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (ValueError, OSError):  # closed or detached
        return False


def _log_in_lines(level: LogLevel) -> None:
    """Log on stderr at ``level``, one plain line per record, unless logging is
    configured already (the SDK's handler wraps records over several lines)."""
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("llama-memory mcp: %(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
        root.setLevel(level)


def _stop_on_signals(close: Optional[Callable[[], None]]) -> Optional[dict[int, Any]]:
    """With ``close`` (stdio): make Ctrl-C (SIGINT, status 130) and SIGTERM (status 0)
    ``close`` the store and end the server at once (the SDK reads stdin in a thread no
    KeyboardInterrupt reaches). Without (HTTP): make SIGTERM interrupt as Ctrl-C does, so
    the store is closed. Return the previous handlers, or None off the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def stop(signum: int, frame: Any) -> None:
        if close is None:
            raise KeyboardInterrupt
        for each in (signal.SIGINT, signal.SIGTERM):  # a second Ctrl-C must not cut the close short
            signal.signal(each, signal.SIG_IGN)
        close()  # on the store's thread, after the call it may be running
        how = "Ctrl-C (SIGINT)" if signum == signal.SIGINT else "SIGTERM"
        print(f"llama-memory mcp: stopped by {how}; the store is closed", file=sys.stderr, flush=True)
        os._exit(130 if signum == signal.SIGINT else 0)

    signums = (signal.SIGTERM,) if close is None else (signal.SIGINT, signal.SIGTERM)
    return {signum: signal.signal(signum, stop) for signum in signums}
