"""Speed of ``ComposableMemory`` against LlamaIndex's ``SimpleComposableMemory``, per agent turn.

What it measures, in one run, on the same machine and the same messages:

* **ours**: ``ComposableMemory.from_defaults(user_id="u", path=<tmpdir>)``: the
  default ``ChatBuffer`` (token limit 3000, persisted in SQLite) plus the default
  ``VectorSource`` (SQLite record + embedded Chroma index);
* **stock**: ``SimpleComposableMemory.from_defaults(primary_memory=
  ChatMemoryBuffer.from_defaults(token_limit=3000), secondary_memory_sources=
  [VectorMemory.from_defaults(vector_store=None, embed_model=..., retriever_kwargs=
  {"similarity_top_k": 2})])``;
* **Memory+VectorBlock**: LlamaIndex's newer ``llama_index.core.memory.Memory``
  (SQLAlchemy chat store in a SQLite file, token limit 4286 so that its chat-history
  share of 0.7 is the same 3000-token window, flushing 10% of the limit at a time)
  with one ``VectorMemoryBlock`` (top-k 2) on a persistent ``ChromaVectorStore``
  (``pip install llama-index-vector-stores-chroma``; without it this memory is left
  out and the report's meta says so). Messages reach its vector block only when they
  leave the window, one node (one embedding) per flush;

each with two embeddings of dimension 384:

* ``offline``: ``llama_memory.default_embedding()`` (all-MiniLM-L6-v2, int8 ONNX),
  the same model object for both memories;
* ``fake``: :class:`FakeEmbedding`, a hash-seeded unit vector that costs
  microseconds, so what remains is each memory's own overhead.

For each history length N it builds a history of N messages (alternating
user/assistant, 15-30 word sentences, deterministic from ``--seed``; the same
messages for every memory) and reports the build time. Ours is built with
``put_messages`` in batches of ``--batch``; stock is built the fastest legitimate
way, which reaches exactly the state that N ``put`` calls reach (see
:func:`build_stock`; checked by :func:`check_stock_batch_build` at start-up).
Then, ``--gets`` times, it plays one agent turn on top of that history:

1. ``put(user message)``          timed: "put user"
2. ``get()`` with no input        timed: "get" (an agent's first ``aget()`` of a run)
3. ``put(assistant reply)``       timed: "put asst"

and reports the median and p95 of ``get()`` and the median of each ``put``, and
the ratio stock/ours. ``--input-gets`` more turns time ``get(input=<user text>)``,
the call agents make after tool rounds. Note that stock's ``VectorMemory``
retrieves nothing when ``get()`` has no input, while ours retrieves for the
latest user message: the "recall" column shows how many long-term records each
``get()`` injected.

A stock run stops at a size (reported as "over cap", never skipped silently)
when one ``get()`` takes more than 30 s or building the history more than 120 s;
larger sizes of that memory and embedding are then reported as over cap too.
The caps are checked between calls, so a call is never interrupted; so above 2,000
messages (``--sizes 10000``) stock's get() is first extrapolated (quadratically, from
its largest finished size in this run, else from one ``ChatMemoryBuffer.get()`` on
1,000 messages) and the size is reported "over cap (predicted ...)" without running
it when the prediction exceeds the cap.

Every run also reports the process's peak resident memory while it ran ("peak MB",
the kernel's high-water mark, reset at the start of the run) and what the run added
at that peak over the RSS at its start ("+MB"; freed memory the allocator reuses is
not counted again, so read it as a lower bound).

Optional modes, after the per-turn comparison:

* ``--records 1000,10000,100000``: ours with N long-term records of one user (ingested
  with ``put_messages`` and indexed, fake embedding, or the offline model with
  ``--records-embedding offline``), then the median and p95 of ``get()`` (in turns), of
  ``get(input=question)`` ("get(q)") and of ``search(text, k=10)``; the offline model's
  single query embedding is timed apart so get() with it can be stated ("get+offl"),
  and get(q) with the offline model set against it ("/qe");
* ``--bulk 10000``: messages/s of ``put_messages`` in batches of ``--batch`` with
  ``--bulk-embedding`` (default offline), embedding included (ours: ``flush()`` inside
  the timing), for every memory; stock stops at the build cap and its rate is taken
  over the messages it reached;
* ``--plot PATH``: a PNG of get() median latency against history length (log y);
* ``--hop-weight W``: ours with the second hop at weight ``W`` (0: off; the
  latency target compares the two).

Run::

    .venv/bin/python -m bench.speed                        # sizes 100,1000,2000, 20 gets
    .venv/bin/python -m bench.speed --sizes 100,500 --gets 10 --json bench/results/speed.json
    .venv/bin/python -m bench.speed --smoke                # a few seconds (used by the tests)
    .venv/bin/python -m bench.speed --sizes 2000,10000 --records 1000,10000,100000 \
        --bulk 10000 --plot bench/results/get-latency.png --json bench/results/speed.json
    .venv/bin/python -m bench.speed --profile out.txt --sizes 2000 --embeddings offline
                                                           # pyinstrument profile of ours' get()
    .venv/bin/python -m bench.speed --backend sqlite,postgres --sizes 2000
                                                           # SQLite and PostgreSQL side by side
                                                           # (bench/pg_speed.py, its own options)

The machine's load average is recorded before and after each run: other
processes on the machine (test runs) inflate every figure, so compare figures of
one run with each other, and rerun on an idle machine for absolute numbers.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import math
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.bridge.pydantic import Field
from llama_index.core.memory import ChatMemoryBuffer, SimpleComposableMemory, VectorMemory
from llama_index.core.memory.types import BaseMemory

try:  # VectorMemory's own helpers, so the batched build makes exactly the nodes put() makes
    from llama_index.core.memory.vector_memory import (
        _get_starter_node_for_new_batch,
        _stringify_chat_message,
    )
except ImportError:  # pragma: no cover - another llama-index-core: build stock with put()
    _get_starter_node_for_new_batch = _stringify_chat_message = None  # type: ignore[assignment]

try:  # LlamaIndex's newer Memory with a vector block (the third memory compared)
    from llama_index.core.memory import Memory as LlamaIndexMemory
    from llama_index.core.memory.memory_blocks import VectorMemoryBlock
except ImportError:  # pragma: no cover - older llama-index-core
    LlamaIndexMemory = VectorMemoryBlock = None  # type: ignore[assignment,misc]
try:  # pip install llama-index-vector-stores-chroma
    from llama_index.vector_stores.chroma import ChromaVectorStore
except ImportError:  # pragma: no cover - the Memory row is then skipped, and says so
    ChromaVectorStore = None  # type: ignore[assignment,misc]

from bench.versions import package_versions
from llama_memory import ComposableMemory, default_embedding

#: Dimension of both embeddings.
DIMENSION = 384
#: A stock ``get()`` slower than this stops that size.
GET_CAP_S = 30.0
#: A stock history build slower than this stops that size.
BUILD_CAP_S = 120.0
#: Names of the memories as reported.
OURS = "ComposableMemory"
STOCK = "SimpleComposableMemory"
#: LlamaIndex's ``Memory`` (FIFO queue in SQLite) + ``VectorMemoryBlock`` on Chroma.
LLAMA_MEMORY = "Memory+VectorBlock"
#: ``Memory`` token limit: with its default chat_history_token_ratio 0.7, a 3000-token window
#: like the other two; flushes 10% of the limit at a time (its own default ratio).
LLAMA_MEMORY_TOKEN_LIMIT = 4286
#: Sizes, gets and input-gets of ``--smoke``.
SMOKE_SIZES = (20,)
SMOKE_GETS = 3
SMOKE_INPUT_GETS = 1
#: Record counts and bulk size of ``--smoke``.
SMOKE_RECORDS = (200,)
SMOKE_BULK = 200
#: Messages per ``put_messages`` call when filling a memory for ``--records``.
RECORDS_BATCH = 1000
#: Above this history length, stock is first checked against the get cap by extrapolation.
PREDICT_ABOVE = 2000


# --------------------------------------------------------------------------- embeddings


class FakeEmbedding(BaseEmbedding):
    """A zero-cost embedding: a unit vector seeded by a hash of the text.

    Deterministic (the same text always gives the same vector), never all
    zeros, and of the same dimension as the offline model, so both memories run
    their real code paths while the model itself costs microseconds.
    """

    model_name: str = Field(default="bench-fake-hash", description="Name of the model.")
    dimension: int = Field(default=DIMENSION, description="Dimension of the vectors.")
    #: A text's query vector is its document vector, as with the offline model, so ours
    #: takes the same path with either (llama_memory.embeddings.offline.is_symmetric).
    symmetric: bool = Field(default=True, description="Query and document vectors agree.")

    @classmethod
    def class_name(cls) -> str:
        """Name of the class, as LlamaIndex components report it."""
        return "BenchFakeEmbedding"

    def _vector(self, text: str) -> Embedding:
        digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
        rng = np.random.default_rng(int.from_bytes(digest, "little"))
        vector = rng.standard_normal(self.dimension)
        return (vector / np.linalg.norm(vector)).tolist()

    def _get_query_embedding(self, query: str) -> Embedding:
        return self._vector(query)

    def _get_text_embedding(self, text: str) -> Embedding:
        return self._vector(text)

    def _get_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return [self._vector(t) for t in texts]

    async def _aget_query_embedding(self, query: str) -> Embedding:
        return self._vector(query)

    async def _aget_text_embedding(self, text: str) -> Embedding:
        return self._vector(text)


def make_embeddings(names: Sequence[str]) -> dict[str, BaseEmbedding]:
    """The embeddings by name (``offline`` is loaded now, outside every timing)."""
    made: dict[str, BaseEmbedding] = {}
    for name in names:
        if name == "offline":
            model = default_embedding()
            model.load()
            made[name] = model
        elif name == "fake":
            made[name] = FakeEmbedding()
        else:
            raise ValueError(f"unknown embedding {name!r}: use 'offline' and/or 'fake'")
    return made


# --------------------------------------------------------------------------- messages

_NAMES = ("Alice", "Bob", "Maria", "Kenji", "Priya", "Tom", "Sofia", "Omar", "Lena", "Diego",
          "Hannah", "Yusuf", "Chloe", "Mateo", "Ingrid", "Ravi")
_RELATIONS = ("sister", "brother", "colleague", "neighbour", "manager", "old friend", "cousin",
              "daughter", "son", "partner", "flatmate", "aunt")
_PLACES = ("Lisbon", "Kyoto", "the Lake District", "Berlin", "Oaxaca", "Vancouver",
           "the Dolomites", "Marrakech", "Edinburgh", "Seoul", "Cape Town", "Hanoi", "Bergen",
           "Sicily", "Patagonia", "Montreal")
_ACTIVITIES = ("hiking", "baking sourdough", "learning Spanish", "training for a half marathon",
               "restoring an old road bike", "painting watercolours", "playing chess online",
               "growing tomatoes on the balcony", "practising classical guitar",
               "writing a short novel", "swimming before work", "learning to code in Rust",
               "birdwatching", "rock climbing indoors", "knitting a sweater", "doing yoga")
_FOODS = ("ramen", "lentil soup", "mushroom risotto", "tacos al pastor", "banana bread",
          "green curry", "shakshuka", "pork dumplings", "seafood paella", "falafel wraps",
          "a lemon tart", "chickpea stew", "beef pho", "spinach lasagne", "apple crumble")
_DIETS = ("vegetarian", "allergic to nuts", "avoiding gluten", "vegan", "not a fan of spicy food",
          "trying to eat less sugar", "lactose intolerant")
_WORK = ("the quarterly report", "a database migration", "the onboarding guide",
         "a client presentation", "the budget review", "a job interview", "the product launch",
         "a long code review", "the hiring plan", "a grant application", "the team offsite")
_PAST = ("last weekend", "yesterday evening", "on Monday", "two weeks ago", "over the holidays",
         "this morning", "last month", "on Saturday afternoon")
_FUTURE = ("next Friday", "in March", "this summer", "next weekend", "at the end of the month",
           "in two weeks", "after the holidays", "on Sunday")
_FEELINGS = ("excited", "a bit nervous", "exhausted", "really happy", "frustrated", "curious",
             "relieved", "unsure", "proud", "overwhelmed")
_PETS = ("dog Biscuit", "cat Miso", "parrot Kiwi", "rabbit Clover", "old dog Pepper")
_PET_ISSUES = ("sleeping much more than usual", "refusing to eat breakfast",
               "scratching the sofa", "barking at night", "limping a little")
_BODY = ("knee", "lower back", "shoulder", "wrist", "ankle")
_TAILS = ("Thanks again for the help last time.", "Let me know what you think.",
          "I would like a short answer if possible.", "No rush, I am just thinking ahead.",
          "I keep forgetting the details, so please remind me later.")

_USER_TEMPLATES = (
    "I spent {past} {activity} with my {relation} {name}, and honestly I feel {feeling} about "
    "how it went.",
    "Can you suggest a good recipe for {food}? My {relation} {name} is coming over {future} "
    "and is {diet}.",
    "I am planning a trip to {place} {future}; what should I pack if I want to spend most "
    "days {activity}?",
    "At work I am stuck on {work}, and my manager wants it finished {future}. How should I "
    "break it into steps?",
    "I have been {activity} for {n} months now and I feel {feeling}, but my {body} hurts after "
    "long sessions.",
    "My {pet} has been {pet_issue} since {past}; should I be worried, or is that normal at "
    "{n} years old?",
    "Do you remember what I told you about my {relation} {name}? I think it was when we talked "
    "about {place}.",
    "I finally tried making {food} {past} and it turned out {outcome}, although it took almost "
    "{n} hours.",
    "My {relation} {name} wants to move to {place} {future} and asked me to help with {work}; "
    "is that a good idea?",
)
_ASSISTANT_TEMPLATES = (
    "That sounds lovely! For {food}, start with good ingredients, cook it slowly, and taste as "
    "you go so you can adjust the seasoning for someone {diet}.",
    "For {place}, pack layers, comfortable shoes and a light rain jacket, because the weather "
    "can change quickly when you are out {activity} all day.",
    "A good way to tackle {work} is to list the open questions first, agree on what done means "
    "with your manager, then work in small daily steps.",
    "It is great that you kept up {activity} for {n} months. Try shorter sessions, stretch "
    "beforehand, and rest for a day if your {body} still hurts.",
    "You mentioned that your {relation} {name} lives near {place} and loves {food}, so a visit "
    "{future} could combine both of those things nicely.",
    "Feeling {feeling} after something like that is completely normal. Maybe write down what "
    "went well, and plan one small change for {future}.",
    "If your {pet} keeps {pet_issue} for more than a few days, a quick visit to the vet is "
    "sensible; until then, keep an eye on water and appetite.",
    "Congratulations on making {food}! Next time, prepare the ingredients the day before, which "
    "usually saves an hour, and freeze half for a busy evening.",
    "Helping {name} with {work} is kind; set clear limits on your time, and suggest you both "
    "review the plan together {future} before committing.",
)
_OUTCOMES = ("surprisingly good", "a little burnt", "too salty", "better than expected",
             "delicious", "a complete mess")


def _fill(template: str, rng: random.Random) -> str:
    return template.format(
        name=rng.choice(_NAMES), relation=rng.choice(_RELATIONS), place=rng.choice(_PLACES),
        activity=rng.choice(_ACTIVITIES), food=rng.choice(_FOODS), diet=rng.choice(_DIETS),
        work=rng.choice(_WORK), past=rng.choice(_PAST), future=rng.choice(_FUTURE),
        feeling=rng.choice(_FEELINGS), pet=rng.choice(_PETS), pet_issue=rng.choice(_PET_ISSUES),
        body=rng.choice(_BODY), outcome=rng.choice(_OUTCOMES), n=rng.randint(2, 14),
    )


class MessageFactory:
    """Deterministic, distinct chat messages of 15-30 words, alternating user/assistant.

    Every text is new (a repeated draw is redrawn), so a memory that merges
    identical texts stores as many records as it received messages.
    """

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)
        self._seen: set[str] = set()
        self._count = 0

    def _text(self, templates: Sequence[str]) -> str:
        while True:
            text = _fill(self._rng.choice(templates), self._rng)
            if len(text.split()) < 15:
                text += " " + self._rng.choice(_TAILS)
            if 15 <= len(text.split()) <= 30 and text not in self._seen:
                self._seen.add(text)
                return text

    def next(self) -> ChatMessage:
        """The next message: user on even positions, assistant on odd ones."""
        user = self._count % 2 == 0
        self._count += 1
        role = MessageRole.USER if user else MessageRole.ASSISTANT
        return ChatMessage(role=role, content=self._text(_USER_TEMPLATES if user else _ASSISTANT_TEMPLATES))

    def take(self, n: int) -> list[ChatMessage]:
        """The next ``n`` messages."""
        return [self.next() for _ in range(n)]


def make_workload(size: int, turns: int, seed: int) -> tuple[list[ChatMessage], list[tuple[ChatMessage, ChatMessage]]]:
    """A history of ``size`` messages and ``turns`` fresh (user, assistant) pairs after it."""
    factory = MessageFactory(seed)
    history = factory.take(size)
    if len(history) % 2:  # keep the turns starting with a user message
        factory.next()
    fresh = [(factory.next(), factory.next()) for _ in range(turns)]
    return history, fresh


# --------------------------------------------------------------------------- the memories


class OverCap(Exception):
    """A run exceeded one of the caps."""


#: ``--hop-weight``: the second hop's weight in ours (None: the library's default).
HOP_WEIGHT: Optional[float] = None


def make_ours(embed_model: BaseEmbedding, path: Path) -> ComposableMemory:
    """Ours with its defaults: ChatBuffer + VectorSource (SQLite + Chroma) under ``path``
    (the second hop's weight set to :data:`HOP_WEIGHT` when given)."""
    memory = ComposableMemory.from_defaults(user_id="u", path=path, embed_model=embed_model)
    if HOP_WEIGHT is not None:
        memory.source("vector").hop_weight = HOP_WEIGHT
    return memory


#: Chroma client and collection of each live ``Memory`` built here, by ``id(memory)``.
_LLAMA_MEMORY_CHROMA: dict[int, tuple[Any, str]] = {}


def make_llama_memory(embed_model: BaseEmbedding, path: Path) -> BaseMemory:
    """LlamaIndex's ``Memory``: its SQLAlchemy chat store in a SQLite file under ``path``
    (aiosqlite), a 3000-token window, and one ``VectorMemoryBlock`` (top-k 2, the default)
    on a persistent Chroma collection under ``path``: what messages flushed out of the
    window go to, one node (one embedding) per flush."""
    if LlamaIndexMemory is None or ChromaVectorStore is None:
        raise RuntimeError("needs llama_index.core.memory.Memory and llama-index-vector-stores-chroma")
    import chromadb

    path.mkdir(parents=True, exist_ok=True)
    client = chromadb.PersistentClient(path=str(path / "chroma"))
    name = f"bench_memory_{os.getpid()}_{len(_LLAMA_MEMORY_CHROMA)}_{time.perf_counter_ns()}"
    collection = client.get_or_create_collection(name)
    block = VectorMemoryBlock(
        vector_store=ChromaVectorStore(chroma_collection=collection),
        embed_model=embed_model, similarity_top_k=2,
    )
    memory = LlamaIndexMemory.from_defaults(
        session_id="s", token_limit=LLAMA_MEMORY_TOKEN_LIMIT,
        token_flush_size=int(LLAMA_MEMORY_TOKEN_LIMIT * 0.1), memory_blocks=[block],
        async_database_uri=f"sqlite+aiosqlite:///{path / 'memory.db'}",
    )
    _LLAMA_MEMORY_CHROMA[id(memory)] = (client, name)
    return memory


def close_llama_memory(memory: BaseMemory) -> None:
    """Drop the Chroma collection of a ``Memory`` made by :func:`make_llama_memory`."""
    client, name = _LLAMA_MEMORY_CHROMA.pop(id(memory), (None, None))
    if client is not None:
        try:
            client.delete_collection(name)
        except Exception:  # pragma: no cover - best effort
            pass


def build_llama_memory(memory: BaseMemory, history: Sequence[ChatMessage], batch: int, deadline: float) -> None:
    """``put_messages`` in batches: ``Memory`` archives what leaves the window and the
    vector block embeds it, inside the call."""
    for i in range(0, len(history), batch):
        memory.put_messages(list(history[i : i + batch]))
        if time.perf_counter() > deadline:
            raise OverCap(f"build > {BUILD_CAP_S:.0f} s")


def make_stock(embed_model: BaseEmbedding, path: Path) -> SimpleComposableMemory:
    """Stock: ChatMemoryBuffer(3000) + in-memory VectorMemory (top-k 2); ``path`` is unused."""
    return SimpleComposableMemory.from_defaults(
        primary_memory=ChatMemoryBuffer.from_defaults(token_limit=3000),
        secondary_memory_sources=[
            VectorMemory.from_defaults(
                vector_store=None, embed_model=embed_model,
                retriever_kwargs={"similarity_top_k": 2},
            )
        ],
    )


def build_ours(memory: ComposableMemory, history: Sequence[ChatMessage], batch: int, deadline: float) -> None:
    """``put_messages`` in batches of ``batch``, then bring the dense index up to date."""
    for i in range(0, len(history), batch):
        memory.put_messages(list(history[i : i + batch]))
        if time.perf_counter() > deadline:
            raise OverCap(f"build > {BUILD_CAP_S:.0f} s")
    for source in memory.sources:
        flush = getattr(source, "flush", None)
        if flush is not None:
            flush()


def _vector_memory_nodes(vector_memory: VectorMemory, messages: Sequence[ChatMessage]) -> list[Any]:
    """The nodes ``VectorMemory.put`` would commit for ``messages``, in order.

    Same grouping as ``put`` (a node per user/system message plus the replies
    after it, with ``batch_by_user_message``), same text and ``sub_dicts``.
    Leaves ``cur_batch_textnode`` where ``put`` would leave it.
    """
    current = vector_memory.cur_batch_textnode
    nodes: list[Any] = []
    for message in messages:
        if not vector_memory.batch_by_user_message or message.role in (MessageRole.USER, MessageRole.SYSTEM):
            current = _get_starter_node_for_new_batch()
        sub_dict = _stringify_chat_message(message)
        if current.text == "":
            current.text += sub_dict["content"] or ""
        else:
            current.text += " " + (sub_dict["content"] or "")
        current.metadata["sub_dicts"].append(sub_dict)
        if current.text and (not nodes or nodes[-1] is not current):
            nodes.append(current)
    vector_memory.cur_batch_textnode = current
    return nodes


def build_stock(memory: SimpleComposableMemory, history: Sequence[ChatMessage], batch: int, deadline: float) -> None:
    """Reach the state of ``for m in history: memory.put(m)``, embedding in batches.

    ``SimpleComposableMemory.put_messages`` calls ``put`` per message and
    ``VectorMemory.put`` re-embeds the growing user+reply node on every message
    (one model call per message, plus a delete and an insert): about 45 s for
    1,000 messages here. The same nodes are built here and inserted with
    ``insert_nodes`` in chunks (the model embeds them ``embed_batch_size`` at a
    time), and the chat buffer is filled with ``set``. The state is the same:
    :func:`check_stock_batch_build` compares both ways at start-up.
    """
    memory.primary_memory.set(list(history))
    for vector_memory in memory.secondary_memory_sources:
        assert isinstance(vector_memory, VectorMemory)
        nodes = _vector_memory_nodes(vector_memory, history)
        for i in range(0, len(nodes), max(batch, 1)):
            vector_memory.vector_index.insert_nodes(nodes[i : i + batch])
            if time.perf_counter() > deadline:
                raise OverCap(f"build > {BUILD_CAP_S:.0f} s")


def build_stock_by_put(memory: SimpleComposableMemory, history: Sequence[ChatMessage], batch: int, deadline: float) -> None:
    """The plain way: ``put`` every message (the fallback if the batch build does not match)."""
    for message in history:
        memory.put(message)
        if time.perf_counter() > deadline:
            raise OverCap(f"build > {BUILD_CAP_S:.0f} s")


def _stock_state(memory: SimpleComposableMemory) -> tuple[Any, ...]:
    """What a stock memory holds, ids aside: buffer texts and (text, sub_dicts, vector) per node."""
    vector_memory = memory.secondary_memory_sources[0]
    index = vector_memory.vector_index
    store = index.vector_store
    nodes = []
    for node_id in index.index_struct.nodes_dict.values():
        node = index.docstore.get_node(node_id)
        nodes.append((node.text, json.dumps(node.metadata["sub_dicts"], sort_keys=True, default=str),
                      tuple(round(x, 6) for x in store.get(node_id))))
    buffer = tuple((str(m.role), m.content) for m in memory.primary_memory.get_all())
    current = (vector_memory.cur_batch_textnode.text,
               json.dumps(vector_memory.cur_batch_textnode.metadata["sub_dicts"], sort_keys=True, default=str))
    return buffer, tuple(sorted(nodes)), current


def check_stock_batch_build(n: int = 12, seed: int = 7) -> bool:
    """Whether :func:`build_stock` reaches the same state as ``put`` per message.

    Also compares the ``get(input=...)`` output of a turn played on each.
    """
    if _get_starter_node_for_new_batch is None or _stringify_chat_message is None:
        return False
    history, fresh = make_workload(n, 1, seed)
    embed_model = FakeEmbedding()
    by_put, by_batch = make_stock(embed_model, Path(".")), make_stock(embed_model, Path("."))
    far = time.perf_counter() + 3600
    build_stock_by_put(by_put, history, 1, far)
    build_stock(by_batch, history, 4, far)
    if _stock_state(by_put) != _stock_state(by_batch):
        return False
    outputs = []
    for memory in (by_put, by_batch):
        user, reply = fresh[0]
        memory.put(user)
        memory.put(reply)
        outputs.append([(str(m.role), m.content) for m in memory.get(input=user.content)])
    return outputs[0] == outputs[1] and _stock_state(by_put) == _stock_state(by_batch)


@dataclass
class Subject:
    """One memory under test: how to make it, fill it, count what it recalled, close it."""

    name: str
    make: Callable[[BaseEmbedding, Path], BaseMemory]
    build: Callable[[Any, Sequence[ChatMessage], int, float], None]
    recalled: Callable[[Any, list[ChatMessage]], int]
    close: Callable[[Any], None]


def _ours_recalled(memory: ComposableMemory, output: list[ChatMessage]) -> int:
    return len(memory.last_block.records)


def _stock_recalled(memory: SimpleComposableMemory, output: list[ChatMessage]) -> int:
    """Messages injected from the secondary sources (lines of the stock block)."""
    if not output or output[0].role != MessageRole.SYSTEM:
        return 0
    text = output[0].content or ""
    if "=====Relevant messages from memory source" not in text:
        return 0
    return sum(1 for line in text.splitlines() if line.startswith("\t"))


def _llama_memory_recalled(memory: BaseMemory, output: list[ChatMessage]) -> int:
    """Messages injected by the vector block (``<message role=...>`` in the memory block)."""
    return sum((m.content or "").count("<message role=") for m in output)


def subjects(stock_build: Callable[..., None]) -> list[Subject]:
    """Ours, then stock, then LlamaIndex's ``Memory`` (when the Chroma store is installed)."""
    found = [
        Subject(OURS, make_ours, build_ours, _ours_recalled, lambda m: m.close()),
        Subject(STOCK, make_stock, stock_build, _stock_recalled, lambda m: None),
    ]
    if LlamaIndexMemory is not None and ChromaVectorStore is not None:
        found.append(Subject(LLAMA_MEMORY, make_llama_memory, build_llama_memory,
                             _llama_memory_recalled, close_llama_memory))
    return found


# --------------------------------------------------------------------------- peak memory


def _status_kb(field_name: str) -> Optional[int]:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1])
    except OSError:  # pragma: no cover - not Linux
        return None
    return None


