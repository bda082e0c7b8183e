"""Retrieval quality of ``ComposableMemory`` on LoCoMo, against lexical and dense baselines.

The protocol is DESIGN.md section 6. For each conversation (one LoCoMo sample):

* **ours**: a fresh ``ComposableMemory`` (``from_defaults``: the default chat
  buffer and vector source, offline embedding) in a temporary directory, with
  ``user_id`` = the sample id. Each LoCoMo session is written by its own memory
  (``session_id=f"session_{n}"`` on the same path, closed afterwards) in one
  ``put_messages`` call: speaker_a's turns as USER, speaker_b's as ASSISTANT,
  content ``"<speaker>: <text>"`` plus ``" [shares a photo: <caption>]"`` when the
  turn has a ``blip_caption``, and ``additional_kwargs={"message_id": dia_id,
  "timestamp": <session date, ISO 8601>}`` (a turn whose session date cannot be
  read gets no timestamp; counted). Then a memory for session ``"eval"``
  (``top_k=10``, empty buffer) answers every question: ``search(question,
  k=max_k)`` is scored, and ``get(question)`` gives the size of the memory block
  an agent would receive (``last_block.token_count``).
* **bm25**: the same turn texts in an in-memory SQLite FTS5 table ranked by
  ``bm25()``; the question's words (punctuation stripped, each quoted) OR-ed.
* **bm25-dates**: as bm25, each turn's text prefixed with its session date
  ("8 May 2023").
* **dense**: the same turn texts embedded with ``llama_memory.default_embedding()``,
  exact cosine over numpy (no memory, no Chroma).
* **ours-messages** (ablation, only when named in ``--retrievers``): ``ours`` with
  its vector source set to return single messages (``excerpt_messages=1``): the same
  fused ranking, without excerpts.
* **ours-summaries** (only when named): ``ours`` with each session summarised offline
  (``memory.summarise()``, extractive) after it is written. A summary record carries
  every message id of its session as provenance; it is credited here only with the
  turns it quotes (a sentence of theirs is in it), so a summary never scores for turns
  it does not show.
* **ours-no-salience** (ablation, only when named): ``ours`` ranked by the match alone
  (``NO_SALIENCE``: no importance and recency terms, the ranking without them).

What a record is: the baselines return one turn per record. ``ours`` returns
excerpts (``llama_memory.retrieval.excerpts``): a record may carry several consecutive turns
of one session, and every message id behind it is scored, so ``ours@10`` is ten
records holding up to 25 turns (the report gives the mean number of turns behind a
search's top-k as "messages per search"; compare the baselines at that k with
``--k 10,25``). Only ``search(question, max(k))`` is asked: ``ours@5`` is the first
five records of that search. The block ``get()`` would inject is scored too (turn
recall of the message ids of the records it shows), with its token count.

Questions of categories 1-4 (1 multi-hop, 2 temporal, 3 open-domain, 4
single-hop) with evidence are scored; category 5 (adversarial) is skipped.
Evidence glitches are repaired (:func:`repair_evidence`) and counted. For each
k: turn recall@k (fraction of the evidence turns among the message ids of the
top-k records; a record carrying several ids is one of the k), any@k (at least
one found), all@k (all found), session recall@k (fraction of the evidence
sessions with a turn among them), per category and overall (micro-averaged over
questions). Also: ingest time per conversation, search latency, and the mean
token count of the injected block.

Run::

    .venv/bin/python -m bench.locomo                          # ../shared/data/locomo/locomo_dev.json
    .venv/bin/python -m bench.locomo --json bench/results/locomo.json > bench/results/locomo.txt
    .venv/bin/python -m bench.locomo --retrievers bm25,bm25-dates --k 5,10,20
    .venv/bin/python -m bench.locomo --smoke                  # tests/data/locomo_tiny.json, seconds
    .venv/bin/python -m bench.locomo --conversations 0,1,2    # a development split; 3,4 held out
    .venv/bin/python -m bench.locomo --retrievers ours --flows get,agent,kept   # as an agent asks

LoCoMo is CC BY-NC 4.0: it is read from outside the repository for evaluation,
never copied into it. The report names questions and turns by id only
(conversation, ``qa_index`` into its ``qa`` list, dia_ids), never by their text.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Optional

import numpy as np

from bench.asking import FLOW_TITLES, FLOWS
from bench.versions import package_versions

REPO_ROOT = Path(__file__).resolve().parents[1]
#: Default data: five LoCoMo conversations, outside the repository.
DEFAULT_DATA = REPO_ROOT / ".." / "shared" / "data" / "locomo" / "locomo_dev.json"
#: The synthetic fixture of ``--smoke``.
SMOKE_DATA = REPO_ROOT / "tests" / "data" / "locomo_tiny.json"
#: Scored categories, by LoCoMo number.
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
OVERALL = "overall"
#: Every retriever, in report order.
RETRIEVERS = ("ours", "bm25", "bm25-dates", "dense", "ours-messages", "ours-summaries", "ours-no-salience")
#: Short column labels of the table.
SHORT = {"ours": "ours", "bm25": "bm25", "bm25-dates": "bm25d", "dense": "dense", "ours-messages": "oursm",
         "ours-summaries": "ourssum", "ours-no-salience": "oursns"}
#: What ``--retrievers`` runs when not given (``ours-messages`` is an ablation, asked for by name).
DEFAULT_RETRIEVERS = ("ours", "bm25", "bm25-dates", "dense")
#: Metrics per k, in report order.
METRICS = ("turn_recall", "any", "all", "session_recall")
METRIC_TITLES = {
    "turn_recall": "turn recall@k (fraction of evidence turns among the top-k records' ids)",
    "any": "any@k (at least one evidence turn found)",
    "all": "all@k (every evidence turn found)",
    "session_recall": "session recall@k (fraction of evidence sessions found)",
}
#: ``top_k`` of the memory whose ``get()`` block is measured.
BLOCK_TOP_K = 10
#: FTS5 tokenizer of the bm25 baselines (SQLite's default).
FTS_TOKENIZER = "unicode61"
#: Question words ``--bm25-stopwords`` leaves out of the bm25 queries (off by default:
#: OR-ing "what", "did", "the"... lets turns full of common words into the top k).
STOPWORDS = frozenset(
    "a an the of to in on at for and or is are was were be been do does did what when where who "
    "whom which why how has have had her his their they she he it its i you my your with by from "
    "as that this about would could should can will any some after before s".split()
)


# --------------------------------------------------------------------------- dates

_MONTHS = {
    name: number
    for number, names in enumerate(
        (("january", "jan"), ("february", "feb"), ("march", "mar"), ("april", "apr"),
         ("may",), ("june", "jun"), ("july", "jul"), ("august", "aug"),
         ("september", "sep", "sept"), ("october", "oct"), ("november", "nov"),
         ("december", "dec")),
        start=1,
    )
    for name in names
}
_TIME = r"(?:(?P<hour>\d{1,2})[:.](?P<minute>\d{2})\s*(?:(?P<ampm>[ap])\.?\s*m\.?)?\s*(?:on\s+|,\s*)?)?"
_DAY_MONTH = r"(?P<day>\d{1,2})(?:st|nd|rd|th)?\s+(?P<month>[a-z]+)\.?"
_MONTH_DAY = r"(?P<month2>[a-z]+)\.?\s+(?P<day2>\d{1,2})(?:st|nd|rd|th)?"
_DATE_RE = re.compile(
    rf"^\s*{_TIME}(?:{_DAY_MONTH}|{_MONTH_DAY}),?\s+(?P<year>\d{{4}})\s*$", re.IGNORECASE
)


def parse_session_date(text: Any) -> Optional[datetime]:
    """A LoCoMo session date ("1:56 pm on 8 May, 2023") as a naive datetime, or None.

    Tolerates case, extra spaces, a missing comma, "a.m."/"am", a 24-hour time
    without am/pm, no time at all (midnight), month abbreviations, ordinal
    suffixes ("8th") and month-first dates ("May 8, 2023"). Anything it cannot
    read with certainty (no year, an unknown month, an impossible day or hour)
    gives None rather than a guess.
    """
    if not isinstance(text, str):
        return None
    match = _DATE_RE.match(text)
    if match is None:
        return None
    month_name = (match["month"] or match["month2"] or "").lower()
    day = match["day"] or match["day2"]
    month = _MONTHS.get(month_name)
    if month is None or day is None:
        return None
    hour = minute = 0
    if match["hour"] is not None:
        hour, minute = int(match["hour"]), int(match["minute"])
        ampm = (match["ampm"] or "").lower()
        if ampm:
            if not 1 <= hour <= 12:
                return None
            hour = hour % 12 + (12 if ampm == "p" else 0)
    try:
        return datetime(int(match["year"]), month, int(day), hour, minute)
    except ValueError:
        return None


def date_prefix(when: Optional[datetime], raw: str) -> str:
    """The date as the bm25-dates baseline writes it before a turn ("8 May 2023")."""
    if when is None:
        return raw.strip()
    return f"{when.day} {when.strftime('%B')} {when.year}"


# --------------------------------------------------------------------------- evidence

_ID_RE = re.compile(r"^D\s*(?P<colon>:)?\s*(?P<session>\d+)\s*:\s*(?P<turn>\d+)$", re.IGNORECASE)
_SPLIT_RE = re.compile(r"[;,\s]+")
#: The glitch counters of :func:`repair_evidence`, in report order.
GLITCHES = ("split", "colon", "zero_padded", "bare", "malformed", "past_end", "unknown", "duplicate")


def dia_session(dia_id: str) -> int:
    """The session number of a well-formed dia_id ("D3:5" -> 3)."""
    return int(dia_id[1:].split(":", 1)[0])


def repair_evidence(
    raw: Iterable[Any], known_ids: Collection[str], counts: Optional[Counter] = None
) -> list[str]:
    """The evidence list with LoCoMo's glitches repaired, known ids only, in order.

    * several ids in one string ("D8:6; D9:17", "D8:6 D9:17"): split (``split``);
    * "D:11:26" -> "D11:26" (``colon``);
    * zero-padded numbers "D30:05" -> "D30:5" (``zero_padded``);
    * a bare "D" or an empty string: dropped (``bare``); any other unreadable
      string: dropped (``malformed``);
    * a well-formed id not in ``known_ids``: dropped, as ``past_end`` when its
      session exists but has fewer turns, else ``unknown``;
    * an id repeated (after repair): kept once (``duplicate``).

    ``counts`` (a Counter) is incremented per glitch when given.
    """
    counts = counts if counts is not None else Counter()
    known = set(known_ids)
    last_turn: dict[int, int] = {}
    for dia_id in known:
        match = _ID_RE.match(dia_id)
        if match:
            session = int(match["session"])
            last_turn[session] = max(last_turn.get(session, 0), int(match["turn"]))
    repaired: list[str] = []
    for item in raw:
        parts = [p for p in _SPLIT_RE.split(str(item).strip()) if p]
        if len(parts) > 1:
            counts["split"] += 1
        if not parts:
            counts["bare"] += 1
        for part in parts:
            if part.upper() == "D":
                counts["bare"] += 1
                continue
            match = _ID_RE.match(part)
            if match is None:
                counts["malformed"] += 1
                continue
            if match["colon"]:
                counts["colon"] += 1
            session_text, turn_text = match["session"], match["turn"]
            if (len(session_text) > 1 and session_text.startswith("0")) or (
                len(turn_text) > 1 and turn_text.startswith("0")
            ):
                counts["zero_padded"] += 1
            session, turn = int(session_text), int(turn_text)
            dia_id = f"D{session}:{turn}"
            if dia_id not in known:
                counts["past_end" if session in last_turn and turn > last_turn[session] else "unknown"] += 1
                continue
            if dia_id in repaired:
                counts["duplicate"] += 1
                continue
            repaired.append(dia_id)
    return repaired


# --------------------------------------------------------------------------- data


@dataclass
class Turn:
    """One turn as every retriever sees it."""

    dia_id: str
    session: int
    speaker: str
    is_speaker_a: bool
    text: str  # "<speaker>: <text>[ [shares a photo: <caption>]]"
    date_raw: str
    when: Optional[datetime]


@dataclass
class Question:
    """One scored question (categories 1-4, evidence left after repair)."""

    conversation: str
    index: int  # position in the sample's qa list
    question: str
    category: int
    evidence: list[str]
    raw_evidence: list[Any]


@dataclass
class Conversation:
    """One LoCoMo sample: its turns by session and its scored questions."""

    sample_id: str
    speaker_a: str
    speaker_b: str
    sessions: dict[int, list[Turn]]
    questions: list[Question] = field(default_factory=list)

    @property
    def turns(self) -> list[Turn]:
        return [t for n in sorted(self.sessions) for t in self.sessions[n]]


@dataclass
class Dataset:
    conversations: list[Conversation]
    evidence_counts: Counter
    skipped: Counter  # why questions were not scored
    date_stats: dict[str, Any]


def turn_text(speaker: str, text: str, caption: Optional[str]) -> str:
    """The text a turn is stored and indexed under."""
    content = f"{speaker}: {text}"
    if caption:
        content += f" [shares a photo: {caption}]"
    return content


def load_dataset(
    path: Path, limit: Optional[int] = None, select: Optional[Sequence[int]] = None
) -> Dataset:
    """Read a file of the LoCoMo schema; repair evidence; keep questions of categories 1-4.

    ``select`` keeps the samples at these 0-based positions in the file (e.g. a
    development or a held-out split); ``limit`` then keeps the first N.
    """
    samples = json.loads(Path(path).read_text(encoding="utf-8"))
    if isinstance(samples, dict):
        samples = [samples]
    if select is not None:
        missing = [i for i in select if not 0 <= i < len(samples)]
        if missing:
            raise ValueError(f"no conversations at positions {missing}: {path} holds {len(samples)}")
        samples = [samples[i] for i in select]
    if limit is not None:
        samples = samples[:limit]
    evidence_counts: Counter = Counter()
    skipped: Counter = Counter()
    date_stats: dict[str, Any] = {"sessions": 0, "unparsable_sessions": [], "turns_without_timestamp": 0,
                                  "unknown_speakers": 0}
    conversations = []
    for number, sample in enumerate(samples):
        conv = sample["conversation"]
        sample_id = str(sample.get("sample_id") or f"sample-{number}")
        speaker_a, speaker_b = conv.get("speaker_a", ""), conv.get("speaker_b", "")
        sessions: dict[int, list[Turn]] = {}
        for key, value in conv.items():
            match = re.fullmatch(r"session_(\d+)", key)
            if not match or not isinstance(value, list) or not value:
                continue
            n = int(match[1])
            raw_date = str(conv.get(f"{key}_date_time") or "")
            when = parse_session_date(raw_date)
            date_stats["sessions"] += 1
            if when is None:
                date_stats["unparsable_sessions"].append(f"{sample_id} {key}: {raw_date!r}")
                date_stats["turns_without_timestamp"] += len(value)
            turns = []
            for t in value:
                speaker = str(t.get("speaker", ""))
                if speaker not in (speaker_a, speaker_b):
                    date_stats["unknown_speakers"] += 1
                turns.append(Turn(
                    dia_id=str(t["dia_id"]), session=n, speaker=speaker,
                    is_speaker_a=speaker == speaker_a,
                    text=turn_text(speaker, str(t.get("text", "")), t.get("blip_caption")),
                    date_raw=raw_date, when=when,
                ))
            sessions[n] = turns
        conversation = Conversation(sample_id, speaker_a, speaker_b, dict(sorted(sessions.items())))
        known = {t.dia_id for t in conversation.turns}
        for index, qa in enumerate(sample.get("qa", [])):
            try:
                category = int(qa.get("category"))
            except (TypeError, ValueError):
                category = -1
            if category not in CATEGORIES:
                skipped[f"category {category}"] += 1
                continue
            raw = list(qa.get("evidence") or [])
            evidence = repair_evidence(raw, known, evidence_counts)
            if not evidence:
                skipped["no evidence"] += 1
                continue
            conversation.questions.append(
                Question(sample_id, index, str(qa["question"]), category, evidence, raw)
            )
        conversations.append(conversation)
    return Dataset(conversations, evidence_counts, skipped, date_stats)


# --------------------------------------------------------------------------- retrievers

Ranked = list[list[str]]  # records in rank order, each with the message ids behind it


class Retriever:
    """Indexes one conversation at a time and ranks records for a question."""

    name = ""

    def build(self, conversation: Conversation) -> dict[str, Any]:
        """Index the conversation; return ingest figures."""
        raise NotImplementedError

    def search(self, question: str, k: int) -> Ranked:
        raise NotImplementedError

    def block_tokens(self, question: str) -> Optional[tuple[int, int, list[str]]]:
        """(tokens, records, message ids) of the block ``get()`` would inject; None if
        not a memory."""
        return None

    def close(self) -> None:
        """Release the conversation's index."""


