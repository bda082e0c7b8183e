"""Bad input: a clear error or a documented behaviour, and nothing stored is lost.

Each test first stores a few good records, feeds the bad input, then checks that
the earlier records are all still there (by search and in the chat history) and
that the memory still takes and finds new messages.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.llms.types import AudioBlock, ChatMessage, ImageBlock, MessageRole
from llama_index.core.utils import get_tokenizer

import workers
from helpers import assistant, message_texts, user
from llama_memory import (
    ChatBuffer,
    ComposableMemory,
    EmbeddingDimensionError,
    LlamaMemoryError,
    MemoryAdmin,
    MemoryClosedError,
    NotPicklableError,
    StorageError,
)
from llama_memory.memory.composable import LLAMA_INDEX_KWARGS
from llama_memory.read.compose import BLOCK_OPEN
from llama_memory.retrieval.excerpts import hit_of
from llama_memory.storage.sqlite import DB_FILENAME
from llama_memory.testing import ScriptedLLM

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
    """Documented: a message with no text (None or '' content, only a tool call) is
    stored losslessly in the conversation; long-term sources skip it. A message of
    media only (an image) is stored too, and makes one record: its placeholder."""
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
    assert memory.source("vector").store.count_records("vector") == before + 1  # "[image]"
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


@pytest.mark.parametrize(
    ("bad", "said"),
    [
        ("lone \ud800 surrogate", "not valid Unicode"),
        ("trailing \udfff", "not valid Unicode"),
        ("nul\x00 inside", "a NUL character.*PostgreSQL cannot store"),
    ],
)
def test_text_no_store_can_hold_is_refused_the_same_on_every_backend(make_memory_on, bad, said) -> None:
    """NUL used to be stored by SQLite and refused by PostgreSQL with a StorageError
    after the batch had begun; both now give the same ValueError before any write."""
    memory = seeded(make_memory_on)
    records = memory.source("vector").store.count_records("vector")
    with pytest.raises(ValueError, match=rf"message 1 \(user\).*{said}.*nothing was stored"):
        memory.put_messages([user("a fine message"), user(bad)])  # the batch is refused whole
    with pytest.raises(ValueError, match=said):
        memory.put(user("fine text", note=bad))  # in additional_kwargs too
    assert memory.source("vector").store.count_records("vector") == records
    assert "a fine message" not in [m.content for m in memory.get_all()]
    assert_nothing_lost(memory)


def test_a_triple_with_nul_is_refused_the_same_on_every_backend(make_memory_on) -> None:
    memory = make_memory_on(triples=True)
    memory.add_triples([("Ana", "plays", "cello")])
    with pytest.raises(ValueError, match=r"triples\[1\]: 'object' holds a NUL character.*nothing was stored"):
        memory.add_triples([("Ana", "lives in", "Porto"), ("Ana", "owns", "a\x00b")])
    assert [(t.predicate, t.object) for t in memory.source("triples").triples(memory.scope)] == [("plays", "cello")]


def test_control_characters_round_trip_and_are_escaped_in_the_block(make_memory, embed_model) -> None:
    memory = seeded(make_memory)
    odd = "bell\x07 escape\x1b[31m tab\t cr\r del\x7f unit\x1f violin"
    memory.put(user(odd))
    assert hit_of(memory.search("violin", k=1)[0]).text == odd
    reader = make_memory(session_id="reader")
    reader.put(user("violin"))
    block = reader.get()[0].content or ""
    assert BLOCK_OPEN in block and "\x1f" not in block and "\x07" not in block
    assert "\\u001f" in block and "\\u0007" in block
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
    # A model that does not declare its dimension: its fingerprint tells it, at open,
    # before anything of it is written.
    with pytest.raises(EmbeddingDimensionError, match="384.*8"):
        ComposableMemory.from_defaults(
            user_id="alice", session_id="s1", path=memory_dir, embed_model=Truncated(inner=embed_model)
        )
    right = ComposableMemory.from_defaults(
        user_id="alice", session_id="s1", path=memory_dir, embed_model=embed_model
    )
    try:
        assert_nothing_lost(right)
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


# --------------------------------------------------------------------------- arguments and errors


def test_an_unknown_keyword_argument_names_the_closest_valid_one(make_memory, memory_dir, embed_model) -> None:
    memory = seeded(make_memory)
    memory.close()
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'memory_token_limt'; did you mean 'memory_token_limit'\?"):
        ComposableMemory.from_defaults(user_id="alice", session_id="s1", path=memory_dir, memory_token_limt=10)
    with pytest.raises(TypeError, match=r"'usr_id'; did you mean 'user_id'\?"):
        ComposableMemory(primary_memory=ChatBuffer.from_defaults(), usr_id="alice")
    # ChatMemoryBuffer's chat_store has no meaning here: said, with what to pass instead.
    with pytest.raises(TypeError, match=r"'chat_store'.*path="):
        ComposableMemory.from_defaults(user_id="alice", path=memory_dir, chat_store=object())
    assert_nothing_lost(reopened(memory, embed_model))


def test_what_llama_index_passes_is_accepted_and_honoured(memory_dir, embed_model) -> None:
    """Found in llama-index-core: chat engines call ``memory_cls.from_defaults(chat_history=...,
    token_limit=...)``, agents ``from_defaults(llm=...)``, chat engines ``get(initial_token_count=...)``."""
    assert set(LLAMA_INDEX_KWARGS) == {"chat_history", "token_limit", "llm", "initial_token_count"}
    llm = ScriptedLLM()
    memory = ComposableMemory.from_defaults(
        user_id="alice", session_id="s1", path=memory_dir, embed_model=embed_model,
        chat_history=[user(GOOD[0]), assistant("Bees!")], token_limit=1234, llm=llm,
    )  # fmt: skip
    try:
        assert [m.content for m in memory.get_all()] == [GOOD[0], "Bees!"]
        assert memory.primary_memory.token_limit == 1234 and memory.llm is llm
        assert memory.get(initial_token_count=10)
        assert GOOD[0] in message_texts(memory.search("keep bees in the garden", k=2))  # long-term too
    finally:
        memory.close()
    resumed = ComposableMemory.from_defaults(
        user_id="alice", session_id="s1", path=memory_dir, embed_model=embed_model, chat_history=[]
    )
    try:  # persisted; an empty chat_history (what chat engines pass by default) changes nothing
        assert [m.content for m in resumed.get_all()] == [GOOD[0], "Bees!"]
    finally:
        resumed.close()


def test_an_embedding_model_name_is_refused_with_what_to_pass(make_memory, memory_dir, embed_model) -> None:
    memory = seeded(make_memory)
    memory.close()
    with pytest.raises(TypeError, match=r"OpenAIEmbedding\(model='text-embedding-3-small'\)"):
        ComposableMemory.from_defaults(user_id="alice", path=memory_dir, embed_model="text-embedding-3-small")
    assert_nothing_lost(reopened(memory, embed_model))


def test_messages_that_are_not_chat_messages_are_refused_with_what_to_pass(make_memory) -> None:
    memory = seeded(make_memory)
    with pytest.raises(TypeError, match=r"put\(\) takes a ChatMessage.*ChatMessage\(role=\"user\", content='hello'\)"):
        memory.put("hello")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"put_messages\(\) takes ChatMessage objects; message 1 is a str"):
        memory.put_messages([user("fine"), "hello"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"put_messages\(\) takes a list of ChatMessage, not one ChatMessage"):
        memory.put_messages(user("hello"))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"set\(\) takes a list of ChatMessage, not str"):
        memory.set("hello")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"set\(\) takes ChatMessage objects; message 0 is a dict"):
        memory.set([{"role": "user", "content": "hello"}])  # type: ignore[list-item]
    assert "fine" not in [m.content for m in memory.get_all()]  # a bad batch writes nothing
    assert_nothing_lost(memory)


def test_search_k_must_be_a_whole_number_of_one_or_more(make_memory) -> None:
    memory = seeded(make_memory)
    with pytest.raises(TypeError, match=r"^search\(\) k takes a whole number, not str '3': pass e.g. k=5$"):
        memory.search("bees", k="3")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not bool True"):
        memory.search("bees", k=True)
    for bad in (0, -1):  # not an empty list, as if nothing were remembered
        with pytest.raises(ValueError, match=rf"search\(\) k is how many records to return, at least 1, got {bad}"):
            memory.search("bees", k=bad)
    assert len(memory.search("bees", k=1)) == 1
    assert_nothing_lost(memory)


def test_an_empty_search_query_is_refused_as_the_cli_and_mcp_server_refuse_it(make_memory) -> None:
    """``search("")`` looked like an empty memory (``[]``) where ``llama-memory search``
    said the query was empty: each says so now."""
    from llama_memory.admin.mcp_tools import MemoryTools

    memory = seeded(make_memory)
    for bad in ("", "  \n"):
        with pytest.raises(ValueError, match=rf"^search\(\) query must be a non-empty string, got {re.escape(repr(bad))}: pass what to look for"):
            memory.search(bad)
        with pytest.raises(ValueError, match=r"^search\(\) query must be a non-empty string"):
            asyncio.run(memory.asearch(bad))
    with MemoryAdmin(memory.path) as admin:
        with pytest.raises(ValueError, match="^query must be a non-empty string"):
            admin.search(memory.user_id, " ")
        with pytest.raises(ValueError, match="^query must be a non-empty text"):
            MemoryTools(admin, [memory.user_id]).search_memory(memory.user_id, "")
    assert_nothing_lost(memory)


def test_from_dict_given_the_saved_json_text_says_to_load_it(make_memory, embed_model) -> None:
    import json

    memory = seeded(make_memory)
    saved = json.dumps(memory.to_dict())  # as an app keeps it in its database
    for given in (saved, saved.encode()):
        with pytest.raises(TypeError, match=r"^from_dict takes the dict memory.to_dict\(\) returned, not (str|bytes) .*json.loads\(text\)"):
            ComposableMemory.from_dict(given)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not NoneType None: pass that dict"):
        ComposableMemory.from_dict(None)  # type: ignore[arg-type]
    memory.close()
    restored = ComposableMemory.from_dict(json.loads(saved), embed_model=embed_model)
    assert_nothing_lost(restored)
    restored.close()


def test_get_input_must_be_a_string(make_memory) -> None:
    memory = seeded(make_memory)
    with pytest.raises(TypeError, match="input must be a str or None, not int 123"):
        memory.get(input=123)  # type: ignore[arg-type]
    assert_nothing_lost(memory)


@pytest.mark.parametrize("url", ["sqlite:///m.db", "postgresql://me@db/memory", Path("sqlite:///m.db")])
def test_a_database_url_as_path_is_refused_and_creates_nothing(tmp_path: Path, monkeypatch, embed_model, url) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="path is a directory.*pass store=.postgresql:.*instead of path"):
        ComposableMemory.from_defaults(user_id="alice", path=url, embed_model=embed_model)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("block", "placeholder"),
    [
        (ImageBlock(url="https://example.com/miso.png"), "[image]"),
        (AudioBlock(audio=b"RIFF0000WAVEfmt ", format="wav"), "[audio]"),
    ],
)
def test_a_message_of_media_only_keeps_its_turn_in_the_excerpt(make_memory, block, placeholder) -> None:
    """A photo or a voice note the user sent, with no text: stored with a placeholder,
    so the excerpt around it shows the user's turn, not two assistant lines in a row."""
    memory = make_memory(min_relevance=0.0)
    memory.put_messages([
        user("My cat Miso turned three today."),
        assistant("Happy birthday to Miso!"),
        ChatMessage(role=MessageRole.USER, blocks=[block]),
        assistant("What a cute cat, Miso looks happy."),
    ])
    texts = [r.text for r in memory.search("Miso looks happy", k=3)]
    shown = next(t for t in texts if "Miso looks happy" in t)
    assert f"user: {placeholder}\nassistant: What a cute cat, Miso looks happy." in shown, texts
    assert "assistant: Happy birthday to Miso!\nassistant:" not in shown
    assert memory.get_all()[2].blocks == [block]  # the message itself is kept as it was