class PeakMemory:
    """Peak resident memory of the process during a block (Linux).

    On entry: collect garbage, hand freed heap back to the OS (``malloc_trim``), note
    the RSS and reset the kernel's high-water mark (``/proc/self/clear_refs`` 5). On
    exit: ``peak_mb`` is the high-water mark (VmHWM) reached inside the block, and
    ``delta_mb`` that minus the RSS on entry: what the block added at its peak, native
    allocations (Chroma, ONNX) included. Not tracemalloc: it would slow the timed calls.
    Where the reset is refused, ``ru_maxrss`` is used (a process-wide peak: the delta
    is then 0 unless the block set a new peak).
    """

    def __enter__(self) -> "PeakMemory":
        gc.collect()
        try:
            import ctypes

            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except Exception:  # pragma: no cover - not glibc
            pass
        self.start_kb = _status_kb("VmRSS")
        try:
            with open("/proc/self/clear_refs", "w") as refs:
                refs.write("5")
            self.reset = True
        except OSError:  # pragma: no cover
            self.reset = False
        self.peak_mb: Optional[float] = None
        self.delta_mb: Optional[float] = None
        return self

    def __exit__(self, *exc: Any) -> None:
        peak_kb = _status_kb("VmHWM") if self.reset else None
        if peak_kb is None:
            import resource

            peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        self.peak_mb = round(peak_kb / 1024, 1)
        if self.start_kb is not None:
            self.delta_mb = round(max(0, peak_kb - self.start_kb) / 1024, 1)


