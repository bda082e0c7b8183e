"""Relevance: an absolute score for every retrieved record, decided without storage.

A ranking's scores are relative (the best hit of "hi" scores high), so
:class:`Calibration`, a logistic model fitted on both development corpora
(``python -m bench.calibrate``), turns a record's own :class:`Evidence` (its cosine, its
idf-weighted share of the query's words, the query's unknown names) into the estimated
chance in 0..1 that it holds the answer: the same in a store of 3 records and of 2,000.
Described in docs/concepts.md ("Relevance: what gets into the block"); the figures are
in docs/benchmarks.md ("Everyday recall"). Also here: the words and stems every
retriever compares by.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Optional

from ..core.text import word_tokens
from ..core.types import MemoryRecord

#: The default relevance floor (the memory setting of the same name): records below it stay out
#: of the block. Measured on both corpora (docs/benchmarks.md, "Everyday recall"): below
#: it the block gained too little recall for the tokens it spent on things never said.
DEFAULT_MIN_RELEVANCE = 0.03

_WORD = re.compile(r"\w+", re.UNICODE)
# Function words: they say nothing about what a record is about.
_STOPWORDS = frozenset(
    "a an and are as at be been but by can could did do does for from had has have he her hers "
    "him his how i if in into is it its just me my of on or our she so than that the their them "
    "then there these they this to was we were what when where which who whom why will with "
    "would you your am any about all also some very really".split()
)

#: How many texts' words and stems :func:`words` and :func:`word_stems` keep: the same
#: candidates come back turn after turn (the cache holds texts, not records).
TEXTS_KEPT = 8192


def words(text: str) -> list[str]:
    """The lower-cased words of a text, in order, without the tails of contractions and
    possessives (:func:`~llama_memory.core.text.word_tokens`)."""
    return list(_words(text))


@lru_cache(maxsize=TEXTS_KEPT)
def _words(text: str) -> tuple[str, ...]:
    return tuple(word_tokens(text))


@lru_cache(maxsize=TEXTS_KEPT)
def word_stems(text: str) -> frozenset[str]:
    """The stems (:func:`stem`) of every word of a text (cached, as :func:`words`)."""
    return frozenset(stem(w) for w in _words(text))


def content_words(text: str) -> list[str]:
    """The distinct words of a text that are not function words, in order."""
    return list(dict.fromkeys(w for w in words(text) if w not in _STOPWORDS))


_SUFFIXES = ("ingly", "edly", "ings", "ing", "ies", "ied", "ers", "er", "ed", "es", "s", "ly", "y", "e")


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """A crude stem ("hiking", "hikes", "hiked" -> "hik"), the same on both sides, so it
    need not be a real root."""
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


#: How many texts' stems :func:`content_stems` keeps.
STEMS_KEPT = 4096


@lru_cache(maxsize=STEMS_KEPT)
def content_stems(text: str) -> frozenset[str]:
    """The stems of a text's content words (cached: the hop finds the same messages
    again and again; a source that forgets records calls ``cache_clear()``)."""
    return frozenset(stem(w) for w in content_words(text))


def idf(document_count: int, total: int) -> float:
    """BM25's inverse document frequency of a word found in ``document_count`` of
    ``total`` records (a word never seen gets the largest)."""
    total = max(total, document_count, 1)
    return math.log(1.0 + (total - document_count + 0.5) / (document_count + 0.5))


def lexical_share(query_words: Sequence[str], weights: Mapping[str, float], text: str) -> float:
    """The idf-weighted share (0..1) of ``query_words`` that ``text`` contains; a word
    missing from ``weights`` (idf by word) weighs as much as the heaviest."""
    if not query_words:
        return 0.0
    heaviest = max(weights.values(), default=1.0)
    found = word_stems(text)
    total = matched = 0.0
    for word in query_words:
        weight = weights.get(word, heaviest)
        total += weight
        if stem(word) in found:
            matched += weight
    return matched / total if total > 0 else 0.0


@dataclass(frozen=True)
class Evidence:
    """What is known of one record's match with a query: its own, and the query's.

    Attributes:
        cosine: the record's dense cosine with the query (None: not computed; taken as 0).
        lexical: :func:`lexical_share` of the query's words in the record.
        best_cosine: the best cosine of any candidate of the query in this store.
        best_lexical: the best lexical share of any record retrieved for the query.
        unknown: the idf-weighted share of the query's words no record contains.
        unknown_name: 1.0 when the query names someone or something (a capitalised word
            after the first) that no record contains, else 0.0.
        personal: 1.0 when the query is in the first person (:func:`is_personal`).
        request: 1.0 when the query asks for advice in the first person (:func:`is_request`).
    """

    cosine: Optional[float]
    lexical: float
    best_cosine: float = 0.0
    best_lexical: float = 0.0
    unknown: float = 0.0
    unknown_name: float = 0.0
    personal: float = 0.0
    request: float = 0.0

    def features(self) -> dict[str, float]:
        """The calibration's inputs by name (products included)."""
        cosine = self.cosine if self.cosine is not None else 0.0
        return {
            "cosine": cosine,
            "lexical": self.lexical,
            "cosine_lexical": cosine * self.lexical,
            "best_cosine": self.best_cosine,
            "best_lexical": self.best_lexical,
            "best_cosine_lexical": self.best_cosine * self.best_lexical,
            "unknown": self.unknown,
            "unknown_name": self.unknown_name,
            "personal": self.personal,
            "personal_cosine": self.personal * cosine,
            "request": self.request,
        }

    def own(self) -> "Evidence":
        """This evidence as if the record were the query's best match: what the record
        says of the question by itself (:func:`own_relevance`)."""
        cosine = self.cosine if self.cosine is not None else 0.0
        return replace(self, best_cosine=cosine, best_lexical=self.lexical)


