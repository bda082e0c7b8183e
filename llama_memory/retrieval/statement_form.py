"""A question turned toward the statement that answers it, for the dense side of a search.

A memory's records are statements ("I just moved to Porto last month"); a user asks
questions ("Which city do I live in?"). A sentence-similarity model (the offline default,
all-MiniLM-L6-v2) puts a question nearer to other questions and to records that share
its frame than to the statement it asks about. Undoing the question's grammar brings its
vector toward that statement: the question word goes, the subject and its verb come back
in statement order ("Which city do I live in?" -> "I live in city"; "What's my husband's
name?" -> "my husband's name"; "Am I allergic to anything?" -> "I am allergic to
anything"). Only English grammar is used: the question words, the auxiliaries and the
subject pronouns, never a word of any topic.

The search embeds the question and its statement form in one batch and searches by their
blend (:func:`blend`): measured on both development corpora (docs/benchmarks.md,
"Everyday recall", "The changes, one by one").
"""

from __future__ import annotations

import re
from typing import Optional

import numpy as np

#: What the statement form is worth beside the question in the blended query vector:
#: measured on both development corpora (docs/benchmarks.md); the question keeps the
#: larger part, so a question whose grammar is undone badly still finds what it found.
STATEMENT_WEIGHT = 0.5

_QUESTION_WORDS = frozenset("what which where when who whom whose why how".split())
_DO = frozenset("do does did".split())
_AUXILIARIES = _DO | frozenset(
    "is are am was were have has had can could will would should shall may might must".split()
)
_PRONOUNS = frozenset("i we you he she they it there".split())
_SUBJECT_STARTS = _PRONOUNS | frozenset("my our your his her their its the a an this that these those".split())
#: A question word's phrase is at most this many words before its auxiliary
#: ("what make and model is ..."); farther away, the question word is the subject.
_PHRASE_WORDS = 5
# Contractions that hide an auxiliary after a question word or a pronoun ("what's",
# "I'm", "we've"); a noun's possessive "'s" ("my husband's") is left alone.
_CONTRACTIONS = (
    (re.compile(r"\b(what|who|where|when|why|how|which|that|there|it|he|she)['\u2019]s\b", re.IGNORECASE), r"\1 is"),
    (re.compile(r"\b(i)['\u2019]m\b", re.IGNORECASE), r"\1 am"),
    (re.compile(r"\b(\w+)['\u2019]re\b", re.IGNORECASE), r"\1 are"),
    (re.compile(r"\b(\w+)['\u2019]ve\b", re.IGNORECASE), r"\1 have"),
    (re.compile(r"\b(\w+)['\u2019]ll\b", re.IGNORECASE), r"\1 will"),
)
_CLAUSES = re.compile(r"\s*[,;:]\s*")
_END = re.compile(r"[\s?!.]+$")


def statement_form(text: str) -> Optional[str]:
    """The statement a question asks about, in its own words, or None when ``text`` is no
    question (no "?", and no question word or auxiliary leading a clause) or its
    statement form would be the same words.

    "Which city do I live in?" -> "I live in city"; "What's my husband's name?" ->
    "my husband's name"; "If I ask about local events, which town am I in?" ->
    "If I ask about local events, I am in town"."""
    original = " ".join(text.split())
    if "?" not in original and (not original or original.split()[0].casefold() not in _QUESTION_WORDS):
        return None
    expanded = original
    for pattern, replacement in _CONTRACTIONS:
        expanded = pattern.sub(replacement, expanded)
    body = _END.sub("", expanded)
    clauses = _CLAUSES.split(body)
    for n, clause in enumerate(clauses):
        rewritten = _clause_statement(clause)
        if rewritten is not None:
            clauses[n] = rewritten
            result = " ".join(c for c in clauses if c)
            if result.casefold() == body.casefold() or not result:
                return None
            return result
    return None


def _clause_statement(clause: str) -> Optional[str]:
    """One clause in statement order, or None when it does not start like a question."""
    tokens = clause.split()
    lowered = [t.casefold() for t in tokens]
    if not tokens:
        return None
    if lowered[0] in _QUESTION_WORDS:
        aux_at = next((i for i in range(1, min(len(tokens), _PHRASE_WORDS + 2)) if lowered[i] in _AUXILIARIES), None)
        if aux_at is None:  # the question word is the subject: "who owns the flat" -> "owns the flat"
            return " ".join(tokens[1:]) or None
        head, aux, rest = tokens[1:aux_at], tokens[aux_at], tokens[aux_at + 1 :]
        if lowered[aux_at] in _DO:  # "which city do I live in" -> "I live in city"
            return " ".join(rest + head) or None
        if rest and lowered[aux_at + 1] in _PRONOUNS:  # "which town am I in" -> "I am in town"
            return " ".join([rest[0], aux.casefold(), *rest[1:], *head])
        # "what is my husband's name" -> "my husband's name": where the subject ends
        # is not known without a parser, and the auxiliary says nothing of the topic.
        return " ".join(rest + head) or None
    if lowered[0] in _AUXILIARIES and len(tokens) > 1 and lowered[1] in _SUBJECT_STARTS:
        if lowered[0] in _DO:  # "do I have a car" -> "I have a car"
            return " ".join(tokens[1:])
        if lowered[1] in _PRONOUNS:  # "am I allergic to anything" -> "I am allergic to anything"
            return " ".join([tokens[1], lowered[0], *tokens[2:]])
        return " ".join(tokens[1:])  # "is my car insured" -> "my car insured"
    return None


def blend(question: np.ndarray, statement: np.ndarray, weight: float = STATEMENT_WEIGHT) -> np.ndarray:
    """The unit vector of ``question + weight * statement`` (both unit vectors): a cosine
    with it ranks records as the question's cosine plus ``weight`` times the statement's."""
    mixed = np.asarray(question, dtype=np.float32) + np.float32(weight) * np.asarray(statement, dtype=np.float32)
    norm = float(np.linalg.norm(mixed))
    return mixed / norm if norm > 0 else np.asarray(question, dtype=np.float32)