# --------------------------------------------------------------------------- running


def median(values: Sequence[float]) -> Optional[float]:
    """The median, or None for no values."""
    return statistics.median(values) if values else None


def p95(values: Sequence[float]) -> Optional[float]:
    """The 95th percentile by nearest rank (the 19th of 20 values), or None."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def load_average() -> Optional[float]:
    """The 1-minute load average, or None where the OS does not tell."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:  # pragma: no cover - not on Linux
        return None


@dataclass
class RunResult:
    """Figures of one memory, one embedding, one history length (times in ms, build in s)."""

    memory: str
    embedding: str
    size: int
    status: str = "ok"
    build_s: Optional[float] = None
    warmup_get_ms: Optional[float] = None
    get_ms: list[float] = field(default_factory=list)
    #: The process's CPU time of each get() (no input): on a shared machine, the wall
    #: clock mostly measures the other processes.
    get_cpu_ms: list[float] = field(default_factory=list)
    get_input_ms: list[float] = field(default_factory=list)
    put_user_ms: list[float] = field(default_factory=list)
    put_assistant_ms: list[float] = field(default_factory=list)
    window_messages: Optional[int] = None
    recalled: Optional[int] = None
    recalled_with_input: Optional[int] = None
    load_before: Optional[float] = None
    load_after: Optional[float] = None
    peak_rss_mb: Optional[float] = None
    peak_rss_delta_mb: Optional[float] = None

    @property
    def ok(self) -> bool:
        """Whether the run finished within the caps."""
        return self.status == "ok"

    def summary(self) -> dict[str, Any]:
        """The run as JSON-ready data: raw timings plus medians and p95."""
        data = asdict(self)
        data.update(
            get_median_ms=median(self.get_ms), get_p95_ms=p95(self.get_ms),
            get_cpu_median_ms=median(self.get_cpu_ms),
            get_input_median_ms=median(self.get_input_ms),
            put_user_median_ms=median(self.put_user_ms),
            put_assistant_median_ms=median(self.put_assistant_ms),
            turn_median_ms=median([a + b + c for a, b, c in
                                   zip(self.put_user_ms, self.get_ms, self.put_assistant_ms)]),
        )
        return data


