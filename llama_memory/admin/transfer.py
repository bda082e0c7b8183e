"""Export and import of one tenant of a memory store: :class:`TenantTransfer`, a base of
:class:`~llama_memory.admin.memory_admin.MemoryAdmin`. The export is JSON Lines: a header
row (``format``, ``version``, ``tenant``, ``users``) then one row per message, record,
document row and triple; LlamaIndex ``SimpleChatStore`` files import too. Importing the
same data again adds nothing."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import islice
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Optional, Union

from ..core.text import replace_unstorable
from ..storage.privacy import open_private
from ..storage.sql.admin import AdminRows, MessageRanks

if TYPE_CHECKING:
    from ..core.progress import Progress
    from ..memory.composable import ComposableMemory
    from ..sources.profile import ProfileSource
    from ..sources.triples import TripleSource
    from ..storage.backend import OpenBackend
    from ..storage.ports import UserSummary

__all__ = ["TenantTransfer"]


#: The ``format`` field of an export's header line.
EXPORT_FORMAT = "llama-memory-export"
#: The export format's version; an import refuses a newer one.
EXPORT_VERSION = 2  # 2: "instruction" rows (procedural memory); version 1 files still import
#: Rows written to the store per transaction during an import.
IMPORT_BATCH = 500


class ImportCounts(Counter[str]):
    """How many rows of each kind an import added (a ``Counter``), and :attr:`replaced`:
    per user, how many characters no store can hold (NUL, lone surrogates) were replaced
    by U+FFFD."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: Characters replaced by U+FFFD, by user.
        self.replaced: Counter[str] = Counter()


def check_header(header: Any) -> None:
    """Refuse what is not an export's header, or one of a newer format version."""
    if not isinstance(header, Mapping) or header.get("format") != EXPORT_FORMAT:
        raise ValueError(
            f"not a llama-memory export: its first row must be the header "
            f"{{'format': {EXPORT_FORMAT!r}, 'version': ...}}, got {header!r:.200}"
        )
    version = header.get("version")
    if not isinstance(version, int) or version > EXPORT_VERSION or version < 1:
        raise ValueError(
            f"export format version {version!r} is not supported by this llama-memory "
            f"(it reads versions 1 to {EXPORT_VERSION}): upgrade llama-memory"
        )


# A profile and an instruction row are alike: a field's value, with its history.
_FIELD_ROW = ("user", "path", "value", "removed", "op", "session", "message_ids", "created_at", "superseded_at", "ttl", "expires_at")
#: The fields each kind of export row must have.
ROW_FIELDS: dict[str, tuple[str, ...]] = {
    "message": ("user", "session", "created_at", "message"),
    "record": ("user", "source", "session", "role", "text", "message_ids", "event_time",
               "ingested_at", "metadata", "ttl", "expires_at"),
    "profile": _FIELD_ROW,
    "instruction": _FIELD_ROW,
    "triple": ("user", "id", "subject", "predicate", "object", "subject_key", "predicate_key",
               "object_key", "valid_from", "valid_to", "superseded_by", "ingested_at", "ttl",
               "expires_at", "mentions"),
}  # fmt: skip


def check_row(row: dict[str, Any], line: int, replaced: Counter[str]) -> dict[str, Any]:
    """The row with every character no store can hold replaced by U+FFFD (counted under
    its user in ``replaced``: an import never stops at text an older store kept); refused
    when its kind is unknown or a field of its kind is missing (``line``: its place in the
    file, for the message)."""
    row, count = replace_unstorable(row)
    if count:
        replaced[str(row.get("user"))] += count
    kind = row.get("kind")
    if kind not in ROW_FIELDS:
        raise ValueError(f"export row {line}: unknown kind {kind!r} (expected one of {sorted(ROW_FIELDS)})")
    missing = [f for f in ROW_FIELDS[kind] if f not in row]
    if missing:
        raise ValueError(f"export row {line} ({kind}): missing fields {missing}")
    if not isinstance(row["user"], str) or not row["user"]:
        raise ValueError(f"export row {line} ({kind}): user must be a non-empty string")
    return row


def read_rows(stream: IO[str]) -> Iterator[dict[str, Any]]:
    """The rows of an export read from a text stream (blank lines skipped)."""
    for number, line in enumerate(stream, start=1):
        if not line.strip():
            continue
        try:
            yield json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"line {number} of the export is not JSON: {exc}") from None


def write_rows(stream: IO[str], rows: Iterable[dict[str, Any]], progress: Optional[Progress]) -> int:
    """Write ``rows`` (the header first) as JSON Lines; return how many after the header."""
    written = -1  # the header is not counted
    for row in rows:
        # sort_keys: one store, one file, byte for byte.
        stream.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")
        written += 1
        if progress is not None and written > 0:
            progress.advance()
    return max(written, 0)