async def test_calls_after_close_say_the_memory_is_closed(make_memory, embed_model) -> None:
    memory = seeded(make_memory)
    memory.close()
    memory.close()  # twice: harmless
    calls = {
        "get": lambda: memory.get(), "get_all": memory.get_all, "put": lambda: memory.put(user("x")),
        "put_messages": lambda: memory.put_messages([user("x")]), "set": lambda: memory.set([]),
        "search": lambda: memory.search("bees"), "reset": memory.reset, "forget": memory.forget,
        "reconcile": memory.reconcile, "tools": memory.tools,
    }  # fmt: skip
    for name, call in calls.items():
        with pytest.raises(MemoryClosedError, match="this memory is closed"):
            call()
        assert issubclass(MemoryClosedError, StorageError), name  # caught as before
    with pytest.raises(MemoryClosedError, match="this memory is closed"):
        await memory.aget()
    assert "messages=closed" in repr(memory)
    assert_nothing_lost(reopened(memory, embed_model))


def test_a_closed_memorys_sources_say_it_is_closed(make_memory, embed_model) -> None:
    """``memory.profile`` after ``close()`` handed out the source, whose first read was a
    StorageError about a closed database: the memory says it is closed instead."""
    memory = seeded(make_memory, triples=True)
    memory.close()
    parts = {
        "profile": lambda: memory.profile, "triple_source": lambda: memory.triple_source,
        "episodic": lambda: memory.episodic, "source": lambda: memory.source("vector"),
    }  # fmt: skip
    for name, part in parts.items():
        with pytest.raises(MemoryClosedError, match="this memory is closed"):
            part()
    assert_nothing_lost(reopened(memory, embed_model))


