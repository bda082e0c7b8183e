"""Speed of ``ComposableMemory`` against LlamaIndex's ``SimpleComposableMemory``, per agent turn.

What it measures, in one run, on the same machine and the same messages:

* **ours**: ``ComposableMemory.from_defaults(user_id="u", path=<tmpdir>)``: the
  default ``ChatBuffer`` (token limit 3000, persisted in SQLite) plus the default
  ``VectorSource`` (SQLite record + embedded Chroma index);
* **stock**: ``SimpleComposableMemory.from_defaults(primary_memory=
  ChatMemoryBuffer.from_defaults(token_limit=3000), secondary_memory_sources=
  [VectorMemory.from_defaults(vector_store=None, embed_model=..., retriever_kwargs=
  {"similarity_top_k": 2})])``;

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
The caps are checked between calls, so a call is never interrupted.

Run::

    .venv/bin/python -m bench.speed                        # sizes 100,1000,2000, 20 gets
    .venv/bin/python -m bench.speed --sizes 100,500 --gets 10 --json bench/results/speed.json
    .venv/bin/python -m bench.speed --smoke                # a few seconds (used by the tests)
    .venv/bin/python -m bench.speed --profile out.txt --sizes 2000 --embeddings offline
                                                           # pyinstrument profile of ours' get()

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

from llama_memory import ComposableMemory, default_embedding

#: Dimension of both embeddings.
DIMENSION = 384
#: A stock ``get()`` slower than this stops that size.
GET_CAP_S = 30.0
#: A stock history build slower than this stops that size.
BUILD_CAP_S = 120.0
#: Names of the two memories as reported.
OURS = "ComposableMemory"
STOCK = "SimpleComposableMemory"
#: Sizes, gets and input-gets of ``--smoke``.
SMOKE_SIZES = (20,)
SMOKE_GETS = 3
SMOKE_INPUT_GETS = 1


# --------------------------------------------------------------------------- embeddings


class FakeEmbedding(BaseEmbedding):
    """A zero-cost embedding: a unit vector seeded by a hash of the text.

    Deterministic (the same text always gives the same vector), never all
    zeros, and of the same dimension as the offline model, so both memories run
    their real code paths while the model itself costs microseconds.
    """

    model_name: str = Field(default="bench-fake-hash", description="Name of the model.")
    dimension: int = Field(default=DIMENSION, description="Dimension of the vectors.")

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


def make_ours(embed_model: BaseEmbedding, path: Path) -> ComposableMemory:
    """Ours with its defaults: ChatBuffer + VectorSource (SQLite + Chroma) under ``path``."""
    return ComposableMemory.from_defaults(user_id="u", path=path, embed_model=embed_model)


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


def subjects(stock_build: Callable[..., None]) -> list[Subject]:
    """Ours, then stock."""
    return [
        Subject(OURS, make_ours, build_ours, _ours_recalled, lambda m: m.close()),
        Subject(STOCK, make_stock, stock_build, _stock_recalled, lambda m: None),
    ]


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
    get_input_ms: list[float] = field(default_factory=list)
    put_user_ms: list[float] = field(default_factory=list)
    put_assistant_ms: list[float] = field(default_factory=list)
    window_messages: Optional[int] = None
    recalled: Optional[int] = None
    recalled_with_input: Optional[int] = None
    load_before: Optional[float] = None
    load_after: Optional[float] = None

    @property
    def ok(self) -> bool:
        """Whether the run finished within the caps."""
        return self.status == "ok"

    def summary(self) -> dict[str, Any]:
        """The run as JSON-ready data: raw timings plus medians and p95."""
        data = asdict(self)
        data.update(
            get_median_ms=median(self.get_ms), get_p95_ms=p95(self.get_ms),
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
    gc.collect()
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
            t0 = time.perf_counter()
            output = memory.get(input=user.content) if with_input else memory.get()
            elapsed = _ms(t0)
            (result.get_input_ms if with_input else result.get_ms).append(elapsed)
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
        if memory is not None:
            subject.close(memory)
        shutil.rmtree(workdir, ignore_errors=True)
        result.load_after = load_average()
    return result


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
) -> dict[str, Any]:
    """Run every memory with every embedding at every size; return the report."""
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
                key = (subject.name, embedding)
                if key in stopped:
                    result = RunResult(subject.name, embedding, size,
                                       status=f"over cap (at {stopped[key]} messages already)")
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
            "versions": _versions(),
            "sizes": list(sizes), "embeddings": list(embeddings), "gets": gets,
            "input_gets": input_gets, "batch": batch, "seed": seed,
            "get_cap_s": GET_CAP_S, "build_cap_s": BUILD_CAP_S,
            "stock_build": "batched insert_nodes (checked equal to put)" if stock_equivalent
            else "put per message",
        },
        "results": [r.summary() for r in results],
        "ratios": ratios(results),
    }


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in ("llama-memory", "llama-index-core", "chromadb", "onnxruntime", "tiktoken"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "?"
    return found


# --------------------------------------------------------------------------- output


def _fmt(value: Optional[float], digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def format_table(report: dict[str, Any]) -> str:
    """The report as a readable table."""
    header = (f"{'memory':<22} {'embed':<7} {'N':>5} {'build s':>8} {'get med':>9} {'get p95':>9} "
              f"{'get(in)':>9} {'put user':>9} {'put asst':>9} {'window':>6} {'recall':>6}  status")
    lines = ["times in ms unless marked; get = get() with no input after put(user); "
             "get(in) = get(input=user text); recall = records injected (no input / with input)",
             header, "-" * len(header)]
    for r in report["results"]:
        recall = f"{_fmt(r['recalled'], 0)}/{_fmt(r['recalled_with_input'], 0)}"
        lines.append(
            f"{r['memory']:<22} {r['embedding']:<7} {r['size']:>5} {_fmt(r['build_s'], 2):>8} "
            f"{_fmt(r['get_median_ms']):>9} {_fmt(r['get_p95_ms']):>9} "
            f"{_fmt(r['get_input_median_ms']):>9} {_fmt(r['put_user_median_ms']):>9} "
            f"{_fmt(r['put_assistant_median_ms']):>9} {_fmt(r['window_messages'], 0):>6} "
            f"{recall:>6}  {r['status']} (load {r['load_before']}->{r['load_after']})"
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
    meta = report["meta"]
    lines += ["", f"{meta['cpus']} CPUs, Python {meta['python']}, "
              + ", ".join(f"{k} {v}" for k, v in meta["versions"].items())
              + f"; stock build: {meta['stock_build']}; {meta['duration_s']} s in all"]
    return "\n".join(lines)


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
    parser.add_argument("--sizes", default="100,1000,2000", help="history lengths, comma-separated")
    parser.add_argument("--gets", type=int, default=20, help="timed turns with get() (no input)")
    parser.add_argument("--input-gets", type=int, default=5,
                        help="further timed turns with get(input=user text); 0 to skip")
    parser.add_argument("--embeddings", default="offline,fake", help="offline and/or fake")
    parser.add_argument("--batch", type=int, default=100, help="messages per put_messages call of the build")
    parser.add_argument("--seed", type=int, default=1234, help="seed of the messages")
    parser.add_argument("--json", type=Path, default=None, help="also write the report as JSON here")
    parser.add_argument("--smoke", action="store_true",
                        help=f"tiny run: sizes {SMOKE_SIZES}, {SMOKE_GETS} gets (a few seconds)")
    parser.add_argument("--profile", type=Path, default=None,
                        help="instead of the benchmark, profile ours' get() at the largest size with "
                             "the first of --embeddings (needs pyinstrument); write the text here")
    args = parser.parse_args(argv)
    if args.smoke:
        args.sizes, args.gets, args.input_gets = list(SMOKE_SIZES), SMOKE_GETS, SMOKE_INPUT_GETS
    else:
        args.sizes = [int(s) for s in str(args.sizes).split(",") if s.strip()]
    args.embeddings = [e.strip() for e in args.embeddings.split(",") if e.strip()]
    if not args.sizes or min(args.sizes) < 1 or args.gets < 1 or args.input_gets < 0 or args.batch < 1:
        parser.error("sizes and --gets must be positive, --input-gets zero or more, --batch positive")
    return args


def main(argv: Optional[Sequence[str]] = None) -> dict[str, Any]:
    """Run the benchmark, print the table, write the JSON if asked; return the report."""
    args = parse_args(argv)
    if args.profile is not None:
        text = profile_ours(max(args.sizes), args.gets, args.batch, args.seed, args.profile,
                            args.embeddings[0])
        print(text)
        return {"profile": text}
    print(f"bench.speed: sizes {args.sizes}, embeddings {args.embeddings}, {args.gets} gets "
          f"+ {args.input_gets} gets with input; load average {load_average()}", flush=True)
    report = run(args.sizes, args.embeddings, gets=args.gets, input_gets=args.input_gets,
                 batch=args.batch, seed=args.seed, log=lambda s: print(s, flush=True))
    print()
    print(format_table(report))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2))
        print(f"\nwrote {args.json}")
    return report


if __name__ == "__main__":
    main()
    sys.exit(0)