class Ours(Retriever):
    """``ComposableMemory`` through its public API only."""

    name = "ours"
    #: Whether each session is summarised (offline) after it is written.
    summarise = False

    def __init__(self) -> None:
        self.workdir: Optional[Path] = None
        self.memory: Any = None
        self.turn_texts: dict[str, str] = {}
        self._user = ""

    def build(self, conversation: Conversation) -> dict[str, Any]:
        self.workdir = Path(tempfile.mkdtemp(prefix="llama-memory-locomo-"))
        path = self.workdir / "memory"
        started = time.perf_counter()
        put_s, close_s = self.write(conversation, conversation.sample_id)
        ingest_s = time.perf_counter() - started
        # The store as built, before any get() marks what it showed as used (salience):
        # reopen_fresh() starts a further setting from it.
        shutil.copytree(path, self.workdir / "built")
        self._user = conversation.sample_id
        self._open()
        return {"ingest_s": ingest_s, "put_messages_s": put_s, "close_s": close_s}

    def write(self, conversation: Conversation, user_id: str) -> tuple[float, float]:
        """Put every session of ``conversation`` into the store as ``user_id`` (one
        memory per session, each turn with its date and dia_id); return the seconds spent
        in put_messages (and summarise) and in close. ``bench.noise --shared`` writes a
        second conversation as another user of the same store."""
        from llama_index.core.base.llms.types import ChatMessage, MessageRole

        from llama_memory import ComposableMemory

        assert self.workdir is not None
        path = self.workdir / "memory"
        put_s = close_s = 0.0
        for n, turns in conversation.sessions.items():
            messages = []
            for t in turns:
                if user_id == conversation.sample_id:
                    self.turn_texts[t.dia_id] = t.text
                kwargs: dict[str, Any] = {"message_id": t.dia_id}
                if t.when is not None:
                    kwargs["timestamp"] = t.when.isoformat()
                messages.append(ChatMessage(
                    role=MessageRole.USER if t.is_speaker_a else MessageRole.ASSISTANT,
                    content=t.text, additional_kwargs=kwargs,
                ))
            memory = ComposableMemory.from_defaults(
                user_id=user_id, session_id=f"session_{n}", path=path
            )
            try:
                t0 = time.perf_counter()
                memory.put_messages(messages)
                if self.summarise:
                    memory.summarise()
                t1 = time.perf_counter()
            finally:
                memory.close()
            put_s += t1 - t0
            close_s += time.perf_counter() - t1
        return put_s, close_s

    def _open(self) -> None:
        from llama_memory import ComposableMemory

        assert self.workdir is not None
        self.memory = ComposableMemory.from_defaults(
            user_id=self._user, session_id="eval", path=self.workdir / "memory", top_k=BLOCK_TOP_K
        )

    def reopen_fresh(self) -> None:
        """Close the memory and open it again on a copy of the store as :meth:`build`
        left it: a run of questions under one setting must not find the records an
        earlier setting's get() calls showed marked as used (they rank higher)."""
        assert self.workdir is not None
        self.memory.close()
        shutil.rmtree(self.workdir / "memory")
        shutil.copytree(self.workdir / "built", self.workdir / "memory")
        self._open()

    def fresh_copy(self, name: str) -> Path:
        """A copy of the store as :meth:`build` left it, in a directory of its own (a new
        path: the embedded Chroma client of a path is shared in a process, so a store
        written to must not be replaced under the same path)."""
        assert self.workdir is not None
        copy = self.workdir / name
        shutil.copytree(self.workdir / "built", copy)
        return copy

    def search(self, question: str, k: int) -> Ranked:
        return [self.credited(r) for r in self.memory.search(question, k=k)]

    def block_tokens(self, question: str) -> Optional[tuple[int, int, list[str]]]:
        self.memory.get(question)
        block = self.memory.last_block
        return block.token_count, len(block.records), [i for r in block.records for i in self.credited(r)]

    def credited(self, record: Any) -> list[str]:
        """The turns a record is scored for: its message ids; for a session summary,
        only the turns it quotes (its provenance covers the whole session)."""
        from llama_memory.read.compose import is_summary
        from llama_memory.sources.summarise import MIN_SENTENCE_CHARS, split_sentences

        if not is_summary(record):
            return list(record.message_ids)
        return [
            m for m in record.message_ids
            if any(len(s) >= MIN_SENTENCE_CHARS and s in record.text
                   for s in split_sentences(self.turn_texts.get(m, "")))
        ]

    def close(self) -> None:
        if self.memory is not None:
            self.memory.close()
            self.memory = None
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None


