"""Small message constructors and deterministic embedding models shared by the tests."""

from __future__ import annotations

import asyncio
import ctypes
import hashlib
import re
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.llms.types import ChatMessage, MessageRole

from llama_memory import ComposableMemory, MemoryRecord


def user(text: str, **kwargs) -> ChatMessage:
    """A user message."""
    return ChatMessage(role=MessageRole.USER, content=text, additional_kwargs=kwargs)


def assistant(text: str, **kwargs) -> ChatMessage:
    """An assistant message."""
    return ChatMessage(role=MessageRole.ASSISTANT, content=text, additional_kwargs=kwargs)


def hold(make: Callable[..., ComposableMemory], texts: Iterable[str], prefix: str = "old", **kwargs: Any) -> None:
    """Store each of ``texts`` through ``make`` (with ``kwargs``) as a user message of a
    session of its own (``{prefix}-{n}``: no excerpt joins two of them)."""
    for n, text in enumerate(texts):
        memory = make(session_id=f"{prefix}-{n}", **kwargs)
        memory.put(user(text))
        memory.close()


def message_texts(records: Iterable[MemoryRecord]) -> list[str]:
    """The texts of the messages behind records, in order: an excerpt's parts one by one."""
    return [part.text for record in records for part in (record.parts or [record])]


class WordHashEmbedding(BaseEmbedding):
    """A deterministic, offline bag-of-words model: each word adds +-1 to a dimension
    chosen by a hash of the word and ``seed``. Two seeds are two different models of the
    same dimension (their vectors of one text share nothing); importable by name, so a
    saved memory can rebuild it."""

    embed_dim: int = 384
    seed: int = 0

    def __init__(self, **data: Any) -> None:
        data.setdefault("model_name", f"word-hash-{data.get('seed', 0)}")
        super().__init__(**data)

    @classmethod
    def class_name(cls) -> str:
        return "WordHashEmbedding"

    def _vector(self, text: str) -> list[float]:
        vector = np.zeros(self.embed_dim, dtype=np.float64)
        for word in re.findall(r"\w+", text.lower()):
            digest = hashlib.blake2b(f"{self.seed}:{word}".encode(), digest_size=8).digest()
            vector[int.from_bytes(digest[:4], "big") % self.embed_dim] += 1 if digest[4] & 1 else -1
        norm = np.linalg.norm(vector)
        return (vector / norm).tolist() if norm else [1.0] + [0.0] * (self.embed_dim - 1)

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._vector(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._vector(text)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._vector(query)


class Jittered(BaseEmbedding):
    """Another model's vectors plus a little deterministic noise (``scale`` per
    dimension): the same model as seen through numeric differences (another machine,
    a remote model's nondeterminism)."""

    inner: BaseEmbedding
    scale: float = 1e-3

    def _jitter(self, text: str, vector: list[float]) -> list[float]:
        seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=4).digest(), "big")
        noise = np.random.default_rng(seed).standard_normal(len(vector)) * self.scale
        return (np.asarray(vector) + noise).tolist()

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._jitter(query, self.inner.get_query_embedding(query))

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._jitter(text, self.inner.get_text_embedding(text))

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)


@contextmanager
def memory_factory(embed_model: BaseEmbedding, **defaults: Any) -> Iterator[Callable[..., ComposableMemory]]:
    """A ``make(user_id="alice", session_id="s1", **kwargs)`` that builds memories with
    ``defaults`` (``path=``, ``store=``...) and the given model; closes them all on exit."""
    made: list[ComposableMemory] = []

    def make(user_id: str = "alice", session_id: str = "s1", **kwargs: Any) -> ComposableMemory:
        memory = ComposableMemory.from_defaults(
            user_id=user_id, session_id=session_id, embed_model=embed_model, **{**defaults, **kwargs}
        )
        made.append(memory)
        return memory

    try:
        yield make
    finally:
        for memory in made:
            try:
                memory.close()
            except Exception:
                pass


class ServerTrace:
    """libpq's own trace of the protocol between connections and the server, in a file
    (nothing stubbed): :meth:`round_trips` counts the exchanges so far (each ends with the
    server's ReadyForQuery), for tests that a call sends fewer statements. Trace one
    connection with :meth:`follow`, or every connection of :meth:`pool`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = open(path, "w")
        self._pools: list[Any] = []

    def follow(self, conn: Any) -> None:
        """Trace this psycopg connection from now on."""
        from psycopg.pq import Trace

        conn.pgconn.trace(self._file.fileno())
        conn.pgconn.set_trace_flags(Trace.SUPPRESS_TIMESTAMPS | Trace.REGRESS_MODE)

    def pool(self, url: str) -> Any:
        """An application's ``psycopg_pool.ConnectionPool`` of one connection, traced
        (pass it as a store's ``url``); closed by :meth:`close`."""
        from psycopg_pool import ConnectionPool

        pool = ConnectionPool(url, min_size=1, max_size=1, configure=self.follow, open=True)
        self._pools.append(pool)
        return pool

    def round_trips(self) -> int:
        """How many statements the server has answered on the traced connections."""
        ctypes.CDLL(None).fflush(None)  # libpq writes the trace through C stdio buffers
        return self.path.read_text().count("\tReadyForQuery")

    def close(self) -> None:
        """Close the pools made and the trace file."""
        for pool in self._pools:
            pool.close()
        self._file.close()


class Ticker:
    """Counts the 10 ms ticks of a task on the running loop from :meth:`start` to
    :meth:`stop`: how long the loop was free to run other tasks."""

    def __init__(self) -> None:
        self.ticks = 0
        self._task: Any = None

    def start(self) -> "Ticker":
        self._task = asyncio.get_running_loop().create_task(self._tick())
        return self

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(0.01)
            self.ticks += 1

    def stop(self) -> None:
        self._task.cancel()
