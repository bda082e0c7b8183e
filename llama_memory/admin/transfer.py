"""Export and import of one tenant of a memory store (a versioned JSON Lines export,
LlamaIndex ``SimpleChatStore`` files): :class:`TenantTransfer`, a base of
:class:`~llama_memory.admin.memory_admin.MemoryAdmin`. The file formats are
:mod:`.export_format`'s and :mod:`.importing`'s."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Optional, Union

from ..storage.privacy import open_private
from .export_format import (
    EXPORT_FORMAT,
    IMPORT_BATCH,
    ImportCounts,
    count_rows,
    export_header,
    header_row,
    read_rows,
    write_rows,
)
from .importing import import_chat_store, import_export_rows

if TYPE_CHECKING:
    from ..core.progress import Progress
    from ..memory.composable import ComposableMemory
    from ..sources.profile import ProfileSource
    from ..sources.triples import TripleSource
    from ..storage.backend import OpenBackend
    from ..storage.ports import UserSummary
    from ..storage.sql.admin import AdminRows

__all__ = ["TenantTransfer"]


class TenantTransfer:
    """Export and import of the admin's tenant (a base of
    :class:`~llama_memory.admin.memory_admin.MemoryAdmin`)."""

    if TYPE_CHECKING:  # what MemoryAdmin provides

        tenant_id: str
        owner_only: bool
        _admin: AdminRows
        _backend: OpenBackend

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
        then every row of each user (all users of the tenant when ``users`` is None).
        The same store always gives the same rows, in the same order."""
        chosen = self._export_users(users)
        yield header_row(self.tenant_id, chosen)
        for user in chosen:
            yield from self._admin.export_rows(self.tenant_id, user)

    def export(
        self, to: Union[str, Path, IO[str]], users: Optional[Sequence[str]] = None, progress: Optional[Progress] = None
    ) -> int:
        """Write the export as JSON Lines (one JSON object a line, the header first) to
        a file path or a text stream; return how many rows after the header."""
        chosen = self._export_users(users)
        if progress is not None:
            progress.total = self._admin.count_export_rows(self.tenant_id, chosen)
        rows = self.export_rows(chosen)
        if isinstance(to, (str, Path)):
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
        this tenant; return how many rows of each kind were new. A character no store
        can hold (NUL: an older store may have one) is replaced by U+FFFD and counted
        per user (:attr:`ImportCounts.replaced`). Importing the same rows
        again changes nothing; into a store that has some of them, only the rest is
        added (a message is the k-th of its session with its content and time, see
        :mod:`llama_memory.storage.chat_import`). Rows are written ``batch_size`` to a
        transaction. Records and triples are embedded before it returns."""
        return import_export_rows(
            rows, self.tenant_id, self._admin, prepare=self._prepare_import, flush=self.flush,
            progress=progress, batch_size=batch_size,
        )  # fmt: skip

    def _prepare_import(self, kinds: set[str]) -> None:
        """Open what the rows of ``kinds`` are written to: the tables a store makes on
        first use."""
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
                progress.total = max(0, count_rows(path) - 1)
            with open(path, encoding="utf-8") as stream:
                return self.import_rows(read_rows(stream), progress)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"{path} is neither a llama-memory export (JSON Lines with a header line whose "
                f"format is {EXPORT_FORMAT!r}) nor a SimpleChatStore JSON file: {exc}"
            ) from None
        return self.import_chat_store(data, user_id=user_id, progress=progress)

    def import_chat_store(
        self, data: Union[Mapping[str, Any], str], *, user_id: Optional[str] = None, progress: Optional[Progress] = None
    ) -> ImportCounts:
        """Import a LlamaIndex ``SimpleChatStore`` (what ``SimpleChatStore.persist()``
        writes: ``{"store": {key: [message, ...]}, ...}``, or that as a JSON string).

        Each key's messages become one session: by default the key is the user id and
        the session id (LlamaIndex apps usually key a chat store by user); with
        ``user_id`` every key becomes a session of that user. The messages go in as
        ``memory.put_messages`` puts them (chat history and the long-term sources), so
        search finds them; messages a session already holds are skipped, so importing
        twice changes nothing. Returns ``{"message": new messages, "session": sessions
        touched}``.
        """
        return import_chat_store(
            data, self.tenant_id, self._admin, memory=self.memory, flush=self.flush,
            user_id=user_id, progress=progress,
        )  # fmt: skip

    @property
    def rows(self) -> AdminRows:
        """The store's admin port (plain rows, any tenant): what a copy between stores
        reads and writes (:func:`llama_memory.admin.copying.copy_store`)."""
        return self._admin