class OursMessages(Ours):
    """Ablation: ``ours`` with its vector source returning single messages
    (``excerpt_messages=1``) instead of excerpts: the same fused ranking, cut at k."""

    name = "ours-messages"

    def _open(self) -> None:
        super()._open()
        self.memory.source("vector").excerpt_messages = 1

    def block_tokens(self, question: str) -> Optional[tuple[int, int, list[str]]]:
        return None  # the block figures are those of ``ours``


class OursSummaries(Ours):
    """``ours`` with every session summarised offline after it is written."""

    name = "ours-summaries"
    summarise = True


class OursNoSalience(Ours):
    """Ablation: ``ours`` ranked by the match alone (no importance or recency)."""

    name = "ours-no-salience"

    def _open(self) -> None:
        from llama_memory.retrieval.ranking import NO_SALIENCE

        super()._open()
        self.memory.source("vector").salience = NO_SALIENCE


_WORD_RE = re.compile(r"\w+", re.UNICODE)


def fts_query(text: str, stopwords: Collection[str] = ()) -> str:
    """An FTS5 query OR-ing the words of ``text``: punctuation stripped, each word a
    quoted string (so AND/OR/NOT/NEAR, ``*``, ``^``, ``:`` and quotes are plain text),
    repeated words and ``stopwords`` left out. '' when no word is left."""
    words: list[str] = []
    for word in _WORD_RE.findall(text.lower()):
        if word not in words and word not in stopwords:
            words.append(word)
    return " OR ".join('"' + w.replace('"', '""') + '"' for w in words)


