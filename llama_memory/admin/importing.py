"""How an import writes into a store: an export's rows in batches, or a LlamaIndex
``SimpleChatStore``'s conversations as new messages (:meth:`MemoryAdmin.import_rows`,
:meth:`MemoryAdmin.import_chat_store`). Importing the same data again adds nothing."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from itertools import islice
from typing import TYPE_CHECKING, Any, Callable, Optional, Union

from ..core.text import replace_unstorable
from ..storage.chat_import import MessageRanks
from ..storage.sql.admin import AdminRows
from .export_format import IMPORT_BATCH, ImportCounts, check_header, check_row, storable_row

if TYPE_CHECKING:
    from llama_index.core.base.llms.types import ChatMessage

    from ..core.progress import Progress
    from ..memory.composable import ComposableMemory

#: Embeds what an import left waiting for the dense index (``MemoryAdmin.flush``).
Flush = Callable[[Optional["Progress"]], int]


def import_export_rows(
    rows: Iterable[Mapping[str, Any]], tenant_id: str, admin_rows: AdminRows, *,
    prepare: Callable[[set[str]], None], flush: Flush, progress: Optional[Progress] = None,
    batch_size: int = IMPORT_BATCH,
) -> ImportCounts:  # fmt: skip
    """Import an export's rows (the header first) into ``tenant_id`` through the admin
    port, ``batch_size`` rows to a transaction; ``prepare`` is given the kinds of each
    batch first (to open the tables they go to). Returns how many rows of each kind
    were new; records and triples are embedded (``flush``) before it returns."""
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    from pydantic import ValidationError

    from ..sources.triples.normalize import search_text

    iterator = iter(rows)
    header = next(iterator, None)
    check_header(header)
    added = ImportCounts()
    ranks = MessageRanks()  # over every batch: the batch size must change nothing
    line = 1
    while True:
        batch = [
            check_row(storable_row(dict(row), added.replaced), line + i + 1)
            for i, row in enumerate(islice(iterator, batch_size))
        ]
        if not batch:
            break
        line += len(batch)
        prepare({r["kind"] for r in batch})
        texts = [search_text(r["subject"], r["predicate"], r["object"]) if r["kind"] == "triple" else "" for r in batch]
        try:
            added += admin_rows.import_rows(tenant_id, batch, texts, ranks)
        except ValidationError as exc:
            raise ValueError(f"import: a chat message is not a valid ChatMessage: {exc}") from exc
        if progress is not None:
            progress.advance(len(batch))
    if added["record"] or added["triple"]:
        flush(progress and progress.child("embedding"))
    return added


def import_chat_store(
    data: Union[Mapping[str, Any], str], tenant_id: str, admin_rows: AdminRows, *,
    memory: Callable[[str, str], ComposableMemory], flush: Flush, user_id: Optional[str] = None,
    progress: Optional[Progress] = None,
) -> ImportCounts:  # fmt: skip
    """Import a ``SimpleChatStore`` (its JSON, or that as a string): each key's messages
    that the session does not hold yet go in through ``memory(user, session)
    .put_messages`` (see :meth:`MemoryAdmin.import_chat_store` for the keys and users)."""
    from llama_index.core.base.llms.types import ChatMessage
    from pydantic import ValidationError

    from ..core.messages import dump_message, load_message

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
        held = Counter(dump_message(load_message(m)) for m in admin_rows.chat_messages(tenant_id, user, session))
        new = []
        for message in messages:
            text = dump_message(message)
            if held[text] > 0:
                held[text] -= 1
            else:
                new.append(message)
        if new:
            memory(user, session).put_messages(new)
            added["message"] += len(new)
            added["session"] += 1
        if progress is not None:
            progress.advance(len(messages))
    if added["message"]:
        flush(progress and progress.child("embedding"))
    return added
