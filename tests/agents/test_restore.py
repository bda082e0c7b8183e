"""A workflow ``Context`` saved with ``ctx.to_dict()`` and restored with
``Context.from_dict(agent, data)`` (which calls ``ComposableMemory.from_dict(data)`` with no
arguments) brings back an equivalent memory in every documented set-up: a custom
embedding model, a custom primary memory, a profile schema, triples, ``extract_every``,
``ttl``, a Chroma server, a relative path restored from another working directory. What
a dict cannot carry (a live LLM, custom sources) comes from ``set_restore_hook``, or the
restore says what is missing; a store that is gone is never replaced by an empty one."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

import pytest
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import MessageRole
from llama_index.core.memory import ChatMemoryBuffer
from llama_index.core.workflow import Context
from pydantic import BaseModel

from helpers import WordHashEmbedding, message_texts, user
from llama_memory import (
    ChatBuffer,
    ComposableMemory,
    LlamaMemoryError,
    RestoreWarning,
    StorageError,
    set_restore_hook,
)
from llama_memory.embeddings.offline import default_embedding
from scripted_llm import ScriptedLLM, message_plain_text

SYSTEM_PROMPT = "You are a helpful assistant."
FACT = "I like green tea with jasmine."
QUESTION = "Which tea do I like?"


class TeaProfile(BaseModel):
    """A profile schema importable by name (``test_restore:TeaProfile``)."""

    name: Optional[str] = None
    favourite_tea: Optional[str] = None


@pytest.fixture
def opened() -> Iterator[list[ComposableMemory]]:
    """Memories to close at the end of a test."""
    memories: list[ComposableMemory] = []
    yield memories
    for memory in memories:
        try:
            memory.close()
        except Exception:
            pass


@pytest.fixture
def hook() -> Iterator[Any]:
    """Set a restore hook for one test; the previous one is put back after."""
    previous = set_restore_hook(None)
    yield set_restore_hook
    set_restore_hook(previous)


async def saved_context(memory: ComposableMemory, llm: Optional[ScriptedLLM] = None):
    """One FunctionAgent run with ``memory`` telling it ``FACT``; returns the agent and
    its context as JSON-ready data, as an app stores it in a database."""
    agent = FunctionAgent(llm=llm or ScriptedLLM(["Noted.", "Green tea with jasmine."]),
                          system_prompt=SYSTEM_PROMPT)
    ctx = Context(agent)
    await agent.run(user_msg=FACT, memory=memory, ctx=ctx)
    return agent, json.loads(json.dumps(ctx.to_dict()))


async def restore(agent: FunctionAgent, data: dict, opened: list) -> tuple[Context, ComposableMemory]:
    ctx = Context.from_dict(agent, data)
    memory = await ctx.store.get("memory")
    opened.append(memory)
    assert isinstance(memory, ComposableMemory)
    return ctx, memory


async def run_again(agent: FunctionAgent, ctx: Context, opened: list) -> str:
    """Ask ``QUESTION`` with the restored context; the text the LLM received."""
    llm = agent.llm
    assert isinstance(llm, ScriptedLLM)
    llm.reset_calls()
    await agent.run(user_msg=QUESTION, ctx=ctx)
    opened.append(await ctx.store.get("memory"))
    return "\n".join(message_plain_text(m) for m in llm.calls[0].messages)


def conversation(memory: ComposableMemory) -> list[str]:
    return [message_plain_text(m) for m in memory.get_all() if m.role != MessageRole.SYSTEM]


async def test_a_custom_embedding_model_comes_back(tmp_path: Path, opened) -> None:
    model = WordHashEmbedding(seed=3, embed_dim=64)
    memory = ComposableMemory.from_defaults(
        user_id="alice", session_id="s1", path=tmp_path, embed_model=model
    )
    opened.append(memory)
    agent, data = await saved_context(memory)
    memory.close()

    ctx, restored = await restore(agent, data, opened)
    rebuilt = restored.source("vector").embed_model
    assert isinstance(rebuilt, WordHashEmbedding)
    assert (rebuilt.embed_dim, rebuilt.seed) == (64, 3)
    assert FACT in message_texts(restored.search("jasmine tea", k=3))
    assert "jasmine" in await run_again(agent, ctx, opened)


async def test_a_primary_memory_llamaindex_can_serialise_comes_back(tmp_path: Path, opened) -> None:
    buffer = ChatMemoryBuffer.from_defaults(token_limit=500)
    memory = ComposableMemory.from_defaults(
        primary_memory=buffer, user_id="alice", session_id="s1", path=tmp_path,
        embed_model=default_embedding(),
    )
    opened.append(memory)
    agent, data = await saved_context(memory)

    ctx, restored = await restore(agent, data, opened)
    assert isinstance(restored.primary_memory, ChatMemoryBuffer)
    assert restored.primary_memory.token_limit == 500
    assert conversation(restored) == [FACT, "Noted."]
    seen = await run_again(agent, ctx, opened)
    assert FACT in seen and "Noted." in seen

    # Our own ChatBuffer given as the primary (not persisted under path): its messages
    # travel in the dict.
    own = ComposableMemory.from_defaults(
        primary_memory=ChatBuffer(token_limit=777), user_id="bob", session_id="b1",
        path=tmp_path, embed_model=default_embedding(),
    )
    opened.append(own)
    agent, data = await saved_context(own)
    _, again = await restore(agent, data, opened)
    assert isinstance(again.primary_memory, ChatBuffer)
    assert again.primary_memory.token_limit == 777
    assert conversation(again) == [FACT, "Noted."]


async def test_profile_schema_triples_extraction_and_expiry_come_back(
    tmp_path: Path, opened, hook
) -> None:
    llm = ScriptedLLM(["Noted.", "Green tea with jasmine."])
    memory = ComposableMemory.from_defaults(
        user_id="alice", session_id="s1", path=tmp_path, embed_model=default_embedding(),
        profile=TeaProfile, triples=True, llm=llm, extract_every=3, ttl=3600,
        refresh_on_read=True, top_k=4, memory_token_limit=700,
    )
    opened.append(memory)
    agent, data = await saved_context(memory, llm)
    memory.close()

    extractor = ScriptedLLM([])
    hook(lambda saved: {"llm": extractor} if saved["user_id"] == "alice" else None)
    ctx, restored = await restore(agent, data, opened)
    assert restored.source("profile").schema is TeaProfile
    assert restored.triple_source is not None
    assert (restored.extract_every, restored.llm) == (3, extractor)
    assert (restored.top_k, restored.memory_token_limit) == (4, 700)
    for name in ("vector", "profile", "triples"):
        expiry = restored.source(name).expiry
        assert (expiry.ttl, expiry.refresh_on_read) == (3600, True)
    assert "jasmine" in await run_again(agent, ctx, opened)


async def test_without_a_hook_a_missing_llm_is_said(tmp_path: Path, opened, hook) -> None:
    memory = ComposableMemory.from_defaults(
        user_id="alice", session_id="s1", path=tmp_path, embed_model=default_embedding(),
        llm=ScriptedLLM([]), extract_every=2, tokenizer_fn=str.split,
    )
    opened.append(memory)
    agent, data = await saved_context(memory)
    with pytest.warns(RestoreWarning) as warned:
        _, restored = await restore(agent, data, opened)
    said = [str(w.message) for w in warned if issubclass(w.category, RestoreWarning)]
    assert any("llm" in m and "set_restore_hook" in m for m in said), said
    assert any("tokenizer_fn" in m for m in said), said
    assert restored.llm is None and restored.extract_every == 2


def test_a_chroma_client_object_is_asked_for_again(tmp_path: Path, opened) -> None:
    from llama_memory.storage import persistent_client

    client = persistent_client(tmp_path / "own-chroma")  # a client of the app's own
    memory = ComposableMemory.from_defaults(
        user_id="alice", path=tmp_path, embed_model=default_embedding(), chroma_client=client
    )
    opened.append(memory)
    data = json.loads(json.dumps(memory.to_dict()))
    with pytest.raises(LlamaMemoryError, match="Chroma client.*chroma_client="):
        ComposableMemory.from_dict(data)
    again = ComposableMemory.from_dict(data, chroma_client=client)
    opened.append(again)
    assert again.source("vector").index.client is client


async def test_custom_sources_come_from_the_hook(tmp_path: Path, opened, hook) -> None:
    from llama_memory import VectorSource
    from llama_memory.storage import SQLiteStore
    from llama_memory.storage.chroma import open_index

    store = SQLiteStore(tmp_path / "own")
    source = VectorSource(
        store, open_index("own", tmp_path / "own", None, None), default_embedding(), name="notes"
    )
    memory = ComposableMemory.from_defaults(
        secondary_memory_sources=[source], user_id="alice", session_id="s1", path=tmp_path
    )
    opened.append(memory)
    agent, data = await saved_context(memory)
    hook(lambda saved: {"secondary_memory_sources": [source]})
    ctx, restored = await restore(agent, data, opened)
    assert restored.sources == [source]
    assert "jasmine" in await run_again(agent, ctx, opened)
    source.close()
    store.close()


async def test_a_relative_path_is_restored_from_another_working_directory(
    tmp_path: Path, opened, monkeypatch
) -> None:
    (tmp_path / "app").mkdir()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "app")
    memory = ComposableMemory.from_defaults(user_id="alice", session_id="s1", path="memory")
    opened.append(memory)
    assert memory.path == str(tmp_path / "app" / "memory")
    agent, data = await saved_context(memory)

    monkeypatch.chdir(tmp_path / "elsewhere")
    ctx, restored = await restore(agent, data, opened)
    assert restored.path == str(tmp_path / "app" / "memory")
    # The offline default comes back as the process's one loaded model.
    assert restored.source("vector").embed_model is default_embedding()
    assert conversation(restored) == [FACT, "Noted."]
    assert "jasmine" in await run_again(agent, ctx, opened)
    assert not (tmp_path / "elsewhere" / "memory").exists()


def _causes(error: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    current: Optional[BaseException] = error
    while current is not None:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


async def test_a_store_that_is_gone_is_never_replaced_by_an_empty_one(tmp_path: Path, opened) -> None:
    memory = ComposableMemory.from_defaults(
        user_id="alice", session_id="s1", path=tmp_path / "memory", embed_model=default_embedding()
    )
    opened.append(memory)
    agent, data = await saved_context(memory)
    memory.close()
    shutil.rmtree(tmp_path / "memory")

    with pytest.raises(Exception) as caught:
        await restore(agent, data, opened)
    [error] = [e for e in _causes(caught.value) if isinstance(e, StorageError)]
    assert "does not exist" in str(error) and str(tmp_path / "memory") in str(error)
    assert not (tmp_path / "memory").exists()


def test_what_cannot_be_imported_is_named_with_what_to_pass(tmp_path: Path, opened) -> None:
    class LocalProfile(BaseModel):
        city: Optional[str] = None

    memory = ComposableMemory.from_defaults(
        user_id="alice", path=tmp_path, embed_model=default_embedding(), profile=LocalProfile
    )
    opened.append(memory)
    memory.put(user("hello"))
    data = json.loads(json.dumps(memory.to_dict()))
    with pytest.raises(LlamaMemoryError, match="profile schema.*inside a function.*profile="):
        ComposableMemory.from_dict(data)
    again = ComposableMemory.from_dict(data, profile=LocalProfile)
    opened.append(again)
    assert again.source("profile").schema is LocalProfile

    data["embed_model"]["qualified_name"] = "no_such_module:Model"
    with pytest.raises(LlamaMemoryError, match="embedding model.*no_such_module.*embed_model="):
        ComposableMemory.from_dict(data, profile=LocalProfile)


def test_credentials_are_not_written_into_the_dict(tmp_path: Path) -> None:
    class KeyedEmbedding(WordHashEmbedding):
        api_key: str = ""

    memory = ComposableMemory.from_defaults(
        user_id="alice", embed_model=KeyedEmbedding(api_key="sk-secret")
    )
    saved = memory.to_dict()
    assert "sk-secret" not in json.dumps(saved)
    assert saved["embed_model"]["dropped"] == ["api_key"]
    memory.close()


async def test_a_chroma_server_and_a_custom_model_come_back(chroma_server, tmp_path: Path, opened) -> None:
    model = WordHashEmbedding(seed=5, embed_dim=32)
    memory = ComposableMemory.from_defaults(
        user_id="alice", session_id="s1", path=tmp_path, embed_model=model,
        chroma_url=chroma_server.url,
    )
    opened.append(memory)
    agent, data = await saved_context(memory)
    ctx, restored = await restore(agent, data, opened)
    assert restored.to_dict()["chroma_url"] == memory.to_dict()["chroma_url"]
    assert restored.source("vector").embed_model.embed_dim == 32
    assert "jasmine" in await run_again(agent, ctx, opened)