class BM25(Retriever):
    """SQLite FTS5 over the turns, ranked by ``bm25()``."""

    def __init__(self, with_dates: bool = False, stopwords: Collection[str] = ()) -> None:
        self.with_dates = with_dates
        self.stopwords = frozenset(stopwords)
        self.name = "bm25-dates" if with_dates else "bm25"
        self.db: Optional[sqlite3.Connection] = None

    def build(self, conversation: Conversation) -> dict[str, Any]:
        started = time.perf_counter()
        self.db = sqlite3.connect(":memory:")
        self.db.execute(
            f"CREATE VIRTUAL TABLE turns USING fts5(body, dia_id UNINDEXED, tokenize='{FTS_TOKENIZER}')"
        )
        rows = [
            ((date_prefix(t.when, t.date_raw) + " " if self.with_dates else "") + t.text, t.dia_id)
            for t in conversation.turns
        ]
        self.db.executemany("INSERT INTO turns (body, dia_id) VALUES (?, ?)", rows)
        self.db.commit()
        return {"ingest_s": time.perf_counter() - started}

    def search(self, question: str, k: int) -> Ranked:
        query = fts_query(question, self.stopwords)
        if not query or self.db is None:
            return []
        rows = self.db.execute(
            "SELECT dia_id FROM turns WHERE turns MATCH ? ORDER BY bm25(turns), rowid LIMIT ?",
            (query, k),
        ).fetchall()
        return [[r[0]] for r in rows]

    def close(self) -> None:
        if self.db is not None:
            self.db.close()
            self.db = None


