"""Bad input: a clear error or a documented behaviour, and nothing stored is lost.

Each test first stores a few good records, feeds the bad input, then checks that
the earlier records are all still there (by search and in the chat history) and
that the memory still takes and finds new messages.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.llms.types import ChatMessage, ImageBlock, MessageRole
from llama_index.core.utils import get_tokenizer

import workers
from helpers import assistant, message_texts, user
from llama_memory import ComposableMemory, EmbeddingDimensionError, StorageError
from llama_memory.compose import BLOCK_OPEN
from llama_memory.excerpts import hit_of
from llama_memory.storage.sqlite import DB_FILENAME

GOOD = ["I keep bees in the garden.", "My boat is moored in the harbour.", "I play the cello."]


def seeded(make_memory, **kwargs) -> ComposableMemory:
    memory = make_memory(**kwargs)
    memory.put_messages([user(t) for t in GOOD])
    return memory


def assert_nothing_lost(memory: ComposableMemory, extra: tuple[str, ...] = ()) -> None:
    """The good records are found, the history holds them, and a new message works."""
    for text in GOOD:
        assert text in message_texts(memory.search(text, k=5)), f"lost {text!r}"
    history = [m.content for m in memory.get_all()]
    assert all(text in history for text in GOOD + list(extra))
    memory.put(user("A new note about the lighthouse."))
    assert hit_of(memory.search("lighthouse", k=1)[0]).text == "A new note about the lighthouse."


def reopened(memory: ComposableMemory, embed_model) -> ComposableMemory:
    memory.close()
    return ComposableMemory.from_defaults(
        user_id=memory.user_id, session_id=memory.session_id, path=memory.path,
        embed_model=embed_model,
    )


def test_messages_without_text_are_kept_in_the_history_but_make_no_record(make_memory, embed_model) -> None:
    """Documented: a message with no text (None or '' content, only an image, only a
    tool call) is stored losslessly in the conversation; long-term sources skip it."""
    memory = seeded(make_memory)
    tool_call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    odd = [
        ChatMessage(role=MessageRole.USER, content=None),
        user(""),
        user("   \n\t "),
        ChatMessage(role=MessageRole.USER, blocks=[ImageBlock(url="https://example.com/cat.png")]),
        ChatMessage(role=MessageRole.ASSISTANT, content=None, additional_kwargs={"tool_calls": [tool_call]}),
        ChatMessage(role=MessageRole.TOOL, content="42", additional_kwargs={"tool_call_id": "c1"}),
    ]
    before = memory.source("vector").store.count_records("vector")
    memory.put_messages(odd)
    assert memory.source("vector").store.count_records("vector") == before
    assert memory.get()  # the window holds them; get() does not fail on them
    again = reopened(memory, embed_model)
    try:
        assert again.get_all()[len(GOOD):] == odd  # losslessly, blocks and tool calls included
        assert_nothing_lost(again)
    finally:
        again.close()


def test_one_megabyte_message_is_stored_and_found_but_never_floods_the_block(make_memory) -> None:
    memory = seeded(make_memory, memory_token_limit=300)
    huge = "The anchor chain story. " + "rusty anchor chain links " * 42_000  # ~1 MB
    assert len(huge) > 1_000_000
    memory.put(user(huge))
    assert hit_of(memory.search("anchor chain", k=1)[0]).text == huge
    reader = make_memory(session_id="reader", memory_token_limit=300)
    reader.put(user("Tell me the anchor chain story"))
    messages = reader.get()
    assert len(get_tokenizer()(messages[0].content or "")) <= 300  # left out for the budget
    assert reader.last_block.dropped_for_budget >= 1
    assert_nothing_lost(memory, extra=(huge,))


def test_a_message_longer_than_the_token_limit_is_returned_whole(make_memory) -> None:
    """Documented (ChatBuffer): when the last user turn alone exceeds the limit it is
    returned whole, so the provider reports the overflow instead of a silent cut."""
    memory = seeded(make_memory, token_limit=50)
    long_turn = "Please summarise: " + "tide " * 400
    memory.put(user(long_turn))
    assert [m.content for m in memory.get() if m.role == MessageRole.USER] == [long_turn]
    memory.put(assistant("Done."))
    memory.put(user("Thanks"))
    assert [m.content for m in memory.get() if m.role != MessageRole.SYSTEM][-1] == "Thanks"
    assert_nothing_lost(memory, extra=(long_turn,))


@pytest.mark.parametrize("bad", ["lone \ud800 surrogate", "trailing \udfff"])
def test_invalid_unicode_is_refused_before_anything_is_written(make_memory, bad) -> None:
    memory = seeded(make_memory)
    records = memory.source("vector").store.count_records("vector")
    with pytest.raises(ValueError, match=r"message 1 \(user\).*not valid Unicode.*nothing was stored"):
        memory.put_messages([user("a fine message"), user(bad)])  # the batch is refused whole
    with pytest.raises(ValueError, match="not valid Unicode"):
        memory.put(user("fine text", note=bad))  # in additional_kwargs too
    assert memory.source("vector").store.count_records("vector") == records
    assert "a fine message" not in [m.content for m in memory.get_all()]
    assert_nothing_lost(memory)


def test_control_characters_and_nul_round_trip_and_are_escaped_in_the_block(make_memory, embed_model) -> None:
    memory = seeded(make_memory)
    odd = "bell\x07 nul\x00 escape\x1b[31m tab\t cr\r del\x7f violin"
    memory.put(user(odd))
    assert hit_of(memory.search("violin", k=1)[0]).text == odd
    reader = make_memory(session_id="reader")
    reader.put(user("violin"))
    block = reader.get()[0].content or ""
    assert BLOCK_OPEN in block and "\x00" not in block and "\x07" not in block
    assert "\\u0000" in block and "\\u0007" in block
    again = reopened(memory, embed_model)
    try:
        assert again.get_all()[-1].content == odd
        assert_nothing_lost(again, extra=(odd,))
    finally:
        again.close()


class Truncated(BaseEmbedding):
    """A model whose vectors have 8 dimensions (the store holds 384-dimensional ones)."""

    inner: BaseEmbedding

    def _get_query_embedding(self, query: str) -> list[float]:
        return self.inner.get_query_embedding(query)[:8]

    def _get_text_embedding(self, text: str) -> list[float]:
        return self.inner.get_text_embedding(text)[:8]

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)


def test_wrong_dimension_embeddings_are_refused_and_lose_nothing(make_memory, memory_dir, embed_model) -> None:
    memory = seeded(make_memory)
    memory.close()
    wrong = ComposableMemory.from_defaults(
        user_id="alice", session_id="s1", path=memory_dir, embed_model=Truncated(inner=embed_model)
    )
    # The rows are written (the record needs no vector) ...
    wrong.put(user("A note written through the wrong model about kayaks."))
    # ... but no 8-dimensional vector ever reaches the index.
    with pytest.raises(EmbeddingDimensionError, match="384.*8"):
        wrong.search("kayaks")
    with pytest.raises(EmbeddingDimensionError):
        wrong.close()  # close() would index what waits: refused the same way
    right = ComposableMemory.from_defaults(
        user_id="alice", session_id="s1", path=memory_dir, embed_model=embed_model
    )
    try:
        assert hit_of(right.search("kayaks", k=1)[0]).text.endswith("about kayaks.")
        assert_nothing_lost(right, extra=("A note written through the wrong model about kayaks.",))
    finally:
        right.close()


def test_a_corrupted_database_file_is_reported_and_left_as_it_was(memory_dir, embed_model) -> None:
    memory_dir.mkdir()
    garbage = b"this is not an SQLite database" * 100
    (memory_dir / DB_FILENAME).write_bytes(garbage)
    with pytest.raises(StorageError, match=rf"{DB_FILENAME}.*file is not a database"):
        ComposableMemory.from_defaults(user_id="alice", path=memory_dir, embed_model=embed_model)
    assert (memory_dir / DB_FILENAME).read_bytes() == garbage  # not overwritten, not "repaired"


def test_a_lost_or_corrupted_dense_index_is_rebuilt_from_the_record(make_memory, memory_dir, embed_model) -> None:
    """The index is derived data. A corrupted one is reported; once it is removed, a
    reopened memory finds every record by words at once and by meaning after reindex()."""
    memory = seeded(make_memory)
    memory.close()
    chroma = memory_dir / "chroma"
    for file in chroma.rglob("*.sqlite3"):
        file.write_bytes(b"garbage" * 1000)
    with pytest.raises(StorageError, match="Chroma"):
        ComposableMemory.from_defaults(user_id="alice", path=memory_dir, embed_model=embed_model)
    shutil.rmtree(chroma)
    again = ComposableMemory.from_defaults(
        user_id="alice", session_id="s1", path=memory_dir, embed_model=embed_model
    )
    try:
        assert again.reindex() == len(GOOD)
        assert hit_of(again.search("apiary and honey", k=1)[0]).text == GOOD[0]  # by meaning only
        assert_nothing_lost(again)
    finally:
        again.close()


def test_a_memory_path_that_is_a_file_is_refused(tmp_path: Path, embed_model) -> None:
    path = tmp_path / "memory"
    path.write_text("my notes")
    with pytest.raises(StorageError, match="exists and is not a directory"):
        ComposableMemory.from_defaults(user_id="alice", path=path, embed_model=embed_model)
    assert path.read_text() == "my notes"


@pytest.mark.parametrize("what", ["directory and files", "database file", "directory"])
def test_a_read_only_memory_is_refused_with_a_clear_error(embed_model, what) -> None:
    """Root ignores file modes: the open is tried by a forked process that drops to an
    unprivileged user (so the directory lives in a world-readable temporary one)."""
    base = Path(tempfile.mkdtemp(prefix="llama-memory-ro-"))
    try:
        base.chmod(0o755)
        path = base / "memory"
        memory = ComposableMemory.from_defaults(
            user_id="alice", session_id="s1", path=path, embed_model=embed_model
        )
        memory.put(user("My boat is moored in the harbour."))
        memory.close()
        files = [p for p in path.rglob("*") if p.is_file()]
        dirs = [path, *(p for p in path.rglob("*") if p.is_dir())]
        for p in files:
            p.chmod(0o444 if what != "directory" else 0o666)
        for p in dirs:
            p.chmod(0o555 if what != "database file" else 0o777)
        process, conn = workers.start(workers.forkserver(), workers.open_as_unprivileged, str(path))
        kind, *answer = workers.receive(conn)
        process.join(30)
        assert kind == "error", answer
        name, message = answer
        assert name == "StorageError" and "read-only" in message, message
        for p in dirs:
            p.chmod(0o755)
        for p in files:
            p.chmod(0o644)
        again = ComposableMemory.from_defaults(
            user_id="alice", session_id="s1", path=path, embed_model=embed_model
        )
        assert [hit_of(r).text for r in again.search("harbour", k=1)] == ["My boat is moored in the harbour."]
        again.close()
    finally:
        for p in [base, *base.rglob("*")]:
            os.chmod(p, 0o755 if p.is_dir() else 0o644)
        shutil.rmtree(base)
