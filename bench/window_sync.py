"""Cost of one conversation shared by several memory objects (web workers): what a
``ChatBuffer.get()`` on a shared SQLite chat log pays to see the other writers' messages.

    python -m bench.window_sync --sizes 100,20000

For each history length, a writer buffer stores the conversation (and as many
messages of another session), then a reader buffer on its own connection is timed
(medians of 200 calls): ``get()`` when nothing changed (one ``PRAGMA data_version``),
``get()`` right after the writer appended one message (the check plus the new row,
tokenized once), a ``get()`` of a buffer without a log holding the same history (the
window alone), and a full re-read of the log (what a check that re-read would cost).
The window is ``token_limit=3000`` in every case, so its own cost grows until the
history fills it (about 400 messages here), and not after.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from typing import Callable

from llama_index.core.base.llms.types import ChatMessage

from llama_memory.core.types import Scope
from llama_memory.storage.sqlite import SQLiteChatLog, SQLiteStore
from llama_memory.write.buffer import ChatBuffer


def _median_us(call: Callable[[], object], before: Callable[[], object] = lambda: None, n: int = 200) -> float:
    times = []
    for _ in range(n):
        before()
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def measure(size: int) -> dict[str, float]:
    """The four medians (microseconds) for a history of ``size`` messages."""
    directory = tempfile.mkdtemp()
    scope = Scope(user_id="u", session_id="s")
    writer = ChatBuffer(chat_log=SQLiteChatLog(SQLiteStore(directory), scope))
    writer.put_messages([
        ChatMessage(role="user" if i % 2 == 0 else "assistant", content=f"message {i} about the harbour")
        for i in range(size)
    ])
    other = ChatBuffer(chat_log=SQLiteChatLog(SQLiteStore(directory), Scope(user_id="u", session_id="t")))
    other.put_messages([ChatMessage(role="user", content=f"other {i}") for i in range(size)])
    reader = ChatBuffer(chat_log=SQLiteChatLog(SQLiteStore(directory), scope), token_limit=3000)
    count = iter(range(10**9))
    log = reader.chat_log
    assert isinstance(log, SQLiteChatLog)
    return {
        "unchanged": _median_us(reader.get),
        "one new": _median_us(
            reader.get, lambda: writer.put(ChatMessage(role="user", content=f"new {next(count)}"))
        ),
        "no log": _median_us(ChatBuffer(chat_history=reader.get_all(), token_limit=3000).get),
        "re-read": _median_us(lambda: log.load(), n=20),
    }


def main() -> None:
    """Print the medians for each history length of ``--sizes``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,20000", help="history lengths, comma-separated")
    args = parser.parse_args()
    print("history | get(), no log | get(), nothing new | get(), one new message | full re-read")
    for size in (int(s) for s in args.sizes.split(",")):
        m = measure(size)
        print(
            f"{size:>7} | {m['no log']:10.0f} us | {m['unchanged']:15.0f} us | "
            f"{m['one new']:19.0f} us | {m['re-read'] / 1000:9.1f} ms"
        )


if __name__ == "__main__":
    main()