def test_a_memory_is_not_copied_and_says_how_to_open_another(make_memory, embed_model) -> None:
    """``copy.copy`` gave a memory that shared the original's store and options (closing
    it closed the original) and ``copy.deepcopy`` failed on a lock: both are refused,
    naming the ways that work."""
    import copy

    memory = seeded(make_memory)
    for copier in (copy.copy, copy.deepcopy):
        with pytest.raises(NotPicklableError, match=r"a ComposableMemory is not copied .*from_dict\(memory.to_dict\(\)\)"):
            copier(memory)
    assert_nothing_lost(memory)


def test_a_memory_used_in_a_with_block_is_closed_on_leaving_it(make_memory, embed_model) -> None:
    with seeded(make_memory) as memory:
        assert memory.get_all()  # open inside the block
    with pytest.raises(MemoryClosedError, match="this memory is closed"):
        memory.get()
    with pytest.raises(ValueError, match="boom"), seeded(make_memory) as failed:
        raise ValueError("boom")  # the block's error is not swallowed, and it still closes
    with pytest.raises(MemoryClosedError):
        failed.put(user("x"))
    assert_nothing_lost(reopened(memory, embed_model))


async def test_a_memory_used_in_an_async_with_block_is_closed_on_leaving_it(make_memory, embed_model) -> None:
    async with seeded(make_memory) as memory:
        assert await memory.aget_all()
    with pytest.raises(MemoryClosedError, match="this memory is closed"):
        await memory.aget()
    assert_nothing_lost(reopened(memory, embed_model))