#: A record whose own cosine with a first-person request for advice is at least this
#: serves it whatever its calibrated relevance (:func:`serves_request`). Unrelated texts
#: sit below 0.1 ("where should I eat tonight?" / brake-pad prices: 0.04), a stated
#: preference above 0.25 ("I'm vegetarian": 0.26). Factual first-person questions reach
#: 0.18 to 0.30 against 2,000 hobby messages: they get no such shortcut.
REQUEST_MIN_COSINE = 0.2

#: The lowest own relevance (:func:`own_relevance`) at which a record enters the block.
#: Near zero on purpose: unrelated records sit at 1e-6 to 4e-5, while some evidence turns
#: the second hop finds by words sit lower than any floor; this one costs 0.005 of block
#: recall simulated, 0.008 measured (``bench.noise --fit``; docs/benchmarks.md, "The
#: block a real agent sees: after").
RECORD_FLOOR = 0.0001

# A first-person request for advice, which what the user said of themselves may serve
# without a shared word (a question about a fact of theirs needs that fact).
_REQUEST = re.compile(
    r"\b(?:should|shall|could)\s+(?:i|we)\b|\b(?:recommend\w*|suggest\w*|ideas?|advice|tips?|plan)\b|"
    r"\bwould\s+(?:suit|help)\s+(?:me|us)\b|\bwhat\s+to\b|\bhelp\s+me\b|\bcan\s+(?:i|we)\s+get\b"
)

_ASKING_VERBS = frozenset("recommend suggest plan".split())


def is_request(query: str) -> bool:
    """Whether a query asks for advice in the first person ("where should I eat tonight?",
    "plan my weekend"), not about a fact ("what is my wife's name?")."""
    found = words(query)
    asks = bool(_REQUEST.search(" ".join(found)))
    # "Recommend a film for tonight." asks for the user without naming them.
    return asks and (is_personal(query) or (bool(found) and found[0] in _ASKING_VERBS))


def serves_request(record: MemoryRecord) -> bool:
    """Whether a record serves a first-person request for advice by its own evidence
    (:data:`REQUEST_MIN_COSINE`): in a small store the calibration's best match is far
    from any request sharing no word with what the user said."""
    evidence = record.metadata.get("evidence") or {}
    return bool(evidence.get("request")) and (evidence.get("cosine") or 0.0) >= REQUEST_MIN_COSINE