class Dense(Retriever):
    """The library's offline embedding, exact cosine over numpy, one vector per turn."""

    name = "dense"

    def __init__(self) -> None:
        from llama_memory import default_embedding

        self.model = default_embedding()
        self.ids: list[str] = []
        self.matrix = np.zeros((0, 1), dtype=np.float32)

    def build(self, conversation: Conversation) -> dict[str, Any]:
        started = time.perf_counter()
        turns = conversation.turns
        self.ids = [t.dia_id for t in turns]
        vectors = np.asarray(self.model.get_text_embedding_batch([t.text for t in turns]), dtype=np.float32)
        self.matrix = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        return {"ingest_s": time.perf_counter() - started}

    def search(self, question: str, k: int) -> Ranked:
        if not self.ids:
            return []
        query = np.asarray(self.model.get_query_embedding(question), dtype=np.float32)
        scores = self.matrix @ (query / max(float(np.linalg.norm(query)), 1e-12))
        order = np.argsort(-scores, kind="stable")[:k]
        return [[self.ids[i]] for i in order]


def make_retriever(name: str, bm25_stopwords: bool = False) -> Retriever:
    if name == "ours":
        return Ours()
    if name == "ours-messages":
        return OursMessages()
    if name == "ours-summaries":
        return OursSummaries()
    if name == "ours-no-salience":
        return OursNoSalience()
    if name in ("bm25", "bm25-dates"):
        return BM25(with_dates=name == "bm25-dates", stopwords=STOPWORDS if bm25_stopwords else ())
    if name == "dense":
        return Dense()
    raise ValueError(f"unknown retriever {name!r}: choose from {', '.join(RETRIEVERS)}")


# --------------------------------------------------------------------------- scoring


def score(ranked: Ranked, evidence: Sequence[str], k: int) -> dict[str, float]:
    """The four metrics of one question at one k."""
    found_ids = {i for record in ranked[:k] for i in record}
    wanted = set(evidence)
    hit = wanted & found_ids
    sessions = {dia_session(e) for e in wanted}
    found_sessions = {dia_session(i) for i in found_ids if _ID_RE.match(i)}
    return {
        "turn_recall": len(hit) / len(wanted),
        "any": float(bool(hit)),
        "all": float(hit == wanted),
        "session_recall": len(sessions & found_sessions) / len(sessions),
    }


def aggregate(rows: Sequence[dict[str, Any]], retriever: str, ks: Sequence[int]) -> dict[str, Any]:
    """Per k, per category present and overall: n and the mean of each metric."""
    out: dict[str, Any] = {}
    for k in ks:
        by_group: dict[str, list[dict[str, float]]] = {}
        for row in rows:
            metrics = row["scores"][retriever][str(k)]
            by_group.setdefault(CATEGORIES[row["category"]], []).append(metrics)
            by_group.setdefault(OVERALL, []).append(metrics)
        out[str(k)] = {
            group: {"n": len(items), **{m: statistics.fmean(i[m] for i in items) for m in METRICS}}
            for group, items in sorted(by_group.items(), key=lambda kv: _group_order(kv[0]))
        }
    return out


def _group_order(group: str) -> int:
    names = list(CATEGORIES.values())
    return names.index(group) if group in names else len(names)


def summary(values: Sequence[float]) -> dict[str, Optional[float]]:
    if not values:
        return {"n": 0, "mean": None, "median": None, "p95": None, "max": None}
    return {
        "n": len(values),
        "mean": statistics.fmean(values),
        "median": float(np.percentile(values, 50)),
        "p95": float(np.percentile(values, 95)),
        "max": float(max(values)),
    }


# --------------------------------------------------------------------------- run


def load_average() -> Optional[list[float]]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover - not on every platform
        return None