def export_header(path: Path) -> Optional[Mapping[str, Any]]:
    """The header row of the file at ``path`` when it is an export, else None (a
    SimpleChatStore file, or anything else)."""
    with open(path, encoding="utf-8") as stream:
        first = stream.readline()
    try:
        head = json.loads(first) if first.strip() else None
    except json.JSONDecodeError:
        return None  # a pretty-printed JSON document: not JSON Lines
    return head if isinstance(head, dict) and head.get("format") == EXPORT_FORMAT else None


def _check_target(path: Path) -> None:
    """Refuse, in words, a file an export cannot be written to (not an errno)."""
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a directory: export writes one file, e.g. {path / 'export.jsonl'}")
    if not path.parent.is_dir():
        raise FileNotFoundError(f"cannot write {path}: there is no directory {path.parent} (create it first)")


class TenantTransfer:
    """Export and import of the admin's tenant (a base of
    :class:`~llama_memory.admin.memory_admin.MemoryAdmin`)."""

    if TYPE_CHECKING:  # what MemoryAdmin provides

        tenant_id: str
        owner_only: bool
        @property
        def _admin(self) -> AdminRows: ...

        @property
        def _backend(self) -> OpenBackend: ...

        @property
        def profile_source(self) -> ProfileSource: ...

        def triple_source(self, create: bool = False) -> Optional[TripleSource]: ...

        def users(self) -> list[UserSummary]: ...

        def user(self, user_id: str) -> UserSummary: ...

        def memory(self, user_id: str, session_id: Optional[str] = None) -> ComposableMemory: ...

        def flush(self, progress: Optional[Progress] = None) -> int: ...

    # -- export ---------------------------------------------------------------------------

    def export_rows(self, users: Optional[Sequence[str]] = None) -> Iterator[dict[str, Any]]:
        """The export as dicts: a header (``format``, ``version``, ``tenant``, ``users``),
        then every row of each user (all when ``users`` is None), always in the same
        order."""
        chosen = self._export_users(users)
        # No export time: the same store must give the same file (export, import, export).
        yield {"format": EXPORT_FORMAT, "version": EXPORT_VERSION, "tenant": self.tenant_id, "users": chosen}
        for user in chosen:
            yield from self._admin.export_rows(self.tenant_id, user)

    def export(
        self, to: Union[str, Path, IO[str]], users: Optional[Sequence[str]] = None, progress: Optional[Progress] = None
    ) -> int:
        """Write the export as JSON Lines (one JSON object a line, the header first) to
        a file path or a text stream; return how many rows after the header."""
        if isinstance(users, str):  # the command line's order (USER -o FILE), or one id
            known = {u.user_id for u in self.users()}
            fix = (
                f"export({users!r}, users=[{to!r}])" if isinstance(to, str) and to in known and users not in known
                else f"export({to!r}, users=[{users!r}])"
            )  # fmt: skip
            raise TypeError(f"export takes the file first, then a list of user ids, not the string {users!r}: {fix}")
        chosen = self._export_users(users)
        if progress is not None:
            progress.total = self._admin.count_export_rows(self.tenant_id, chosen)
        rows = self.export_rows(chosen)
        if isinstance(to, (str, Path)):
            _check_target(Path(to))
            # The export holds what the store does: as private as the store (0600).
            with (open_private(to) if self.owner_only else open(to, "w", encoding="utf-8")) as stream:
                return write_rows(stream, rows, progress)
        return write_rows(to, rows, progress)

    def _export_users(self, users: Optional[Sequence[str]]) -> list[str]:
        if users is None:
            return [u.user_id for u in self.users()]
        if isinstance(users, str):
            raise TypeError(f"users takes a list of user ids, not the string {users!r}")
        for user in users:
            self.user(user)
        return list(dict.fromkeys(users))

    # -- import ---------------------------------------------------------------------------

    def import_rows(
        self, rows: Iterable[Mapping[str, Any]], progress: Optional[Progress] = None, *, batch_size: int = IMPORT_BATCH
    ) -> ImportCounts:
        """Import an export (dicts as :meth:`export_rows` gives, the header first) into
        this tenant; return how many rows of each kind were new. Importing again adds
        nothing (a message is the k-th of its session with its content and time); NUL is
        replaced by U+FFFD and counted (:attr:`ImportCounts.replaced`). Rows are written
        ``batch_size`` to a transaction; records and triples are embedded before it
        returns."""
        admin_rows = self._admin
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        from pydantic import ValidationError

        from ..sources.triples.normalize import search_text

        iterator = iter(rows)
        check_header(next(iterator, None))
        added = ImportCounts()
        ranks = MessageRanks()  # over every batch: the batch size must change nothing
        line = 1
        while batch := [
            check_row(dict(row), line + i + 1, added.replaced) for i, row in enumerate(islice(iterator, batch_size))
        ]:
            line += len(batch)
            self._prepare_import({r["kind"] for r in batch})
            texts = [search_text(r["subject"], r["predicate"], r["object"]) if r["kind"] == "triple" else "" for r in batch]
            try:
                added += admin_rows.import_rows(self.tenant_id, batch, texts, ranks)
            except ValidationError as exc:
                raise ValueError(f"import: a chat message is not a valid ChatMessage: {exc}") from exc
            if progress is not None:
                progress.advance(len(batch))
        if added["record"] or added["triple"]:
            self.flush(progress and progress.child("embedding"))
        return added

    def _prepare_import(self, kinds: set[str]) -> None:
        """Open what the rows of ``kinds`` are written to (tables made on first use)."""
        if "profile" in kinds:
            self.profile_source  # noqa: B018 - creates its table
        if "instruction" in kinds:
            self._backend.profile_rows("instructions")  # creates its table where a store makes it on first use
        if "triple" in kinds:
            self.triple_source(create=True)

    def import_file(
        self, path: Union[str, Path], *, user_id: Optional[str] = None, progress: Optional[Progress] = None
    ) -> ImportCounts:
        """Import a file: an export of :meth:`export` (JSON Lines), or a LlamaIndex
        ``SimpleChatStore`` JSON file (see :meth:`import_chat_store`; ``user_id``
        applies to it only). Returns how many rows of each kind were new."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no file to import at {path}")
        if export_header(path) is not None:
            if user_id is not None:
                raise ValueError("user_id applies to SimpleChatStore files; an export keeps its users")
            if progress is not None:
                with open(path, "rb") as counted:  # the rows (non-blank lines) after the header
                    progress.total = max(0, sum(1 for line in counted if line.strip()) - 1)
            with open(path, encoding="utf-8") as stream:
                return self.import_rows(read_rows(stream), progress)
        neither = (
            f"{path} is neither a llama-memory export (JSON Lines with a header line whose "
            f"format is {EXPORT_FORMAT!r}) nor a SimpleChatStore JSON file"
        )
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{neither}: {exc}") from None
        store = data.get("store") if isinstance(data, Mapping) else None
        if not isinstance(store, Mapping):  # JSON, but of neither kind: both said
            raise ValueError(f"{neither} (a JSON object whose 'store' maps each chat-store key to its messages)")
        return self.import_chat_store(data, user_id=user_id, progress=progress)

    def import_chat_store(
        self, data: Union[Mapping[str, Any], str], *, user_id: Optional[str] = None, progress: Optional[Progress] = None
    ) -> ImportCounts:
        """Import a LlamaIndex ``SimpleChatStore`` (what ``persist()`` writes, or that as
        a JSON string): each key's messages become one session, the key being user and
        session id (with ``user_id``: sessions of that user). Messages go in as
        ``memory.put_messages`` puts them; those a session holds are skipped. Returns
        ``{"message": new messages, "session": sessions touched}``.
        """
        admin_rows = self._admin
        from llama_index.core.base.llms.types import ChatMessage
        from pydantic import ValidationError

        from ..storage.codec import dump_message, load_message

        if isinstance(data, str):
            data = json.loads(data)
        store = data.get("store") if isinstance(data, Mapping) else None
        if not isinstance(store, Mapping) or not all(isinstance(v, list) for v in store.values()):
            raise ValueError(
                "not a SimpleChatStore file: expected a JSON object with a 'store' object "
                "mapping each chat-store key to a list of messages (SimpleChatStore.persist())"
            )
        conversations: list[tuple[str, str, list[ChatMessage]]] = []
        added = ImportCounts()
        for key, messages in store.items():
            if not isinstance(key, str) or not key:
                raise ValueError(f"SimpleChatStore key {key!r} is not a non-empty string")
            parsed = []
            for position, message in enumerate(messages):
                message, replaced = replace_unstorable(message)
                added.replaced[user_id or key] += replaced
                try:
                    parsed.append(ChatMessage.model_validate(message))
                except ValidationError as exc:
                    raise ValueError(f"SimpleChatStore key {key!r}, message {position}: not a ChatMessage ({exc})") from None
            conversations.append((user_id or key, key, parsed))
        if progress is not None:
            progress.total = sum(len(m) for _, _, m in conversations)
        added.replaced = +added.replaced  # only the users with a replacement
        for user, session, messages in conversations:
            held = Counter(dump_message(load_message(m)) for m in admin_rows.chat_messages(self.tenant_id, user, session))
            new = []
            for message in messages:
                text = dump_message(message)
                if held[text] > 0:
                    held[text] -= 1
                else:
                    new.append(message)
            if new:
                self.memory(user, session).put_messages(new)
                added["message"] += len(new)
                added["session"] += 1
            if progress is not None:
                progress.advance(len(messages))
        if added["message"]:
            self.flush(progress and progress.child("embedding"))
        return added

    @property
    def rows(self) -> AdminRows:
        """The store's admin port (plain rows, any tenant): what a copy between stores
        reads and writes (:func:`llama_memory.admin.copying.copy_store`)."""
        return self._admin