#: The cosine from which a record that holds a word of a first-person question answers it
#: (:func:`speaks_of_what_is_asked`): higher than for a request, since a shared word as
#: common as "name" or "school" is no answer by itself. On bench.noise's first-person
#: never-said questions of the LoCoMo stores, 0.2 let in 13 tokens per question, 0.3 two.
NAMED_MIN_COSINE = 0.3


def speaks_of_what_is_asked(record: MemoryRecord) -> bool:
    """Whether a record answers a first-person question by its own evidence: close in
    meaning (:data:`NAMED_MIN_COSINE`) and holding a word the question names ("my
    sister's job" / "My sister ... is a dentist"): the calibration takes a word no record
    has ("job") for a question about things never said."""
    evidence = record.metadata.get("evidence") or {}
    return (bool(evidence.get("personal")) and bool(evidence.get("shares_word"))
            and (evidence.get("cosine") or 0.0) >= NAMED_MIN_COSINE)


def shares_a_word(query_words: Sequence[str], text: str) -> bool:
    """Whether ``text`` holds one of ``query_words`` (by stem) of three letters or more,
    not of the first person."""
    wanted = {stem(w) for w in query_words if len(w) >= 3 and w not in _FIRST_PERSON}
    return not wanted.isdisjoint(word_stems(text))


def own_relevance(record: MemoryRecord) -> Optional[float]:
    """The record's own relevance: the calibration applied to its evidence alone, as if
    it were the store's best match (None: not calibrated)."""
    evidence = record.metadata.get("evidence") or {}
    value = evidence.get("own_relevance")
    return None if value is None else float(value)


# A sentence ends at ".", "!" or "?" followed by a space, unless the dot ends an initial
# or a common abbreviation ("C. S. Lewis", "Dr. Who", "vs. Spain").
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_NOT_AN_END = re.compile(r"(?:\b[A-Z]|\b(?:Mr|Mrs|Ms|Dr|St|Jr|Sr|Mt|vs|etc|e\.g|i\.e|approx))\.$")

#: The verbs an instruction about the answer starts with ("Answer yes or no.", "Be brief.").
_ANSWER_VERBS = frozenset("answer reply respond explain describe list give be keep use please".split())


@lru_cache(maxsize=TEXTS_KEPT)
def is_question(text: str) -> bool:
    """Whether a message only asks: every sentence ends with a question mark or tells
    how to answer ("Was it a good month? Answer yes or no."); it states nothing."""
    sentences: list[str] = []
    for piece in _SENTENCE_END.split(text.strip()):
        if sentences and _NOT_AN_END.search(sentences[-1]):
            sentences[-1] += " " + piece
        else:
            sentences.append(piece)
    sentences = [s for s in sentences if words(s)]
    asked = [s for s in sentences if s.endswith("?")]
    return bool(asked) and all(s in asked or is_answer_instruction(s) for s in sentences)


def is_answer_instruction(sentence: str) -> bool:
    """Whether a sentence tells how to answer and says nothing of the user ("Answer yes
    or no.", not "Keep in mind I'm vegetarian.")."""
    said = words(sentence)
    return bool(said) and said[0] in _ANSWER_VERBS and not any(w in _FIRST_PERSON for w in said)


def asks_only(record: MemoryRecord) -> bool:
    """Whether a record is only the user's own questions: no fact, so it ranks below
    statements and is no evidence that a question is about the user's history."""
    parts = record.parts or [record]
    return all(is_users_question(p.role, p.text) for p in parts)


def is_users_question(role: Optional[str], text: str) -> bool:
    """Whether one message of ``role`` and ``text`` is a question of the user's."""
    return role == "user" and is_question(text)


_FIRST_PERSON = frozenset("i me my mine myself we us our ours ourselves i'm im i've ive i'd i'll".split())