def run(
    data: Path,
    ks: Sequence[int],
    retrievers: Sequence[str],
    limit: Optional[int] = None,
    log: Callable[[str], None] = print,
    bm25_stopwords: bool = False,
    select: Optional[Sequence[int]] = None,
    flows: Sequence[str] = ("get",),
) -> dict[str, Any]:
    """Run every retriever over every conversation (or those at positions ``select``);
    return the report. ``flows`` (:data:`bench.asking.FLOWS`): besides ``get(question)``,
    ``ours``' block is also measured with each question asked as an agent asks it (a new
    session, put then ``get()``), taken back out of the store (``agent``) or kept in the
    user's history (``kept``); each flow starts from the store as built."""
    started = time.time()
    load_before = load_average()
    dataset = load_dataset(data, limit, select)
    max_k = max(ks)
    if any(n in retrievers for n in ("ours", "ours-messages", "dense")):  # load the model outside every timing
        from llama_memory import default_embedding

        default_embedding().load()
    rows: list[dict[str, Any]] = []
    ingest: dict[str, list[dict[str, Any]]] = {name: [] for name in retrievers}
    latency_ms: dict[str, list[float]] = {name: [] for name in retrievers}
    get_ms: list[float] = []
    block_tokens: list[float] = []
    block_records: list[float] = []
    for conversation in dataset.conversations:
        turns = conversation.turns
        by_question: list[dict[str, Any]] = [
            # ids only: no LoCoMo text in the report (CC BY-NC; qa_index points into the data)
            {"conversation": q.conversation, "qa_index": q.index, "category": q.category,
             "evidence": q.evidence, "raw_evidence": q.raw_evidence, "ranked": {}, "scores": {}}
            for q in conversation.questions
        ]
        for name in retrievers:
            retriever = make_retriever(name, bm25_stopwords)
            try:
                figures = retriever.build(conversation)
                figures.update(conversation=conversation.sample_id, sessions=len(conversation.sessions),
                               turns=len(turns))
                figures["turns_per_s"] = len(turns) / figures["ingest_s"] if figures["ingest_s"] else None
                ingest[name].append(figures)
                for q, row in zip(conversation.questions, by_question):
                    t0 = time.perf_counter()
                    ranked = retriever.search(q.question, max_k)
                    latency_ms[name].append((time.perf_counter() - t0) * 1000)
                    row["ranked"][name] = ranked
                    row["scores"][name] = {str(k): score(ranked, q.evidence, k) for k in ks}
                    t0 = time.perf_counter()
                    block = retriever.block_tokens(q.question)
                    if block is not None:
                        get_ms.append((time.perf_counter() - t0) * 1000)
                        block_tokens.append(block[0])
                        block_records.append(block[1])
                        row["block_tokens"] = block[0]
                        # What the agent would see: evidence among the block's message ids.
                        row["block_recall"] = score([block[2]], q.evidence, 1)["turn_recall"]
                if name == "ours":
                    for flow in flows:
                        if flow != "get":
                            ask_in_flow(retriever, conversation, by_question, flow)
            finally:
                retriever.close()
        rows.extend(by_question)
        recall = {name: statistics.fmean(r["scores"][name][str(max_k)]["turn_recall"] for r in by_question)
                  if by_question else float("nan") for name in retrievers}
        log(f"  {conversation.sample_id}: {len(conversation.sessions)} sessions, {len(turns)} turns, "
            f"{len(by_question)} questions; turn recall@{max_k} "
            + ", ".join(f"{n} {v:.3f}" for n, v in recall.items())
            + (f"; ours ingest {ingest['ours'][-1]['ingest_s']:.1f} s" if "ours" in retrievers else "")
            + f" (load {load_average()})")
    report: dict[str, Any] = {
        "meta": {
            "data": str(data),
            "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)),
            "duration_s": round(time.time() - started, 1),
            "load_before": load_before,
            "load_after": load_average(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "versions": package_versions(),
            "ks": list(ks),
            "retrievers": list(retrievers),
            "conversations": len(dataset.conversations),
            "conversation_ids": [c.sample_id for c in dataset.conversations],
            "selected_positions": list(select) if select is not None else None,
            "turns": sum(len(c.turns) for c in dataset.conversations),
            "questions_scored": len(rows),
            "questions_skipped": dict(dataset.skipped),
            "block_top_k": BLOCK_TOP_K,
            "fts_tokenizer": FTS_TOKENIZER,
            "bm25_stopwords": sorted(STOPWORDS) if bm25_stopwords else [],
        },
        "evidence_repairs": {g: dataset.evidence_counts.get(g, 0) for g in GLITCHES},
        "dates": dataset.date_stats,
        "results": {name: aggregate(rows, name, ks) for name in retrievers},
        "head_to_head": head_to_head(rows, retrievers, max_k),
        "ingest": {name: {"per_conversation": figures, **_ingest_totals(figures)}
                   for name, figures in ingest.items()},
        "latency_ms": {name: summary(values) for name, values in latency_ms.items()},
        "messages_per_search": {name: {str(k): _messages_per_search(rows, name, k) for k in ks}
                                for name in retrievers},
        "questions": rows,
    }
    if "ours" in retrievers and any(f != "get" for f in flows):
        report["flows"] = flow_figures(rows, [f for f in FLOWS if f in flows])
    if block_tokens:  # one "ours" variant per run gives block figures (ours, ours-summaries...)
        report["latency_ms"]["ours get()"] = summary(get_ms)
        report["block"] = {"tokens": summary(block_tokens), "records": summary(block_records),
                           "empty_blocks": sum(1 for t in block_tokens if t == 0),
                           "turn_recall": _block_recall(rows)}
    return report


def ask_in_flow(retriever: "Ours", conversation: Conversation, rows: Sequence[dict[str, Any]], flow: str) -> None:
    """Ask every question of ``conversation`` in ``flow`` (an agent's flow) of the store as
    built; put the block's figures into each question's row under ``flows``."""
    from bench.asking import Asker

    asker = Asker(retriever.fresh_copy(f"flow-{flow}"), conversation.sample_id, flow, top_k=BLOCK_TOP_K,
                  credit=retriever.credited)
    try:
        for q, row in zip(conversation.questions, rows):
            shown = asker.ask(q.question)
            row.setdefault("flows", {})[flow] = {
                "block_tokens": shown.tokens, "records": shown.records,
                "block_recall": score([shown.ids], q.evidence, 1)["turn_recall"],
                "question_records": shown.question_records, "beyond_questions": shown.beyond_questions,
                "get_ms": shown.get_ms,
            }
    finally:
        asker.close()


def flow_figures(rows: Sequence[dict[str, Any]], flows: Sequence[str]) -> dict[str, Any]:
    """Per flow, overall and per conversation: block recall (per category and overall),
    mean tokens, mean tokens beyond the user's earlier questions, mean records that are
    earlier questions."""
    def figures(mine: Sequence[dict[str, Any]]) -> dict[str, Any]:
        recall: dict[str, list[float]] = {}
        for m, category in mine:
            for group in (CATEGORIES[category], OVERALL):
                recall.setdefault(group, []).append(m["block_recall"])
        return {"n": len(mine),
                "recall": {g: statistics.fmean(v) for g, v in sorted(recall.items(), key=lambda kv: _group_order(kv[0]))},
                "tokens": statistics.fmean(m["block_tokens"] for m, _ in mine),
                "beyond_questions": statistics.fmean(m.get("beyond_questions", m["block_tokens"]) for m, _ in mine),
                "question_records": statistics.fmean(m.get("question_records", 0) for m, _ in mine)}

    out: dict[str, Any] = {}
    for flow in flows:
        per_row = [((row.get("flows", {}).get(flow) if flow != "get" else
                     {"block_recall": row["block_recall"], "block_tokens": row["block_tokens"]}), row)
                   for row in rows if flow != "get" or "block_recall" in row]
        per_row = [(m, row) for m, row in per_row if m is not None]
        if not per_row:
            continue
        conversations = dict.fromkeys(row["conversation"] for _, row in per_row)
        out[flow] = {
            "overall": figures([(m, row["category"]) for m, row in per_row]),
            "per_conversation": {c: figures([(m, row["category"]) for m, row in per_row if row["conversation"] == c])
                                 for c in conversations},
        }
    return out


def _block_recall(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Turn recall of the get() block (every message id behind the records it shows),
    per category and overall."""
    by_group: dict[str, list[float]] = {}
    for row in rows:
        if "block_recall" in row:
            for group in (CATEGORIES[row["category"]], OVERALL):
                by_group.setdefault(group, []).append(row["block_recall"])
    return {g: statistics.fmean(v) for g, v in sorted(by_group.items(), key=lambda kv: _group_order(kv[0]))}


def _messages_per_search(rows: Sequence[dict[str, Any]], retriever: str, k: int) -> Optional[float]:
    """Mean number of message ids behind a search's top-k records."""
    counts = [sum(len(r) for r in row["ranked"][retriever][:k]) for row in rows]
    return statistics.fmean(counts) if counts else None


def _ingest_totals(figures: Sequence[dict[str, Any]]) -> dict[str, Any]:
    seconds = sum(f["ingest_s"] for f in figures)
    turns = sum(f["turns"] for f in figures)
    return {"total_s": seconds, "turns": turns, "turns_per_s": turns / seconds if seconds else None,
            "mean_s_per_conversation": seconds / len(figures) if figures else None}


def head_to_head(rows: Sequence[dict[str, Any]], retrievers: Sequence[str], k: int) -> dict[str, Any]:
    """Ours against each baseline, question by question, on turn recall@k; and how
    often ours' top-k ids equal the dense baseline's."""
    if "ours" not in retrievers:
        return {}
    out: dict[str, Any] = {"k": k}
    for other in retrievers:
        if other == "ours":
            continue
        per_category: dict[str, Counter] = {}
        for row in rows:
            a = row["scores"]["ours"][str(k)]["turn_recall"]
            b = row["scores"][other][str(k)]["turn_recall"]
            outcome = "ours_better" if a > b else "ours_worse" if a < b else "tie"
            for group in (CATEGORIES[row["category"]], OVERALL):
                per_category.setdefault(group, Counter())[outcome] += 1
        out[other] = {g: dict(c) for g, c in sorted(per_category.items(), key=lambda kv: _group_order(kv[0]))}
    if "dense" in retrievers and rows:
        same = sum(
            sorted(i for r in row["ranked"]["ours"][:k] for i in r)
            == sorted(i for r in row["ranked"]["dense"][:k] for i in r)
            for row in rows
        )
        out["ours_topk_ids_equal_dense"] = {"questions": same, "of": len(rows)}
    return out



# --------------------------------------------------------------------------- output


def _fmt(value: Optional[float], digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def format_table(report: dict[str, Any]) -> str:
    """The report as readable tables."""
    meta = report["meta"]
    ks, names = meta["ks"], meta["retrievers"]
    lines = [
        f"LoCoMo retrieval: {meta['conversations']} conversations, {meta['turns']} turns, "
        f"{meta['questions_scored']} questions scored (categories 1-4 with evidence); skipped: "
        + (", ".join(f"{v} {k}" for k, v in sorted(meta["questions_skipped"].items())) or "none"),
        "columns: " + ", ".join(f"{SHORT[n]} = {n}" for n in names)
        + "; overall is micro-averaged over questions; bm25 queries: every word OR-ed"
        + (" except stopwords" if meta.get("bm25_stopwords") else " (no stopword list)"),
    ]
    groups = [g for g in [*CATEGORIES.values(), OVERALL]
              if any(g in report["results"][n][str(ks[0])] for n in names)]
    columns = [(n, k) for k in ks for n in names]
    for metric in METRICS:
        lines += ["", METRIC_TITLES[metric]]
        header = f"{'category':<12} {'n':>4} " + " ".join(f"{SHORT[n] + '@' + str(k):>9}" for n, k in columns)
        lines += [header, "-" * len(header)]
        for group in groups:
            cells, count = [], None
            for n, k in columns:
                cell = report["results"][n][str(k)].get(group)
                count = cell["n"] if cell else count
                cells.append(f"{_fmt(cell[metric] if cell else None):>9}")
            lines.append(f"{group:<12} {count or 0:>4} " + " ".join(cells))
    h2h = report.get("head_to_head") or {}
    if h2h:
        lines += ["", f"ours vs each baseline, questions where ours' turn recall@{h2h['k']} is "
                  "better / worse / equal"]
        for other in names:
            if other == "ours" or other not in h2h:
                continue
            parts = [f"{g} {c.get('ours_better', 0)}/{c.get('ours_worse', 0)}/{c.get('tie', 0)}"
                     for g, c in h2h[other].items()]
            lines.append(f"  vs {other:<10} " + "; ".join(parts))
        if "ours_topk_ids_equal_dense" in h2h:
            same = h2h["ours_topk_ids_equal_dense"]
            lines.append(f"  ours' top-{h2h['k']} message ids equal dense's on {same['questions']} of "
                         f"{same['of']} questions")
    lines += ["", "ingest (s per conversation; ours: open + put_messages + close of a memory per session)"]
    header = f"{'conversation':<14} {'sessions':>8} {'turns':>6} " + " ".join(
        f"{SHORT[n] + ' s':>9}" for n in names) + (
        f" {'ours t/s':>9} {'put s':>7} {'close s':>7}" if "ours" in names else "")
    lines += [header, "-" * len(header)]
    per = {n: report["ingest"][n]["per_conversation"] for n in names}
    for i, first in enumerate(per[names[0]]):
        line = f"{first['conversation']:<14} {first['sessions']:>8} {first['turns']:>6} " + " ".join(
            f"{_fmt(per[n][i]['ingest_s'], 2):>9}" for n in names)
        if "ours" in names:
            o = per["ours"][i]
            line += f" {_fmt(o['turns_per_s'], 1):>9} {_fmt(o['put_messages_s'], 2):>7} {_fmt(o['close_s'], 2):>7}"
        lines.append(line)
    totals = report["ingest"]
    line = f"{'total':<14} {'':>8} {totals[names[0]]['turns']:>6} " + " ".join(
        f"{_fmt(totals[n]['total_s'], 2):>9}" for n in names)
    if "ours" in names:
        line += f" {_fmt(totals['ours']['turns_per_s'], 1):>9}"
    lines.append(line)
    per_search = report.get("messages_per_search", {})
    if per_search:
        lines += ["", "messages behind a search's top-k records (mean): " + "; ".join(
            f"{SHORT[n]}@{k} {_fmt(v, 1)}" for n in names for k, v in per_search.get(n, {}).items())]
    lines += ["", "query latency (ms, per question)", f"{'retriever':<12} {'median':>8} {'p95':>8} {'max':>8}"]
    for name, s in report["latency_ms"].items():
        label = "ours search" if name == "ours" else name
        lines.append(f"{label:<12} {_fmt(s['median'], 1):>8} {_fmt(s['p95'], 1):>8} {_fmt(s['max'], 1):>8}")
    if "block" in report:
        b = report["block"]
        lines += ["", f"memory block of get(question) (ours, top_k={meta['block_top_k']}, empty buffer, "
                  f"default memory_token_limit): tokens mean {_fmt(b['tokens']['mean'], 1)}, median "
                  f"{_fmt(b['tokens']['median'], 0)}, p95 {_fmt(b['tokens']['p95'], 0)}, max "
                  f"{_fmt(b['tokens']['max'], 0)}; records mean {_fmt(b['records']['mean'], 2)}; "
                  f"empty blocks {b['empty_blocks']}",
                  "  turn recall of the block's message ids: " + ", ".join(
                      f"{g} {_fmt(v)}" for g, v in b.get("turn_recall", {}).items())]
    if "flows" in report:
        lines += ["", "the block by the way the question is asked (ours, top_k 10, default budget; "
                  "recall = evidence turns among the block's message ids)"]
        lines.append(f"{'flow':<7} {'conversation':<14} {'n':>4} {'recall':>7} {'multi-hop':>9} {'tokens':>7} "
                     f"{'beyond earlier q':>16} {'earlier-q records':>17}")
        for flow, f in report["flows"].items():
            for conversation, c in [*f["per_conversation"].items(), ("all", f["overall"])]:
                lines.append(f"{flow:<7} {conversation:<14} {c['n']:>4} {_fmt(c['recall'].get(OVERALL)):>7} "
                             f"{_fmt(c['recall'].get('multi-hop')):>9} {_fmt(c['tokens'], 0):>7} "
                             f"{_fmt(c['beyond_questions'], 0):>16} {_fmt(c['question_records'], 2):>17}")
        lines.append("flows: " + "; ".join(f"{flow} = {FLOW_TITLES[flow]}" for flow in report["flows"]))
    ev, dates = report["evidence_repairs"], report["dates"]
    lines += ["", "evidence repairs: " + ", ".join(f"{k} {v}" for k, v in ev.items()),
              f"dates: {dates['sessions']} sessions, {len(dates['unparsable_sessions'])} with an "
              f"unparsable date ({dates['turns_without_timestamp']} turns without timestamp)"
              + (": " + "; ".join(dates["unparsable_sessions"][:5]) if dates["unparsable_sessions"] else "")
              + (f"; {dates['unknown_speakers']} turns by a speaker other than speaker_a/b"
                 if dates["unknown_speakers"] else "")]
    lines += ["", f"{meta['cpus']} CPUs, load {meta['load_before']} -> {meta['load_after']}, Python "
              f"{meta['python']}, " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items())
              + f"; {meta['duration_s']} s in all"]
    return "\n".join(lines)


# --------------------------------------------------------------------------- command line


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.locomo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=None,
                        help=f"a JSON file of the LoCoMo schema (default {DEFAULT_DATA})")
    parser.add_argument("--k", default="5,10", help="cut-offs, comma-separated")
    parser.add_argument("--json", type=Path, default=None, help="also write the whole report here")
    parser.add_argument("--limit-conversations", type=int, default=None, help="only the first N conversations")
    parser.add_argument("--conversations", default=None,
                        help="only the conversations at these 0-based positions in the file, "
                             "comma-separated (e.g. 0,1,2 to develop on, 3,4 held out)")
    parser.add_argument("--retrievers", default=",".join(DEFAULT_RETRIEVERS),
                        help=f"comma-separated, of {', '.join(RETRIEVERS)}")
    parser.add_argument("--bm25-stopwords", action="store_true",
                        help="leave common question words (STOPWORDS) out of the bm25 queries")
    parser.add_argument("--flows", default="get",
                        help=f"how ours' block is asked, comma-separated, of {', '.join(FLOWS)}: get = "
                             "get(question); agent = a new session per question, put then get(), the "
                             "question taken back; kept = as agent, the questions kept in history")
    parser.add_argument("--smoke", action="store_true", help=f"run on {SMOKE_DATA.relative_to(REPO_ROOT)}")
    args = parser.parse_args(argv)
    args.flows = [f.strip() for f in args.flows.split(",") if f.strip()]
    if not args.flows or any(f not in FLOWS for f in args.flows):
        parser.error(f"--flows takes {', '.join(FLOWS)}, comma-separated, not {args.flows!r}")
    if args.data is None:
        args.data = SMOKE_DATA if args.smoke else DEFAULT_DATA
    try:
        args.k = sorted({int(k) for k in str(args.k).split(",") if k.strip()})
    except ValueError:
        parser.error(f"--k takes positive integers, comma-separated, not {args.k!r}")
    if not args.k or args.k[0] < 1:
        parser.error("--k takes positive integers")
    args.retrievers = [r.strip() for r in args.retrievers.split(",") if r.strip()]
    unknown = [r for r in args.retrievers if r not in RETRIEVERS]
    if unknown or not args.retrievers:
        parser.error(f"unknown retrievers {unknown}: choose from {', '.join(RETRIEVERS)}")
    if args.conversations is not None:
        try:
            args.conversations = [int(c) for c in str(args.conversations).split(",") if c.strip()]
        except ValueError:
            parser.error(f"--conversations takes 0-based positions, comma-separated, not {args.conversations!r}")
        if not args.conversations or min(args.conversations) < 0:
            parser.error("--conversations takes 0-based positions (0 or more)")
    if args.limit_conversations is not None and args.limit_conversations < 1:
        parser.error("--limit-conversations must be positive")
    if not args.data.is_file():
        parser.error(f"no data file at {args.data}")
    return args


def main(argv: Optional[Sequence[str]] = None) -> dict[str, Any]:
    """Run the benchmark, print the tables, write the JSON if asked; return the report."""
    args = parse_args(argv)
    print(f"bench.locomo: {args.data}, k {args.k}, retrievers {args.retrievers}; "
          f"load average {load_average()}", flush=True)
    report = run(args.data, args.k, args.retrievers, args.limit_conversations,
                 log=lambda s: print(s, flush=True), bm25_stopwords=args.bm25_stopwords,
                 select=args.conversations, flows=args.flows)
    print()
    print(format_table(report))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1))
        print(f"\nwrote {args.json}")
    return report


if __name__ == "__main__":
    main()
    sys.exit(0)