def _ms(start: float) -> float:
    return (time.perf_counter() - start) * 1000.0


def run_one(
    subject: Subject,
    embedding: str,
    embed_model: BaseEmbedding,
    history: Sequence[ChatMessage],
    fresh: Sequence[tuple[ChatMessage, ChatMessage]],
    *,
    gets: int,
    input_gets: int,
    batch: int,
    get_cap_s: float = GET_CAP_S,
    build_cap_s: float = BUILD_CAP_S,
) -> RunResult:
    """Build the history in a fresh memory, then play ``gets + input_gets`` timed turns."""
    result = RunResult(subject.name, embedding, len(history), load_before=load_average())
    workdir = Path(tempfile.mkdtemp(prefix="llama-memory-bench-"))
    memory = None
    peak = PeakMemory().__enter__()
    try:
        memory = subject.make(embed_model, workdir / "memory")
        # The same messages for every memory, as separate objects.
        messages = [m.model_copy(deep=True) for m in history]
        start = time.perf_counter()
        try:
            subject.build(memory, messages, batch, start + build_cap_s)
        finally:
            result.build_s = time.perf_counter() - start
        if result.build_s > build_cap_s:
            raise OverCap(f"build > {build_cap_s:.0f} s")
        t0 = time.perf_counter()
        memory.get()  # warm-up, not in the figures (first query of a fresh index / connection)
        result.warmup_get_ms = _ms(t0)
        if result.warmup_get_ms > get_cap_s * 1000:
            raise OverCap(f"get > {get_cap_s:.0f} s")
        for turn, (user, reply) in enumerate(fresh[: gets + input_gets]):
            user, reply = user.model_copy(deep=True), reply.model_copy(deep=True)
            with_input = turn >= gets
            t0 = time.perf_counter()
            memory.put(user)
            result.put_user_ms.append(_ms(t0))
            t0, c0 = time.perf_counter(), time.process_time()
            output = memory.get(input=user.content) if with_input else memory.get()
            elapsed = _ms(t0)
            (result.get_input_ms if with_input else result.get_ms).append(elapsed)
            if not with_input:
                result.get_cpu_ms.append((time.process_time() - c0) * 1000.0)
            if with_input:
                result.recalled_with_input = subject.recalled(memory, output)
            else:
                result.window_messages = len(output)
                result.recalled = subject.recalled(memory, output)
            if elapsed > get_cap_s * 1000:
                raise OverCap(f"get > {get_cap_s:.0f} s")
            t0 = time.perf_counter()
            memory.put(reply)
            result.put_assistant_ms.append(_ms(t0))
    except OverCap as exc:
        result.status = f"over cap ({exc})"
    finally:
        peak.__exit__(None, None, None)
        result.peak_rss_mb, result.peak_rss_delta_mb = peak.peak_mb, peak.delta_mb
        if memory is not None:
            subject.close(memory)
        shutil.rmtree(workdir, ignore_errors=True)
        result.load_after = load_average()
    return result


