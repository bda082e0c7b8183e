"""The argument parser of ``llama-memory``: every command, its options and help."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Callable, Optional

from ...memory import DEFAULT_MEMORY_TOKEN_LIMIT, DEFAULT_TOP_K
from .import_export import cmd_export, cmd_import
from .inspection import (
    cmd_delete,
    cmd_explain,
    cmd_forget,
    cmd_records,
    cmd_search,
    cmd_sessions,
    cmd_show,
    cmd_users,
)
from .jobs import cmd_jobs, cmd_worker
from .maintenance import cmd_purge_expired, cmd_reconcile, cmd_reindex, cmd_stats
from .programs import cmd_demo, cmd_mcp
from .stores import cmd_copy, cmd_encrypt
from .suggesting import SuggestingParser

DESCRIPTION = """\
See and manage what a llama-memory store remembers.

Every command but `demo`, `copy` and `encrypt` works on a memory directory (--store, the path=
given to ComposableMemory.from_defaults) or a PostgreSQL store (--store
postgresql://..., the store= of from_defaults) and one tenant (--tenant, default
"default").
--json prints JSON for scripts. A mistyped --store is an error: only `import`
creates a store (owner-only). An encrypted store is opened with the key in
LLAMA_MEMORY_ENCRYPTION_KEY.
"""

EPILOG = """\
examples:
  llama-memory users --store ./memory
  llama-memory show alice --store ./memory
  llama-memory search alice "where do I live?" --store ./memory
  llama-memory explain alice "where do I live?" --store ./memory
  llama-memory export --all -o backup.jsonl --store ./memory
  llama-memory import backup.jsonl --store ./other-memory
  llama-memory import chat_store.json --store ./memory     (a SimpleChatStore file)
  llama-memory stats --store postgresql://app@db:5432/memory
  llama-memory copy --from ./memory --to postgresql://app@db:5432/memory
  LLAMA_MEMORY_ENCRYPTION_KEY=... llama-memory encrypt --store ./memory
  llama-memory mcp --store ./memory --user alice      (an MCP server over stdio)
"""


def _whole_number(least: int, what: str) -> Callable[[str], int]:
    """An argparse type: a whole number of at least ``least`` (``what`` names it in errors)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = least - 1
        if value < least:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return value

    return parse