def is_personal(query: str) -> bool:
    """Whether a query speaks of the user in the first person (I, me, my, we, our)."""
    return any(w in _FIRST_PERSON for w in words(query))


def unknown_evidence(query: str, counts: Mapping[str, int], weights: Mapping[str, float]) -> tuple[float, float]:
    """(``unknown``, ``unknown_name``) of :class:`Evidence` for a query, from its content
    words' record ``counts`` and idf ``weights``."""
    total = sum(weights.values())
    unknown = sum(weights[w] for w in weights if counts.get(w, 0) == 0) / total if total > 0 else 0.0
    unknown_name = float(any(counts.get(n, 1) == 0 for n in names_in(query)))
    return unknown, unknown_name


def names_in(query: str) -> set[str]:
    """The names a query mentions, lower-cased: its capitalised words but the first
    ("What did Melanie paint?" -> {"melanie"})."""
    return {w.casefold() for w in _WORD.findall(query)[1:] if w[:1].isupper()}


@dataclass(frozen=True)
class Calibration:
    """A logistic model from :class:`Evidence` to relevance in 0..1:
    ``1 / (1 + exp(-(intercept + sum(weights[f] * features[f]))))``, over the features
    of :meth:`Evidence.features` (a feature without a weight counts 0)."""

    intercept: float
    weights: Mapping[str, float]

    def relevance(self, evidence: Evidence) -> float:
        """The record's relevance (an estimated probability)."""
        features = evidence.features()
        z = self.intercept + sum(w * features.get(name, 0.0) for name, w in self.weights.items())
        return 1.0 / (1.0 + math.exp(-max(min(z, 50.0), -50.0)))


def calibrate(
    query: str, records: Sequence[MemoryRecord], cosines: Mapping[str, float],
    word_counts: Callable[[Sequence[str]], tuple[int, Mapping[str, int]]],
    calibration: "Calibration", text_of: Callable[[MemoryRecord], tuple[Optional[str], str]],
    left_out: Sequence[str] = (),
    candidates: Optional[Callable[[Sequence[str]], Mapping[str, tuple[str, bool]]]] = None,
    holders: Optional[Callable[[str, int], Sequence[tuple[str, bool]]]] = None,
) -> None:
    """Set ``relevance`` (the question judged from the record and the store's best match)
    and ``metadata["evidence"]`` (with ``own_relevance``: the record alone) on each of a
    query's records.

    Args:
        cosines: the cosine with the query of each candidate the source ranked, by id.
        word_counts: gives (records in the store, records holding each word) for words.
        text_of: a record's (id, text) the evidence is about (an excerpt's hit).
        left_out: texts of stored records that are no evidence (the conversation's own
            latest messages): their words do not count as known (:func:`without_texts`).
        candidates: gives, by id, each candidate's text and whether it is only the
            user's own questions (no evidence either).
        holders: gives up to ``n`` of the source's records holding a word, as
            ``candidates`` does: a word only candidate questions hold is then checked in
            the whole store (:func:`stated_counts`).
    """
    if not records:
        return
    asked: dict[str, str] = {}
    statements: list[str] = []
    if candidates is not None and cosines:
        for i, (text, only_asks) in candidates(list(cosines)).items():
            if only_asks:
                asked[i] = text
            else:
                statements.append(text)
    query_words = content_words(query)
    store_total, store_counts = word_counts(query_words)
    total, counts = without_texts(store_total, store_counts, [*left_out, *asked.values()])
    if holders is not None and asked:
        counts = stated_counts(counts, store_counts, list(asked.values()), statements, left_out, holders)
    weights = {w: idf(n, total) for w, n in counts.items()}
    unknown, unknown_name = unknown_evidence(query, counts, weights)
    targets = [text_of(r) for r in records]
    shares = [lexical_share(query_words, weights, text) for _, text in targets]
    best_cosine = max((c for i, c in cosines.items() if i not in asked), default=0.0)
    stated = [s for r, s in zip(records, shares) if not asks_only(r)]
    personal, request = float(is_personal(query)), float(is_request(query))
    for record, (record_id, _), share in zip(records, targets, shares):
        evidence = Evidence(
            cosine=cosines.get(record_id or ""), lexical=share, best_cosine=best_cosine,
            best_lexical=max(stated, default=0.0), unknown=unknown, unknown_name=unknown_name,
            personal=personal, request=request,
        )
        record.relevance = calibration.relevance(evidence)
        record.metadata["evidence"] = {
            **evidence.features(), "own_relevance": calibration.relevance(evidence.own()),
            "shares_word": float(shares_a_word(query_words, text_of(record)[1])),
            "asks_only": float(asks_only(record)),
        }