def probe_stock_get_s(history: Sequence[ChatMessage], probe: int = 1000) -> tuple[int, float]:
    """One stock ``ChatMemoryBuffer(3000).get()`` on the first ``probe`` messages, in s
    (its cost, which grows with the square of the history, dominates stock's get())."""
    n = min(probe, len(history))
    buffer = ChatMemoryBuffer.from_defaults(token_limit=3000)
    buffer.set([m.model_copy(deep=True) for m in history[:n]])
    t0 = time.perf_counter()
    buffer.get()
    return n, time.perf_counter() - t0


def predicted_stock_get_s(
    size: int, earlier: Sequence[RunResult], history: Sequence[ChatMessage]
) -> tuple[float, str]:
    """Stock's get() at ``size`` messages, extrapolated quadratically from the largest
    finished stock run of this benchmark, else from :func:`probe_stock_get_s`."""
    done = [r for r in earlier if r.ok and r.get_ms and r.size < size]
    if done:
        base = max(done, key=lambda r: r.size)
        seconds = (median(base.get_ms) or 0.0) / 1000.0
        return seconds * (size / base.size) ** 2, f"from get() at {base.size}"
    n, seconds = probe_stock_get_s(history)
    return seconds * (size / n) ** 2, f"from a ChatMemoryBuffer.get() probe at {n}"


def _ratio(stock: Optional[float], ours: Optional[float]) -> Optional[float]:
    return stock / ours if stock is not None and ours else None


def ratios(results: Sequence[RunResult]) -> list[dict[str, Any]]:
    """stock/ours per embedding and size, where both runs finished."""
    rows = []
    by_key = {(r.memory, r.embedding, r.size): r for r in results}
    for r in results:
        if r.memory != OURS:
            continue
        stock = by_key.get((STOCK, r.embedding, r.size))
        if stock is None or not (r.ok and stock.ok):
            continue
        a, b = stock.summary(), r.summary()
        rows.append({
            "embedding": r.embedding, "size": r.size,
            **{f"{key}_stock_over_ours": _ratio(a[key], b[key]) for key in (
                "get_median_ms", "get_p95_ms", "get_input_median_ms", "put_user_median_ms",
                "put_assistant_median_ms", "turn_median_ms", "build_s")},
        })
    return rows


def run(
    sizes: Sequence[int],
    embeddings: Sequence[str],
    *,
    gets: int,
    input_gets: int,
    batch: int,
    seed: int,
    log: Callable[[str], None] = print,
    only: Optional[Sequence[str]] = None,
) -> dict[str, Any]:
    """Run every memory (or the ones named in ``only``) with every embedding at every
    size; return the report."""
    started = time.time()
    models = make_embeddings(embeddings)
    stock_equivalent = check_stock_batch_build()
    if not stock_equivalent:
        log("warning: the batched stock build does not match put(); building stock with put()")
    stock_build = build_stock if stock_equivalent else build_stock_by_put
    results: list[RunResult] = []
    stopped: dict[tuple[str, str], int] = {}  # (memory, embedding) -> size that went over cap
    for size in sizes:
        history, fresh = make_workload(size, gets + input_gets, seed)
        for embedding in embeddings:
            for subject in subjects(stock_build):
                if only and subject.name not in only:
                    continue
                key = (subject.name, embedding)
                predicted: Optional[tuple[float, str]] = None
                if key not in stopped and subject.name == STOCK and size > PREDICT_ABOVE:
                    predicted = predicted_stock_get_s(
                        size, [r for r in results if r.memory == STOCK and r.embedding == embedding],
                        history)
                if key in stopped:
                    result = RunResult(subject.name, embedding, size,
                                       status=f"over cap (at {stopped[key]} messages already)")
                elif predicted is not None and predicted[0] > GET_CAP_S:
                    result = RunResult(subject.name, embedding, size, status=(
                        f"over cap (predicted get {predicted[0]:.0f} s > {GET_CAP_S:.0f} s, "
                        f"{predicted[1]}; not run)"))
                    stopped[key] = size
                    log(f"  {subject.name:<22} {embedding:<8} N={size:<6} {result.status}")
                else:
                    log(f"  {subject.name:<22} {embedding:<8} N={size:<6} (load {load_average()}) ...")
                    result = run_one(subject, embedding, models[embedding], history, fresh,
                                     gets=gets, input_gets=input_gets, batch=batch)
                    if not result.ok:
                        stopped[key] = size
                results.append(result)
    return {
        "meta": {
            "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)),
            "duration_s": round(time.time() - started, 1),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "versions": package_versions(("llama-index-vector-stores-chroma",)),
            "sizes": list(sizes), "embeddings": list(embeddings), "gets": gets,
            "input_gets": input_gets, "batch": batch, "seed": seed,
            "get_cap_s": GET_CAP_S, "build_cap_s": BUILD_CAP_S,
            "stock_build": "batched insert_nodes (checked equal to put)" if stock_equivalent
            else "put per message",
        },
        "results": [r.summary() for r in results],
        "ratios": ratios(results),
    }


# --------------------------------------------------------------------------- --records


def time_query_embedding(model: BaseEmbedding, texts: Sequence[str]) -> dict[str, Optional[float]]:
    """Median and p95 of one ``get_query_embedding`` call per text, in ms (after one warm-up)."""
    model.get_query_embedding("warm-up query")
    times = []
    for text in texts:
        t0 = time.perf_counter()
        model.get_query_embedding(text)
        times.append(_ms(t0))
    return {"median_ms": median(times), "p95_ms": p95(times), "n": len(times)}