def _a_name(text: str) -> str:
    """An argparse type: a non-blank name (``--tenant "$TENANT"`` with the variable unset
    must not fall back to the default tenant)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected a tenant name, got {text!r} (leave --tenant out for the default)")
    return text


_positive = _whole_number(1, "a positive whole number")
_non_negative = _whole_number(0, "a whole number (0 or more)")


def build_parser() -> SuggestingParser:
    """The argument parser of ``llama-memory`` (every command and option)."""
    from ... import __version__

    parser = SuggestingParser(
        prog="llama-memory", description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"llama-memory {__version__}")
    # Options of every command that opens a store (the parents copy them: added first).
    options = SuggestingParser(add_help=False)
    options.add_argument(
        "--chroma-url", metavar="URL",
        help="server mode: the Chroma server holding the store's vectors (http://host:port)",
    )  # fmt: skip
    options.add_argument(
        "--embed-model", metavar="MODULE:NAME",
        help="the embedding model the store was built with, if not the offline default: "
        "a BaseEmbedding object (or a function returning one) importable as MODULE:NAME",
    )  # fmt: skip
    options.add_argument("--json", action="store_true", help="print JSON, for scripts")
    options.add_argument(
        "--no-owner-only", action="store_true",
        help="leave the modes of the files this command creates (a store, an export) to the "
        "umask, and do not warn about a store other accounts can read (default: owner-only)",
    )  # fmt: skip
    store = SuggestingParser(add_help=False, parents=[options])
    store.add_argument(
        "--store", required=True, metavar="PATH|URL",
        help="the memory directory (path= of ComposableMemory.from_defaults), or a "
        "postgresql:// URL (store= of from_defaults)",
    )  # fmt: skip
    store.add_argument(
        "--tenant", default=None, type=_a_name,
        help='the tenant (default "default"; for import, the tenant the export was taken from)',
    )  # fmt: skip
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(
        name: str, run: Callable[[argparse.Namespace], Optional[int]], help: str, *positional: str
    ) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, parents=[store], help=help, description=help)
        sub.set_defaults(run=run, command_parser=sub)
        for argument in positional:
            sub.add_argument(argument)
        return sub

    add("users", cmd_users, "list the users of the tenant, with what is stored of each")
    add("sessions", cmd_sessions, "list a user's conversations", "user")
    show = add("show", cmd_show, "a user's profile, current triples, instructions, recent records and counts", "user")
    show.add_argument("--recent", type=_positive, default=10, help="records shown (default 10)")
    records = add("records", cmd_records, "list a user's long-term records, with filters", "user")
    records.add_argument("--session", help="only this session's")
    records.add_argument("--source", help='only this source\'s (e.g. "vector")')
    records.add_argument("--since", help="only from this time (ISO 8601 or epoch seconds)")
    records.add_argument("--until", help="only before this time (ISO 8601 or epoch seconds)")
    records.add_argument("--limit", type=_positive, help="at most this many")
    search = add("search", cmd_search, "search a user's long-term memory (scores, sources, provenance)", "user", "query")
    search.add_argument(
        "-k", "--top-k", dest="k", type=_positive, default=DEFAULT_TOP_K, help=f"how many records (default {DEFAULT_TOP_K})"
    )
    explain = add(
        "explain", cmd_explain,
        "the memory block get() would inject for a query, with what was left out and why", "user", "query",
    )  # fmt: skip
    explain.add_argument("--session", help="as in this conversation (its window counts for deduplication)")
    add_setting(explain, "--top-k", "top_k", f"records per source (default {DEFAULT_TOP_K}, as from_defaults)")
    add_setting(
        explain, "--token-limit", "memory_token_limit", f"the block's token budget (default {DEFAULT_MEMORY_TOKEN_LIMIT})"
    )
    delete = add("delete", cmd_delete, "delete one record or triple of a user, from every index", "user")
    delete.add_argument("record_id", metavar="RECORD_ID")
    export = add("export", cmd_export, "export a user (or --all) to a JSON Lines file")
    export.add_argument("user", nargs="?")
    export.add_argument("--all", action="store_true", help="every user of the tenant")
    export.add_argument("-o", "--output", help="the file to write (default: standard output)")
    imp = add(
        "import", cmd_import,
        "import an export, or a LlamaIndex SimpleChatStore JSON file (idempotent)",
    )  # fmt: skip
    imp.add_argument("file", help="the file to import, or - to read it from standard input")
    imp.add_argument(
        "--user",
        help="SimpleChatStore files: make every chat-store key a session of this user "
        "(default: each key is a user, with one session of the same name)",
    )
    add("forget", cmd_forget, "delete everything remembered of a user", "user").add_argument(
        "--yes", action="store_true", help="confirm"
    )
    add("reindex", cmd_reindex, "rebuild the dense indexes from the system of record").add_argument(
        "--reembed", action="store_true",
        help="embed every record and triple again: with --embed-model, the store switches to that "
        "model; without it, with the model the store recorded (refused when that is not the offline default)",
    )  # fmt: skip
    add("reconcile", cmd_reconcile, "bring the dense indexes in line with the system of record")
    add("purge-expired", cmd_purge_expired, "delete the records whose time to live is over")
    add("stats", cmd_stats, "counts, sizes on disk, pending index work, and extraction passes and tokens per user and day")
    worker = add("worker", cmd_worker, "run the extraction passes queued in the store (extract_every)")
    worker.add_argument(
        "--llm", required=True, metavar="MODULE:NAME",
        help="the LLM to extract with: a LlamaIndex LLM (or a function returning one) "
        "importable as MODULE:NAME",
    )  # fmt: skip
    worker.add_argument(
        "--once", action="store_true",
        help="run the jobs due now, then exit (status 1 when one of them failed)",
    )  # fmt: skip
    worker.add_argument(
        "--token-budget", type=_non_negative, default=None, metavar="TOKENS",
        help="LLM tokens a user's passes may use per day (UTC); passes past it wait for the next "
        "day (default: the budget of the memory that queued them, formation_token_budget=; 0: none)",
    )  # fmt: skip
    worker.add_argument(
        "--lease", type=float, default=300.0,
        help="seconds a job is held before another worker may take it over (default 300)",
    )  # fmt: skip
    jobs = add(
        "jobs", cmd_jobs,
        "list the failed extraction jobs (dead, or waiting for a retry) with their last error; "
        "`jobs retry ID` or `jobs retry --all-dead` queues them again",
    )  # fmt: skip
    jobs.add_argument("action", nargs="?", choices=["list", "retry"], default="list", help="default list")
    jobs.add_argument("job_id", nargs="?", metavar="ID", help="retry: the job to queue again")
    jobs.add_argument("--all", action="store_true", help="list every job, not only the failed ones")
    jobs.add_argument("--all-dead", action="store_true", help="retry: every dead job of the tenant")
    mcp = add("mcp", cmd_mcp, "serve a user's memory to MCP clients (stdio; --http for loopback HTTP)")
    mcp.add_argument(
        "--user", action="append", metavar="ID",
        help="the user served; repeat it for an allow-list (the tools then take a user_id)",
    )  # fmt: skip
    mcp.add_argument("--users", metavar="A,B", help="an allow-list of users, comma-separated")
    mcp.add_argument(
        "--allow-delete", action="store_true",
        help="offer the delete_memory and forget_user tools (off by default)",
    )  # fmt: skip
    mcp.add_argument("--http", action="store_true", help="streamable HTTP on 127.0.0.1 instead of stdio")
    mcp.add_argument("--port", type=_positive, default=None, help="the --http port (default 8000)")
    mcp.add_argument("--session", default="mcp", help='the session added memories go to (default "mcp")')
    mcp.add_argument("--create", action="store_true", help="create the store when --store holds none")
    mcp.add_argument(
        "--log-level", default="WARNING", type=str.upper, choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        help="what is logged on stderr (default WARNING; INFO also logs each call)",
    )  # fmt: skip
    copy = commands.add_parser(
        "copy", parents=[options], help="copy a SQLite memory directory into PostgreSQL",
        description="Copy every user of a SQLite memory directory (chat logs, records, profile, "
        "triples, extraction cursors, waiting jobs) into a PostgreSQL store, one transaction per "
        "user, then embed the records and triples into pgvector. Refuses when the database "
        "already holds some of the users (see --skip-existing).",
    )  # fmt: skip
    copy.add_argument("--from", dest="source", required=True, metavar="PATH", help="the memory directory")
    copy.add_argument("--to", dest="target", required=True, metavar="URL", help="postgresql://user@host:5432/dbname")
    copy.add_argument("--tenant", default=None, type=_a_name, help="copy this tenant only (default: every tenant)")
    copy.add_argument(
        "--skip-existing", action="store_true",
        help="leave out users the database already holds (resume a copy that stopped)",
    )  # fmt: skip
    copy.set_defaults(run=cmd_copy, command_parser=copy)
    encrypt = commands.add_parser(
        "encrypt", help="encrypt a SQLite memory directory's store at rest (SQLCipher)",
        description="Encrypt the SQLite store of a memory directory with the key in "
        "LLAMA_MEMORY_ENCRYPTION_KEY (asked for on a terminal when unset): the store is copied "
        "into an encrypted file, the copy checked row by row, then swapped in and checked again; "
        "the plain file is removed only after that (--keep-backup keeps it). Stop the processes "
        "using the store first. The Chroma index (vectors) stays unencrypted. Needs "
        "llama-index-memory-composable[encrypted].",
    )  # fmt: skip
    encrypt.add_argument("--store", required=True, metavar="PATH", help="the memory directory")
    encrypt.add_argument(
        "--keep-backup", action="store_true",
        help="keep the plain file as memory.sqlite3.plain-backup (it is not encrypted)",
    )  # fmt: skip
    encrypt.add_argument("--json", action="store_true", help="print JSON, for scripts")
    encrypt.set_defaults(run=cmd_encrypt, command_parser=encrypt)
    demo = commands.add_parser("demo", help="run the offline two-conversation demo")
    demo.add_argument("--path", type=Path, default=None, help="memory directory (default: a new temporary one)")
    demo.set_defaults(run=cmd_demo, command_parser=demo)
    return parser


def add_setting(parser: argparse.ArgumentParser, flag: str, setting: str, help: str) -> None:
    """An argument setting an option of the memories the command builds (stored as
    ``setting.<name>``; unset: the option's default)."""
    metavar = flag.lstrip("-").upper().replace("-", "_")
    parser.add_argument(flag, type=_positive, dest=f"setting.{setting}", metavar=metavar, help=help)