def test_an_admin_used_after_close_says_it_is_closed(make_memory, memory_dir, embed_model) -> None:
    from llama_memory import MemoryAdmin

    seeded(make_memory).close()
    other = MemoryAdmin(memory_dir, embed_model=embed_model)  # shares the store's opening
    admin = MemoryAdmin(memory_dir, embed_model=embed_model)
    with admin:
        assert [u.user_id for u in admin.users()] == ["alice"]
    admin.close()  # twice: harmless
    calls = {
        "users": admin.users, "show": lambda: admin.show("alice"), "records": lambda: admin.records("alice"),
        "search": lambda: admin.search("alice", "bees"), "stats": admin.stats, "jobs": admin.jobs,
        "export": lambda: list(admin.export_rows(["alice"])), "forget": lambda: admin.forget("alice"),
    }  # fmt: skip
    for name, call in calls.items():  # not the database's "closed database", nor a result
        with pytest.raises(MemoryClosedError, match=r"this MemoryAdmin of .* is closed .*MemoryAdmin\(path\)"):
            call()
    assert admin.location == str(memory_dir)
    with other:  # the other admin of the store was not closed with it
        assert [u.user_id for u in other.users()] == ["alice"]
    assert_nothing_lost(reopened(seeded(make_memory), embed_model))


def test_profile_shortcut_and_a_readable_repr(make_memory, memory_dir) -> None:
    memory = seeded(make_memory)
    assert memory.profile is memory.source("profile")
    memory.put(user("x" * 100_000))
    text = repr(memory)
    assert text == str(memory) and len(text) < 300 and "xxxx" not in text
    assert text == (
        f"ComposableMemory(user_id='alice', session_id='s1', tenant_id='default', "
        f"path={str(memory_dir)!r}, sources=['vector', 'profile'], messages=4)"
    )
    bare = make_memory(user_id="bob", secondary_memory_sources=[])
    with pytest.raises(LlamaMemoryError, match="no profile source.*profile=True"):
        bare.profile