def run_records(
    counts: Sequence[int], *, gets: int, seed: int, log: Callable[[str], None] = print,
    embedding: str = "fake",
) -> dict[str, Any]:
    """``get()`` and ``search()`` latency of ours with N long-term records of one user.

    Each N: a fresh ``ComposableMemory`` on a temporary directory, N messages put with
    ``put_messages`` in batches of :data:`RECORDS_BATCH` and indexed (``flush``), all
    with ``embedding`` (ingest and query: the store holds one dimension and one model;
    the fake one by default). Then ``gets`` turns of put(user), get() (timed), put(reply),
    ``gets`` ``get(input=question)`` calls with fresh questions (timed: "get(q)", the
    question's embedding included) and ``gets`` ``search(text, k=10)`` calls (timed) with
    fresh texts. The offline model's own single-query embedding time is measured apart,
    so that get() with the offline model is about ``get fake + offline query - fake
    query``; with ``embedding="offline"``, get(q) is measured against it directly.
    """
    fake = FakeEmbedding()
    model = fake if embedding == "fake" else make_embeddings([embedding])[embedding]
    rows = []
    queries = [u.content or "" for u, _ in make_workload(0, gets, seed + 1)[1]]
    for count in counts:
        log(f"  records N={count:<7} (load {load_average()}) ...")
        history, fresh = make_workload(count, gets, seed)
        row: dict[str, Any] = {"records": count, "embedding": embedding, "load_before": load_average()}
        workdir = Path(tempfile.mkdtemp(prefix="llama-memory-records-"))
        memory = None
        with PeakMemory() as peak:
            try:
                memory = make_ours(model, workdir / "memory")
                t0 = time.perf_counter()
                for i in range(0, len(history), RECORDS_BATCH):
                    memory.put_messages(list(history[i : i + RECORDS_BATCH]))
                for source in memory.sources:
                    getattr(source, "flush", lambda: None)()
                row["ingest_s"] = time.perf_counter() - t0
                row["ingest_msgs_per_s"] = count / row["ingest_s"] if row["ingest_s"] else None
                memory.get()  # warm-up
                get_ms, put_ms, search_ms, asked_ms = [], [], [], []
                for user, reply in fresh:
                    t0 = time.perf_counter()
                    memory.put(user.model_copy(deep=True))
                    put_ms.append(_ms(t0))
                    t0 = time.perf_counter()
                    memory.get()
                    get_ms.append(_ms(t0))
                    row["recalled"] = len(memory.last_block.records)
                    memory.put(reply.model_copy(deep=True))
                for query in queries:
                    t0 = time.perf_counter()
                    memory.get(input=query)
                    asked_ms.append(_ms(t0))
                for query in queries:
                    t0 = time.perf_counter()
                    found = memory.search(query, k=10)
                    search_ms.append(_ms(t0))
                    row["search_found"] = len(found)
            finally:
                if memory is not None:
                    memory.close()
                shutil.rmtree(workdir, ignore_errors=True)
        row.update(
            get_ms=get_ms, search_ms=search_ms, put_ms=put_ms, get_question_ms=asked_ms,
            get_median_ms=median(get_ms), get_p95_ms=p95(get_ms), get_question_median_ms=median(asked_ms),
            search_median_ms=median(search_ms), search_p95_ms=p95(search_ms),
            put_median_ms=median(put_ms),
            peak_rss_mb=peak.peak_mb, peak_rss_delta_mb=peak.delta_mb, load_after=load_average(),
        )
        rows.append(row)
    offline = make_embeddings(["offline"])["offline"]
    query_embedding = {"offline": time_query_embedding(offline, queries),
                       "fake": time_query_embedding(fake, queries)}
    extra = (query_embedding["offline"]["median_ms"] or 0.0) - (query_embedding["fake"]["median_ms"] or 0.0)
    for row in rows:
        row["get_offline_estimate_ms"] = (row["get_median_ms"] or 0.0) + extra
        row["search_offline_estimate_ms"] = (row["search_median_ms"] or 0.0) + extra
        own = query_embedding["offline" if embedding == "offline" else "fake"]["median_ms"]
        # get(question) against one embedding of a question by the records' own model.
        row["get_question_over_query_embedding"] = (
            row["get_question_median_ms"] / own if own and row["get_question_median_ms"] else None)
    return {"rows": rows, "query_embedding": query_embedding, "embedding": embedding}


# --------------------------------------------------------------------------- --bulk


def model_rate(embed_model: BaseEmbedding, n: int, seed: int) -> dict[str, Any]:
    """The embedding model's own rate on the bulk workload's texts (the first ``n``):
    one ``get_text_embedding_batch`` call, after a warm-up; what a bulk import can reach
    at best when every message is embedded."""
    texts = [m.content or "" for m in make_workload(n, 0, seed)[0]]
    embed_model.get_text_embedding_batch(texts[:64])
    load = load_average()
    t0 = time.perf_counter()
    embed_model.get_text_embedding_batch(texts)
    seconds = time.perf_counter() - t0
    return {"texts": n, "seconds": seconds, "texts_per_s": n / seconds if seconds else None,
            "load_before": load, "load_after": load_average()}



