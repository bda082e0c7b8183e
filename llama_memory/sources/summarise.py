"""An extractive session summary, offline (no LLM): the sentences closest to the mean of
the session's sentence vectors, in the order said, each prefixed with its speaker; crude
but free, deterministic and faithful.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding

from ..core.types import StoredMessage

#: Sentences a summary keeps, by default.
SUMMARY_SENTENCES = 4
#: Sentences shorter than this many characters ("Ok!", "Thanks.") are never picked.
MIN_SENTENCE_CHARS = 20

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def split_sentences(text: str) -> list[str]:
    """The sentences of ``text`` (split after ``.``, ``!`` or ``?``), stripped, non-empty."""
    return [s.strip() for s in _SENTENCE_END.split(text.strip()) if s.strip()]


def extractive_summary(
    messages: Sequence[StoredMessage], embed_model: BaseEmbedding, sentences: int = SUMMARY_SENTENCES
) -> str:
    """The ``sentences`` most central sentences of ``messages`` in order, as ``"role:
    sentence"`` joined by spaces ("" when none is long enough)."""
    if sentences <= 0:
        raise ValueError(f"sentences must be positive, got {sentences}")
    said = [(m.role, s) for m in messages for s in split_sentences(m.text)]
    found = [(role, s) for role, s in said if len(s) >= MIN_SENTENCE_CHARS]
    if not found:
        return ""
    if len(found) > sentences:
        vectors = np.asarray(embed_model.get_text_embedding_batch([s for _, s in found]), dtype=float)
        vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        centre = vectors.mean(axis=0)
        best = sorted(np.argsort(-(vectors @ centre))[:sentences].tolist())
        found = [found[i] for i in best]
    return " ".join(f"{role}: {s}" for role, s in found)
