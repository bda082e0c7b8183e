"""Chat messages of an import, written once for both backends: which of them the store
already holds, and the insert of the others.

A stored message has no id of its own, and one ``put_messages`` call gives all its
messages the same time: "OK." said 300 times in one call is 300 rows equal in every
column. So a message of an export is identified by its session, its time, its content
(as the chat log stores it) *and its rank among the messages equal to it in the
file*: the third "OK." of a session at time t is held when the session holds at
least three such rows. The rank is counted over the whole import
(:class:`MessageRanks`, carried from batch to batch by the caller), never per batch,
so the batch size changes nothing; importing a file again adds nothing, an import
that stopped resumes where it stopped, and messages of two histories that meet in one
session are both kept.

Not by position in the session alone: a session replaced or cleared after the export
(``memory.set()``, ``reset()``) would then take the backup's first messages as held
and restore only its tail. Each check counts the session's equal rows, a walk of the
session's index: an import's cost grows with the square of a session's length (fine
for thousands of messages in a session; a session of a hundred thousand would want an
index on the content's hash).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from typing import Any

from .codec import dump_message

_COLUMNS = "tenant_id, user_id, session_id, message_json, created_at"


class MessageRanks:
    """For one import: how many messages equal to each one came before it, over
    every batch. Keyed by a 16-byte digest: about 100 bytes a message (measured), so
    an import of a million messages holds about 100 MB."""

    def __init__(self) -> None:
        self._seen: Counter[bytes] = Counter()

    def next(self, key: tuple[str, str, str, str, float]) -> int:
        """The rank (1 for the first) of this message among equal ones so far."""
        digest = hashlib.blake2b(json.dumps(key).encode("utf-8", "surrogatepass"), digest_size=16).digest()
        self._seen[digest] += 1
        return self._seen[digest]


def import_message(conn: Any, mark: str, tenant_id: str, row: dict[str, Any], ranks: MessageRanks) -> bool:
    """Write one ``message`` export row unless the session already holds it (see the
    module); whether it was written. ``conn`` is a connection of either backend inside
    the import's transaction, whose rows read by column name; ``mark`` its parameter
    placeholder (``?`` or ``%s``)."""
    # As the chat log writes it (the text of the store exported from, whatever the
    # key order of the file): what makes two messages equal.
    from llama_index.core.base.llms.types import ChatMessage  # only imports need it

    data = dump_message(ChatMessage.model_validate(row["message"]))
    key = (tenant_id, row["user"], row["session"], data, float(row["created_at"]))
    rank = ranks.next(key)
    held = conn.execute(
        f"SELECT count(*) AS n FROM chat_messages WHERE tenant_id = {mark} AND user_id = {mark} "
        f"AND session_id = {mark} AND message_json = {mark} AND created_at = {mark}",
        key,
    ).fetchone()
    if held["n"] >= rank:
        return False
    conn.execute(f"INSERT INTO chat_messages ({_COLUMNS}) VALUES ({', '.join([mark] * 5)})", key)
    return True
