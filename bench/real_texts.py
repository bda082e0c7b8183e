"""Real-looking memory texts and questions for :mod:`bench.pg_recall`'s ``--data real``
mode: recall of per-user HNSW search on embeddings of sentences, not synthetic vectors.

The LoCoMo dev conversations (bench/locomo.py's data) hold about 2,800 turns and their
observations and summaries, far fewer than the 100,000 records a large user needs; each
text here is one or two of their sentences, the people's names replaced by others from a
longer list, sometimes with a date: distinct texts whose embeddings are distributed as a
long chat history's are (topics that recur, phrasing that differs). The queries are
LoCoMo's own questions, names varied the same way. Vectors are embedded by the offline
model once and cached as ``.npy`` (minutes for 100,000 texts on 2 cores)."""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

import numpy as np

from bench import locomo

#: Names swapped in for the speakers' (two per conversation in LoCoMo).
NAMES = ("Alice", "Bob", "Maria", "Kenji", "Priya", "Tom", "Sofia", "Omar", "Lena", "Diego",
         "Hannah", "Yusuf", "Chloe", "Arjun", "Ines", "Mateo", "Grace", "Wei", "Noor", "Felix")  # fmt: skip
DATES = ("On 3 May,", "Last Tuesday,", "In June 2023,", "Yesterday,", "Two weeks ago,", "This morning,")
#: LoCoMo's dev conversations (bench/locomo.py's data).
DEFAULT_DATA = locomo.DEFAULT_DATA
#: Where embedded vectors are kept between runs.
CACHE = Path("/tmp/llama-memory-bench")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def _strings(value: Any) -> list[str]:
    """Every string nested in LoCoMo's observation / summary structures."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v) if not re.fullmatch(r"D\d+:\d+", s)]
    return []


def source(path: Optional[Path] = None) -> tuple[list[str], list[str], list[str]]:
    """LoCoMo's sentences (turns, observations, summaries), questions and speaker names
    (of ``path``, by default :data:`DEFAULT_DATA`)."""
    conversations = json.loads(Path(path or DEFAULT_DATA).read_text())
    sentences: list[str] = []
    questions: list[str] = []
    speakers: set[str] = set()
    for conversation in conversations:
        talk = conversation["conversation"]
        speakers.update((talk["speaker_a"], talk["speaker_b"]))
        texts = [turn["text"] for turns in talk.values() if isinstance(turns, list) for turn in turns]
        for key in ("observation", "session_summary", "event_summary"):
            texts += _strings(conversation.get(key, {}))
        sentences += [s for text in texts for s in _SENTENCE.split(text) if len(s.split()) >= 4]
        questions += [str(qa["question"]) for qa in conversation["qa"]]
    return sentences, questions, sorted(speakers)


def _renamer(speakers: Sequence[str]) -> re.Pattern[str]:
    return re.compile(r"\b(" + "|".join(re.escape(s) for s in speakers) + r")\b")


def texts(n: int, seed: int = 7, path: Optional[Path] = None) -> list[str]:
    """``n`` distinct memory texts: one or two LoCoMo sentences, names varied."""
    sentences, _, speakers = source(path)
    names = _renamer(speakers)
    rng = random.Random(seed)
    out: list[str] = []
    seen: set[str] = set()
    while len(out) < n:
        picked = rng.sample(sentences, rng.choice((1, 1, 2)))
        text = names.sub(lambda _: rng.choice(NAMES), " ".join(picked))
        if rng.random() < 0.2:
            text = f"{rng.choice(DATES)} {text[0].lower()}{text[1:]}"
        if text not in seen:
            seen.add(text)
            out.append(text)
    return out


def questions(n: int, seed: int = 7, path: Optional[Path] = None) -> list[str]:
    """``n`` of LoCoMo's questions, names varied as the texts' are."""
    _, asked, speakers = source(path)
    names = _renamer(speakers)
    rng = random.Random(seed + 1)
    return [names.sub(lambda _: rng.choice(NAMES), q) for q in rng.sample(asked, min(n, len(asked)))]


def embed(strings: Sequence[str]) -> np.ndarray:
    """Unit vectors of ``strings`` by the offline model (float32, n x 384)."""
    from llama_memory import default_embedding

    model = default_embedding()
    vectors = np.asarray(model.get_text_embedding_batch(list(strings)), dtype=np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def cached_vectors(n: int, seed: int = 7, cache: Optional[Path] = None, chunk: int = 5000) -> np.ndarray:
    """:func:`texts`' vectors, embedded once and kept in ``cache`` in chunks of
    ``chunk`` texts, so that an interrupted run resumes where it stopped and a smaller
    ``n`` reuses a larger one's (the first ``n`` texts do not depend on ``n``)."""
    cache = cache or CACHE
    cache.mkdir(parents=True, exist_ok=True)
    parts = []
    start = time.perf_counter()
    for first in range(0, n, chunk):
        last = min(first + chunk, n)
        part = cache / f"real_texts_{seed}_{first}_{last}.npy"
        if not part.exists():
            np.save(part, embed(texts(last, seed)[first:]))
            print(f"embedded {last} texts, {time.perf_counter() - start:.0f} s", flush=True)
        parts.append(np.load(part))
    return np.concatenate(parts)