def run_bulk(
    n: int, embedding: str, embed_model: BaseEmbedding, *, batch: int, seed: int,
    stock_build: Callable[..., None] = build_stock_by_put, log: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """Bulk import rate (messages/s) of ``put_messages`` in batches of ``batch``.

    Ours: ``put_messages`` per batch, then ``flush()`` of its sources, all inside the
    timing (embedding and Chroma writes counted). ``Memory``: ``put_messages`` per
    batch (what leaves its window is embedded inside the call; the last window is not
    embedded, as ``Memory`` leaves it). Stock: its real ``put_messages`` (``put`` per
    message, which re-embeds the growing node), stopped at the build cap, the rate
    then taken over the messages it reached.
    """
    history, _ = make_workload(n, 0, seed)
    rows = []
    for subject in subjects(stock_build):
        log(f"  bulk {subject.name:<22} {embedding:<8} N={n:<6} (load {load_average()}) ...")
        row: dict[str, Any] = {"memory": subject.name, "embedding": embedding, "messages": n,
                               "batch": batch, "status": "ok", "load_before": load_average()}
        workdir = Path(tempfile.mkdtemp(prefix="llama-memory-bulk-"))
        memory = None
        messages = [m.model_copy(deep=True) for m in history]
        done = 0
        with PeakMemory() as peak:
            try:
                memory = subject.make(embed_model, workdir / "memory")
                t0 = time.perf_counter()
                deadline = t0 + BUILD_CAP_S
                for i in range(0, n, batch):
                    memory.put_messages(messages[i : i + batch])
                    done = min(n, i + batch)
                    if time.perf_counter() > deadline and done < n:
                        row["status"] = f"over cap (build > {BUILD_CAP_S:.0f} s at {done} messages)"
                        break
                if subject.name == OURS:
                    for source in memory.sources:
                        getattr(source, "flush", lambda: None)()
                elapsed = time.perf_counter() - t0
            finally:
                if memory is not None:
                    subject.close(memory)
                shutil.rmtree(workdir, ignore_errors=True)
        row.update(done=done, seconds=elapsed, msgs_per_s=done / elapsed if elapsed else None,
                   peak_rss_mb=peak.peak_mb, peak_rss_delta_mb=peak.delta_mb,
                   load_after=load_average())
        rows.append(row)
    return rows



# --------------------------------------------------------------------------- output


def _fmt(value: Optional[float], digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def format_table(report: dict[str, Any]) -> str:
    """The report as a readable table."""
    header = (f"{'memory':<22} {'embed':<7} {'N':>5} {'build s':>8} {'get med':>9} {'get p95':>9} {'get cpu':>8} "
              f"{'get(in)':>9} {'put user':>9} {'put asst':>9} {'window':>6} {'recall':>6} {'peak MB':>8} "
              f"{'+MB':>6}  status")
    lines = ["times in ms unless marked; get = get() with no input after put(user) (cpu: the "
             "process's CPU time, median); "
             "get(in) = get(input=user text); recall = records injected (no input / with input)",
             header, "-" * len(header)]
    for r in report["results"]:
        recall = f"{_fmt(r['recalled'], 0)}/{_fmt(r['recalled_with_input'], 0)}"
        lines.append(
            f"{r['memory']:<22} {r['embedding']:<7} {r['size']:>5} {_fmt(r['build_s'], 2):>8} "
            f"{_fmt(r['get_median_ms']):>9} {_fmt(r['get_p95_ms']):>9} {_fmt(r.get('get_cpu_median_ms')):>8} "
            f"{_fmt(r['get_input_median_ms']):>9} {_fmt(r['put_user_median_ms']):>9} "
            f"{_fmt(r['put_assistant_median_ms']):>9} {_fmt(r['window_messages'], 0):>6} "
            f"{recall:>6} {_fmt(r.get('peak_rss_mb'), 0):>8} {_fmt(r.get('peak_rss_delta_mb'), 0):>6}  "
            f"{r['status']} (load {r['load_before']}->{r['load_after']})"
        )
    if report["ratios"]:
        lines += ["", "stock / ours (above 1: ours is faster)",
                  f"{'embed':<7} {'N':>5} {'get med':>8} {'get p95':>8} {'get(in)':>8} "
                  f"{'put user':>8} {'put asst':>8} {'turn':>8} {'build':>8}"]
        for q in report["ratios"]:
            lines.append(
                f"{q['embedding']:<7} {q['size']:>5} "
                + " ".join(f"{_fmt(q[f'{k}_stock_over_ours'], 2):>8}" for k in (
                    "get_median_ms", "get_p95_ms", "get_input_median_ms", "put_user_median_ms",
                    "put_assistant_median_ms", "turn_median_ms", "build_s"))
            )
    if report.get("records"):
        rec = report["records"]
        q = rec["query_embedding"]
        used = rec.get("embedding", "fake")
        lines += ["", f"--records: ComposableMemory with N long-term records of one user, {used} embedding "
                  "for ingest and query (ms; search = search(text, k=10); get(q) = get(input=a new "
                  "question), its embedding included; /qe = get(q) over one query embedding of that model)",
                  f"{'records':>8} {'ingest s':>9} {'msg/s':>8} {'get med':>8} {'get p95':>8} "
                  f"{'get(q)':>8} {'/qe':>5} {'search med':>10} {'search p95':>10} {'put med':>8} {'get+offl':>9} "
                  f"{'peak MB':>8} {'+MB':>6}  load"]
        for r in rec["rows"]:
            lines.append(
                f"{r['records']:>8} {_fmt(r['ingest_s'], 2):>9} {_fmt(r['ingest_msgs_per_s'], 0):>8} "
                f"{_fmt(r['get_median_ms']):>8} {_fmt(r['get_p95_ms']):>8} "
                f"{_fmt(r.get('get_question_median_ms')):>8} {_fmt(r.get('get_question_over_query_embedding'), 2):>5} "
                f"{_fmt(r['search_median_ms']):>10} {_fmt(r['search_p95_ms']):>10} "
                f"{_fmt(r['put_median_ms'], 2):>8} {_fmt(r['get_offline_estimate_ms']):>9} "
                f"{_fmt(r['peak_rss_mb'], 0):>8} {_fmt(r['peak_rss_delta_mb'], 0):>6}  "
                f"{r['load_before']}->{r['load_after']}")
        lines.append(
            f"one query embedding: offline median {_fmt(q['offline']['median_ms'], 2)} ms "
            f"(p95 {_fmt(q['offline']['p95_ms'], 2)}), fake median {_fmt(q['fake']['median_ms'], 3)} ms; "
            "get+offl = get med + offline - fake query embedding")
    if report.get("bulk"):
        lines += ["", "--bulk: put_messages in batches, embedding included (ours: + flush())",
                  f"{'memory':<22} {'embed':<7} {'messages':>8} {'done':>7} {'seconds':>8} "
                  f"{'msgs/s':>8} {'peak MB':>8} {'+MB':>6}  status"]
        for r in report["bulk"]:
            lines.append(
                f"{r['memory']:<22} {r['embedding']:<7} {r['messages']:>8} {r['done']:>7} "
                f"{_fmt(r['seconds'], 2):>8} {_fmt(r['msgs_per_s'], 1):>8} "
                f"{_fmt(r['peak_rss_mb'], 0):>8} {_fmt(r['peak_rss_delta_mb'], 0):>6}  "
                f"{r['status']} (load {r['load_before']}->{r['load_after']})")
        own = report.get("bulk_model")
        if own and own.get("texts_per_s"):
            ours = next((r for r in report["bulk"] if r["memory"] == OURS), None)
            share = f"; ours reaches {ours['msgs_per_s'] / own['texts_per_s']:.0%} of it" if (
                ours and ours.get("msgs_per_s")) else ""
            lines.append(
                f"the model alone on the first {own['texts']} of these texts (one batch call): "
                f"{own['texts_per_s']:.1f} texts/s (load {own['load_before']}->{own['load_after']})"
                + share)
    meta = report["meta"]
    lines += ["", f"{meta['cpus']} CPUs, Python {meta['python']}, "
              + ", ".join(f"{k} {v}" for k, v in meta["versions"].items())
              + f"; stock build: {meta['stock_build']}; {meta['duration_s']} s in all"]
    return "\n".join(lines)


# --------------------------------------------------------------------------- plot


def plot_get_latency(report: dict[str, Any], path: Path) -> Path:
    """A PNG of get() median latency (log scale) against history length, one line per
    memory and embedding (runs over a cap left out, marked in the legend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    series: dict[tuple[str, str], list[tuple[int, float]]] = {}
    capped: dict[tuple[str, str], list[int]] = {}
    for r in report["results"]:
        key = (r["memory"], r["embedding"])
        if r["status"] == "ok" and r["get_median_ms"]:
            series.setdefault(key, []).append((r["size"], r["get_median_ms"]))
        else:
            capped.setdefault(key, []).append(r["size"])
    for key in sorted(set(series) | set(capped)):
        points = sorted(series.get(key, []))
        label = f"{key[0]} ({key[1]})"
        if capped.get(key):
            label += f"; over cap at {', '.join(map(str, sorted(capped[key])))}"
        if points:
            ax.plot([x for x, _ in points], [y for _, y in points], marker="o", label=label)
        else:
            ax.plot([], [], label=label)
    ax.set_yscale("log")
    sizes = [r["size"] for r in report["results"]]
    if sizes and max(sizes) >= 10 * min(sizes):
        ax.set_xscale("log")
    ax.set_xlabel("history length (messages)")
    ax.set_ylabel("get() median latency (ms, log scale)")
    meta = report["meta"]
    ax.set_title(f"get() latency per history length ({meta['gets']} gets, {meta['cpus']} CPUs)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# --------------------------------------------------------------------------- profiling


def profile_ours(
    size: int, gets: int, batch: int, seed: int, out: Optional[Path], embedding: str = "offline"
) -> str:
    """Profile ours' ``get()`` (in turns of put user, get, put reply) at ``size`` messages.

    pyinstrument is not a dependency: ``.venv/bin/pip install pyinstrument``.
    """
    try:
        from pyinstrument import Profiler
    except ImportError as exc:
        raise SystemExit("--profile needs pyinstrument: .venv/bin/pip install pyinstrument") from exc
    embed_model = make_embeddings([embedding])[embedding]
    history, fresh = make_workload(size, gets, seed)
    workdir = Path(tempfile.mkdtemp(prefix="llama-memory-profile-"))
    memory = make_ours(embed_model, workdir / "memory")
    try:
        build_ours(memory, history, batch, time.perf_counter() + 3600)
        memory.get()
        profiler = Profiler(interval=0.0005)
        for user, reply in fresh:
            memory.put(user)
            profiler.start()
            memory.get()
            profiler.stop()
            memory.put(reply)
        text = profiler.output_text(unicode=False, color=False, show_all=False)
    finally:
        memory.close()
        shutil.rmtree(workdir, ignore_errors=True)
    header = f"pyinstrument: {gets} x ComposableMemory.get() at {size} messages ({embedding} embedding)\n"
    if out is not None:
        out.write_text(header + text)
    return header + text


# --------------------------------------------------------------------------- command line


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """The command-line options."""
    parser = argparse.ArgumentParser(prog="python -m bench.speed", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100,1000,2000",
                        help="history lengths, comma-separated (10000 is opt-in); 0 with --records "
                             "or --bulk: skip the per-turn comparison")
    parser.add_argument("--gets", type=int, default=20, help="timed turns with get() (no input)")
    parser.add_argument("--input-gets", type=int, default=5,
                        help="further timed turns with get(input=user text); 0 to skip")
    parser.add_argument("--embeddings", default="offline,fake", help="offline and/or fake")
    parser.add_argument("--batch", type=int, default=100, help="messages per put_messages call of the build")
    parser.add_argument("--seed", type=int, default=1234, help="seed of the messages")
    parser.add_argument("--json", type=Path, default=None, help="also write the report as JSON here")
    parser.add_argument("--smoke", action="store_true",
                        help=f"tiny run: sizes {SMOKE_SIZES}, {SMOKE_GETS} gets, records {SMOKE_RECORDS}, "
                             f"bulk {SMOKE_BULK} with the fake embedding (a few seconds)")
    parser.add_argument("--records", default="",
                        help="also time ours' get()/search() with these numbers of long-term "
                             "records of one user (fake embedding unless --records-embedding), "
                             "e.g. 1000,10000,100000")
    parser.add_argument("--records-embedding", default="fake", choices=("fake", "offline"),
                        help="--records: the model of ingest and query (offline: get(q) is measured "
                             "against one query embedding of the offline model)")
    parser.add_argument("--bulk", type=int, default=0,
                        help="also time the bulk import of this many messages (put_messages in "
                             "batches of --batch, embedding included)")
    parser.add_argument("--bulk-embedding", default="offline", help="embedding of --bulk")
    parser.add_argument("--memories", default="",
                        help=f"run only these memories of the per-turn comparison, comma-separated "
                             f"(e.g. {OURS}: the stock ones take minutes at 1,000+ messages)")
    parser.add_argument("--plot", type=Path, default=None,
                        help="write a PNG of get() median latency against history length here")
    parser.add_argument("--hop-weight", type=float, default=None,
                        help="ours: the second hop's weight, 0 (off) to 1 (default: the library's)")
    parser.add_argument("--profile", type=Path, default=None,
                        help="instead of the benchmark, profile ours' get() at the largest size with "
                             "the first of --embeddings (needs pyinstrument); write the text here")
    parser.add_argument("--backend", default="sqlite",
                        help="sqlite (this comparison with LlamaIndex's memories), or sqlite,postgres: "
                             "the backends side by side (bench/pg_speed.py; history of the largest --sizes)")
    parser.add_argument("--url", default=None,
                        help="--backend postgres: an existing server (default: a throwaway one)")
    parser.add_argument("--workers", default="1,2,4", help="--backend postgres: worker processes of get()")
    parser.add_argument("--seconds", type=float, default=5.0,
                        help="--backend postgres: seconds of get() per throughput run")
    parser.add_argument("--pg-records", default="100000",
                        help="--backend postgres: one user holding this many COPY-loaded records")
    parser.add_argument("--pg-users", type=int, default=0,
                        help="--backend postgres: also this many users of --pg-per-user records each "
                             "(1000 for 1M records)")
    parser.add_argument("--pg-per-user", type=int, default=1000, help="see --pg-users")
    parser.add_argument("--pg-texts", default="real", choices=("real", "words"),
                        help="--backend postgres: the bulk records' texts: LoCoMo sentences recombined "
                             "(bench/real_texts.py), or 'words', the earlier 5 of 16 words each (every "
                             "record then matches a question's full-text search)")
    parser.add_argument("--pg-vector-copies", default="without,with",
                        help="--backend postgres: the bulk records loaded without their vector copies "
                             "(every search by pgvector: the figures before the fifth speed round), with "
                             "them (as the library writes a store: a user of up to resident_limit "
                             "records searched in memory), or both, each a load of its own")
    parser.add_argument("--embed-threads", default="share",
                        help="--backend postgres: the offline model's threads in each throughput worker, "
                             "comma-separated modes run back to back: 'share' (cores // workers, at "
                             "least 1: $LLAMA_MEMORY_EMBED_THREADS), 'cores' (every worker a thread per "
                             "core, the default before), or a number")
    args = parser.parse_args(argv)
    if args.smoke:
        args.sizes, args.gets, args.input_gets = list(SMOKE_SIZES), SMOKE_GETS, SMOKE_INPUT_GETS
        # The fake embedding for the bulk: the smoke run checks the code path, in seconds.
        args.records, args.bulk, args.bulk_embedding = list(SMOKE_RECORDS), SMOKE_BULK, "fake"
    else:
        args.sizes = [int(s) for s in str(args.sizes).split(",") if s.strip()]
        args.records = [int(s) for s in str(args.records).split(",") if s.strip()]
    if any(n < 1 for n in args.records) or args.bulk < 0:
        parser.error("--records must be positive, --bulk zero or more")
    args.embeddings = [e.strip() for e in args.embeddings.split(",") if e.strip()]
    if args.sizes == [0] and (args.records or args.bulk or "postgres" in args.backend):
        args.sizes = []  # --sizes 0: only the --records / --bulk modes
    elif not args.sizes or min(args.sizes) < 1 or args.gets < 1 or args.input_gets < 0 or args.batch < 1:
        parser.error("sizes and --gets must be positive, --input-gets zero or more, --batch positive")
    if args.hop_weight is not None and not 0 <= args.hop_weight <= 1:
        parser.error(f"--hop-weight is between 0 (no second hop) and 1, got {args.hop_weight}")
    return args


def main(argv: Optional[Sequence[str]] = None) -> dict[str, Any]:
    """Run the benchmark, print the table, write the JSON if asked; return the report."""
    args = parse_args(argv)
    global HOP_WEIGHT
    HOP_WEIGHT = args.hop_weight
    if "postgres" in args.backend.split(","):
        from bench import pg_speed

        return pg_speed.main(args)
    if args.backend != "sqlite":
        raise SystemExit(f"--backend takes sqlite and/or postgres, not {args.backend!r}")
    if args.profile is not None:
        text = profile_ours(max(args.sizes), args.gets, args.batch, args.seed, args.profile,
                            args.embeddings[0])
        print(text)
        return {"profile": text}
    print(f"bench.speed: sizes {args.sizes}, embeddings {args.embeddings}, {args.gets} gets "
          f"+ {args.input_gets} gets with input; load average {load_average()}", flush=True)
    log = lambda s: print(s, flush=True)  # noqa: E731
    if args.sizes:
        report = run(args.sizes, args.embeddings, gets=args.gets, input_gets=args.input_gets,
                     batch=args.batch, seed=args.seed, log=log,
                     only=[m.strip() for m in args.memories.split(",") if m.strip()])
    else:
        report = {"meta": {
            "started": time.strftime("%Y-%m-%d %H:%M:%S"), "duration_s": 0.0,
            "python": platform.python_version(), "platform": platform.platform(),
            "cpus": os.cpu_count(), "versions": package_versions(("llama-index-vector-stores-chroma",)), "sizes": [], "gets": args.gets,
            "batch": args.batch, "seed": args.seed, "stock_build": "not run",
        }, "results": [], "ratios": []}
    started = time.time()
    if args.records:
        report["records"] = run_records(args.records, gets=args.gets, seed=args.seed, log=log,
                                        embedding=args.records_embedding)
    if args.bulk:
        model = make_embeddings([args.bulk_embedding])[args.bulk_embedding]
        report["bulk_model"] = model_rate(model, min(args.bulk, 2000), args.seed)
        report["bulk"] = run_bulk(args.bulk, args.bulk_embedding, model, batch=args.batch,
                                  seed=args.seed, log=log)
    report["meta"].update(records=args.records, bulk=args.bulk, bulk_embedding=args.bulk_embedding,
                          llama_memory_vector_store="ChromaVectorStore" if ChromaVectorStore
                          else "not installed: Memory+VectorBlock not run")
    report["meta"]["duration_s"] = round(report["meta"]["duration_s"] + time.time() - started, 1)
    if args.plot is not None and report["results"]:
        plot_get_latency(report, args.plot)
    print()
    print(format_table(report))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2))
        print(f"\nwrote {args.json}")
    if args.plot is not None and report["results"]:
        print(f"wrote {args.plot}")
    return report


if __name__ == "__main__":
    main()
    sys.exit(0)