def without_texts(
    total: int, counts: Mapping[str, int], texts: Sequence[str]
) -> tuple[int, dict[str, int]]:
    """Word counts as if the records of ``texts`` were not stored: each word's count less
    the texts holding it (by stem), never below 0 (cached counts missing the latest
    records then count a word of the query only as unknown, which is the point)."""
    if not texts:
        return total, dict(counts)
    stems = [word_stems(t) for t in texts]
    return max(total - len(texts), 0), {
        w: max(n - sum(stem(w) in s for s in stems), 0) for w, n in counts.items()
    }


def stated_counts(
    counts: Mapping[str, int], store_counts: Mapping[str, int], asked: Sequence[str], stated: Sequence[str],
    left_out: Sequence[str], holders: Callable[[str, int], Sequence[tuple[str, bool]]]
) -> dict[str, int]:
    """``counts`` corrected for the user's own questions beyond the candidates: a user
    who asked about "Joanna" a hundred times would make a name the store never stated
    look known. A word no candidate statement holds but a candidate question does is
    looked up (up to :data:`MAX_HOLDERS_READ` holders): only holders that state something
    count, with those held elsewhere (what the search did not return)."""
    out = dict(counts)
    in_questions = [word_stems(t) for t in asked]
    in_statements = [word_stems(t) for t in stated]
    own = set(left_out)
    for word, n in counts.items():
        s, held = stem(word), store_counts.get(word, 0)
        if n == 0 or held > MAX_HOLDERS_READ or any(s in t for t in in_statements):
            continue
        if not any(s in t for t in in_questions):
            continue  # no question in sight holds it: nothing to correct
        # Up to as many more than counted as there are questions in sight: counts may be
        # remembered from before the latest questions were stored.
        found = holders(word, held + len(asked))
        out[word] = max(held - len(found), 0) + sum(1 for text, asks in found if not asks and text not in own)
    return out


#: The most holders of a word :func:`stated_counts` reads to tell whether a statement
#: holds it.
MAX_HOLDERS_READ = 400

#: The embedding model the calibration was fitted with: cosines of another model are on
#: another scale (some put unrelated texts at 0.7), so they get no calibration.
CALIBRATED_MODEL = "all-MiniLM-L6-v2-onnx-int8"

#: Fitted on both development corpora with the default offline embedding
#: (``python -m bench.calibrate``, the fit "both"), a record positive when it holds the
#: answer. Only the record's own evidence counts: the earlier model, which weighed the
#: query's best match most, scored every record of a small store 1.0 for any question one
#: of them answered (docs/benchmarks.md, "Everyday recall").
DEFAULT_CALIBRATION = Calibration(
    intercept=-5.194,
    weights={
        "cosine": 3.633,
        "lexical": 1.931,
        "cosine_lexical": 2.793,
        "unknown_name": -2.17,
        "personal": -0.799,
        "personal_cosine": 5.142,
    },
)


def calibration_for(embed_model: object) -> Optional[Calibration]:
    """:data:`DEFAULT_CALIBRATION` for the model it was fitted with, else None (no
    ``relevance``, nothing filtered: fit one with ``bench.noise --fit`` and pass it as
    ``VectorSource(calibration=...)``)."""
    if getattr(embed_model, "model_name", None) == CALIBRATED_MODEL:
        return DEFAULT_CALIBRATION
    return None
