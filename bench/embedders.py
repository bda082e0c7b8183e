"""Question-to-statement retrieval of an embedding model alone, for choosing a default.

The library's default is all-MiniLM-L6-v2 (int8 ONNX, mean pooling), trained for sentence
similarity. A model trained for question-to-passage retrieval (bge-small-en-v1.5,
e5-small-v2, arctic-embed-xs...) would be a candidate; this measures any ONNX export of
one the way :mod:`llama_memory.embeddings.onnx_model` runs MiniLM (onnxruntime on the CPU, the
model's tokenizer, batches padded to their longest text), with the pooling and the
query/passage prefixes the model needs, on two corpora:

* everyday (``../shared/data/everyday/everyday_dev.json``): each fact's message is a
  passage, each of its later questions a query; recall@10 (the fact's message among the
  10 nearest of the 90) and MRR;
* LoCoMo (``../shared/data/locomo/locomo_dev.json``): per conversation, every turn is a
  passage (``speaker: text``), every question of categories 1-4 with evidence a query;
  turn recall@10 (the share of its evidence turns among the 10 nearest) and MRR (of the
  first evidence turn).

Also the median time of one query embedding (a single text, as ``get()`` embeds one).

With ``--sentences``, a record's best sentence instead (:func:`sentence_mode`): each
passage is also embedded sentence by sentence (:func:`split_sentences`), and a passage
is scored by its whole text, its best sentence, or a mix of the two; on the everyday
facts' messages and replies (small), the same among 1,500 LoCoMo turns as in the
everyday large store (large), and on LoCoMo; with, for the relevance judgement, the AUC
of the answering record's score against the best score in the store for the never-said
questions; and what the sentences add to a write (:func:`write_cost`). ``--user-only``
splits the user's records only (the replies, and LoCoMo's speaker_b, stay whole).

Run::

    .venv/bin/python -m bench.embedders                       # the default model alone
    .venv/bin/python -m bench.embedders --sentences           # whole message vs best sentence
    .venv/bin/python -m bench.embedders --sentences --user-only
    .venv/bin/python -m bench.embedders --model \\
        bge-small=/path/model.onnx:/path/tokenizer.json:cls:"Represent this sentence for searching relevant passages: ":
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np

from llama_memory.embeddings.onnx_model import (
    default_model_path,
    default_tokenizer_path,
    load_model,
)

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
EVERYDAY = DATA / "everyday" / "everyday_dev.json"
LOCOMO = DATA / "locomo" / "locomo_dev.json"
#: The hits a question is scored on.
K = 10
#: Texts embedded per onnxruntime run for passages.
BATCH = 32


@dataclass(frozen=True)
class ModelSpec:
    """An ONNX embedding model and how to run it.

    Attributes:
        name: a label for the report.
        model: the ONNX file.
        tokenizer: the model's ``tokenizer.json``.
        pooling: ``mean`` (over the attention mask) or ``cls`` (the first token).
        query_prefix: put before a question (e5: ``"query: "``; bge: its instruction).
        passage_prefix: put before a passage (e5: ``"passage: "``).
    """

    name: str
    model: Path
    tokenizer: Path
    pooling: str = "mean"
    query_prefix: str = ""
    passage_prefix: str = ""


def default_spec() -> ModelSpec:
    """The library's default model (all-MiniLM-L6-v2, int8, mean pooling, no prefixes)."""
    return ModelSpec("all-MiniLM-L6-v2 (default)", default_model_path(), default_tokenizer_path())


def parse_spec(text: str) -> ModelSpec:
    """``name=model.onnx:tokenizer.json:pooling:query prefix:passage prefix`` (the last
    three may be left out)."""
    name, _, rest = text.partition("=")
    parts = rest.split(":")
    if not name or len(parts) < 2:
        raise argparse.ArgumentTypeError(
            f"--model takes name=model.onnx:tokenizer.json[:mean|cls[:query prefix[:passage prefix]]], got {text!r}"
        )
    pooling = parts[2] if len(parts) > 2 and parts[2] else "mean"
    if pooling not in ("mean", "cls"):
        raise argparse.ArgumentTypeError(f"pooling is mean or cls, got {pooling!r}")
    return ModelSpec(name, Path(parts[0]), Path(parts[1]), pooling,
                     parts[3] if len(parts) > 3 else "", parts[4] if len(parts) > 4 else "")


class Embedder:
    """One model's onnxruntime session, embedding texts to unit vectors."""

    def __init__(self, spec: ModelSpec, max_length: int = 256) -> None:
        self.spec = spec
        # The default model's files are checked against their pinned hashes; a
        # candidate's were checked by whoever names them (its release's hashes).
        default = spec.model == default_model_path()
        self.session, self.tokenizer, self.names = load_model(
            spec.model, spec.tokenizer, verify_checksum=default, max_length=max_length, num_threads=None,
            dimension=384 if default else _output_dimension(spec.model),
        )

    def embed(self, texts: Sequence[str], prefix: str = "") -> np.ndarray:
        """Unit vectors of ``texts`` (each with ``prefix`` before it), in batches."""
        out = []
        for start in range(0, len(texts), BATCH):
            batch = [prefix + t for t in texts[start : start + BATCH]]
            encodings = self.tokenizer.encode_batch(batch)
            ids = np.asarray([e.ids for e in encodings], dtype=np.int64)
            mask = np.asarray([e.attention_mask for e in encodings], dtype=np.int64)
            feeds = {n: ids if n == "input_ids" else mask if n == "attention_mask" else np.zeros_like(ids)
                     for n in self.names}
            hidden = np.asarray(self.session.run(None, feeds)[0], dtype=np.float32)
            if self.spec.pooling == "cls":
                pooled = hidden[:, 0]
            else:
                weights = mask[:, :, None].astype(np.float32)
                pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
            out.append(pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None))
        return np.concatenate(out) if out else np.zeros((0, 1), dtype=np.float32)

    def queries(self, texts: Sequence[str]) -> np.ndarray:
        """Questions, with the model's query prefix."""
        return self.embed(texts, self.spec.query_prefix)

    def passages(self, texts: Sequence[str]) -> np.ndarray:
        """Statements, with the model's passage prefix."""
        return self.embed(texts, self.spec.passage_prefix)


def _output_dimension(model: Path) -> Any:
    """The last dimension of the model's output, when the file states it."""
    import onnxruntime as ort

    shape = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).get_outputs()[0].shape
    return shape[-1] if shape and isinstance(shape[-1], int) else None


#: safetensors' element types the static table may come in.
_SAFETENSOR_TYPES = {"F16": np.float16, "F32": np.float32, "F64": np.float64}


def read_safetensor(path: Path, key: str) -> np.ndarray:
    """One tensor of a safetensors file, as float32 (the format is an 8-byte header
    length, a JSON header, then the raw data; read here so no package is needed)."""
    raw = path.read_bytes()
    size = int.from_bytes(raw[:8], "little")
    info = json.loads(raw[8 : 8 + size])[key]
    start, end = info["data_offsets"]
    dtype = np.dtype(_SAFETENSOR_TYPES[info["dtype"]])
    table = np.frombuffer(raw, dtype=dtype, count=(end - start) // dtype.itemsize, offset=8 + size + start)
    return table.reshape(info["shape"]).astype(np.float32)


@dataclass(frozen=True)
class StaticSpec:
    """A static token-embedding model: one vector per token, averaged over a text.

    Attributes:
        name: a label for the report.
        weights: the safetensors file holding the token table.
        tokenizer: the model's ``tokenizer.json``.
        tensor: the table's key in ``weights``.
    """

    name: str
    weights: Path
    tokenizer: Path
    tensor: str = "embedding.weight"


def wordllama_spec() -> StaticSpec:
    """WordLlama's 256-dimension l2_supercat model, from the installed wheel's own files
    (``WordLlama.load()`` looks for the tokenizer in a folder the wheel does not have
    and then downloads it; these files need no network). The package is not imported."""
    import importlib.util

    found = importlib.util.find_spec("wordllama")
    if found is None or found.origin is None:
        raise SystemExit("wordllama is not installed (pip install --no-deps --target DIR wordllama; DIR on PYTHONPATH)")
    root = Path(found.origin).parent
    return StaticSpec("wordllama l2_supercat 256", root / "weights" / "l2_supercat_256.safetensors",
                      root / "tokenizers" / "l2_supercat_tokenizer_config.json")


class StaticEmbedder:
    """A static model's texts as unit vectors: the mean of their tokens' rows (no special
    tokens, no truncation), as WordLlama's own inference computes them."""

    def __init__(self, spec: StaticSpec) -> None:
        from tokenizers import Tokenizer

        self.spec = spec
        self.table = read_safetensor(spec.weights, spec.tensor)
        self.tokenizer = Tokenizer.from_file(str(spec.tokenizer))
        self.tokenizer.enable_padding()
        self.tokenizer.no_truncation()

    def embed(self, texts: Sequence[str], prefix: str = "") -> np.ndarray:
        """Unit vectors of ``texts``, in batches."""
        out = []
        for start in range(0, len(texts), BATCH):
            encodings = self.tokenizer.encode_batch([prefix + t for t in texts[start : start + BATCH]],
                                                    add_special_tokens=False)
            ids = np.clip(np.asarray([e.ids for e in encodings]), 0, len(self.table) - 1)
            mask = np.asarray([e.attention_mask for e in encodings], dtype=np.float32)[:, :, None]
            pooled = (self.table[ids] * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1.0)
            out.append(pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None))
        return np.concatenate(out) if out else np.zeros((0, self.table.shape[1]), dtype=np.float32)

    def queries(self, texts: Sequence[str]) -> np.ndarray:
        """Questions (a static model has no query prefix)."""
        return self.embed(texts)

    def passages(self, texts: Sequence[str]) -> np.ndarray:
        """Statements."""
        return self.embed(texts)


def ranks(query_vectors: np.ndarray, passage_vectors: np.ndarray) -> np.ndarray:
    """Per query, the passages' indices nearest first."""
    return np.argsort(-(query_vectors @ passage_vectors.T), axis=1, kind="stable")


def everyday(embedder: Embedder, path: Path = EVERYDAY) -> dict[str, Any]:
    """recall@K and MRR of each fact's questions against the facts' messages."""
    data = json.loads(path.read_text())
    facts = data["facts"]
    passages = embedder.passages([f["message"] for f in facts])
    asked = [(n, q) for n, f in enumerate(facts) for q in f["questions"]]
    order = ranks(embedder.queries([q for _, q in asked]), passages)
    positions = [int(np.nonzero(row == n)[0][0]) for (n, _), row in zip(asked, order)]
    return {"questions": len(asked), "passages": len(facts),
            f"recall@{K}": sum(p < K for p in positions) / len(positions),
            "mrr": sum(1 / (p + 1) for p in positions) / len(positions)}


def _evidence(ids: Sequence[str]) -> list[str]:
    """LoCoMo evidence ids, with the known glitches repaired (several ids in one string,
    "D:11:26", zero-padded numbers); a bare "D" is dropped."""
    found = []
    for raw in ids:
        for part in raw.replace(";", " ").split():
            part = part.replace("D:", "D")
            if ":" not in part:
                continue
            session, turn = part[1:].split(":", 1)
            if session.isdigit() and turn.isdigit():
                found.append(f"D{int(session)}:{int(turn)}")
    return found


def _turns(sample: dict[str, Any]) -> list[dict[str, Any]]:
    """A LoCoMo conversation's turns, session by session, in order."""
    talk = sample["conversation"]
    sessions = sorted((k for k in talk if k.startswith("session_") and not k.endswith("date_time")),
                      key=lambda k: int(k.split("_")[1]))
    return [t for key in sessions for t in talk[key]]


def locomo(embedder: Embedder, path: Path = LOCOMO) -> dict[str, Any]:
    """Turn recall@K and MRR of LoCoMo questions (categories 1-4) against each
    conversation's turns."""
    recalls: list[float] = []
    reciprocal: list[float] = []
    for sample in json.loads(path.read_text()):
        turns = _turns(sample)
        where = {t["dia_id"]: n for n, t in enumerate(turns)}
        passages = embedder.passages([f"{t['speaker']}: {t['text']}" for t in turns])
        asked = [(q["question"], [where[e] for e in _evidence(q.get("evidence", [])) if e in where])
                 for q in sample["qa"] if q.get("category") in (1, 2, 3, 4)]
        asked = [(q, e) for q, e in asked if e]
        order = ranks(embedder.queries([q for q, _ in asked]), passages)
        for (_, evidence), row in zip(asked, order):
            top = set(row[:K].tolist())
            recalls.append(sum(e in top for e in evidence) / len(evidence))
            first = min(int(np.nonzero(row == e)[0][0]) for e in evidence)
            reciprocal.append(1 / (first + 1))
    return {"questions": len(recalls), f"turn_recall@{K}": statistics.fmean(recalls),
            "mrr": statistics.fmean(reciprocal)}


# -- a record's best sentence ---------------------------------------------------------

#: A sentence ends at . ! ? … (and closing quotes or brackets after them) or an emoji,
#: before white space; at 。！？ with or without it; and at every line break.
_SENTENCE_END = re.compile(
    r"(?:(?<=[.!?…])|(?<=[.!?…][\"'”’)\]])|(?<=[\u2600-\u27bf\U0001f300-\U0001faff]))\s+"
    r"|(?<=[。！？])\s*|\s*\n\s*"
)
#: A sentence of fewer words than this joins a neighbour ("Ugh, long week." says little alone).
MIN_WORDS = 4


def split_sentences(text: str, min_words: Optional[int] = None) -> list[str]:
    """``text``'s sentences, split at end punctuation and line breaks (no language's
    abbreviations known: a rare wrong split only makes two short pieces); a piece of
    fewer than ``min_words`` words joins the one before it (the first, the one after)."""
    min_words = MIN_WORDS if min_words is None else min_words
    pieces = [p.strip() for p in _SENTENCE_END.split(text) if p and p.strip()]
    merged: list[str] = []
    pending = ""
    for piece in pieces:
        if pending:
            piece, pending = f"{pending} {piece}", ""
        if _words(piece) >= min_words:
            merged.append(piece)
        elif merged:
            merged[-1] = f"{merged[-1]} {piece}"
        else:
            pending = piece
    if pending:
        merged.append(pending)
    return merged or [text]


def _words(text: str) -> int:
    """Words of ``text``: those between spaces, or for a script written without
    spaces, one per two characters."""
    spaced = len(text.split())
    return spaced if spaced > 1 else max(spaced, len(text) // 2 if len(text) > 8 else spaced)


#: How a passage is scored from its whole-text cosine ``w`` and its best sentence's ``b``.
SCORINGS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "whole": lambda w, b: w,
    "best sentence": lambda w, b: b,
    "max(whole, best)": np.maximum,
    "mean(whole, best)": lambda w, b: (w + b) / 2,
    "0.3 whole + 0.7 best": lambda w, b: 0.3 * w + 0.7 * b,
    "0.7 whole + 0.3 best": lambda w, b: 0.7 * w + 0.3 * b,
    "0.8 whole + 0.2 best": lambda w, b: 0.8 * w + 0.2 * b,
    "0.9 whole + 0.1 best": lambda w, b: 0.9 * w + 0.1 * b,
}


@dataclass
class SentencePassages:
    """Passages embedded whole and sentence by sentence."""

    whole: np.ndarray
    sentences: np.ndarray
    starts: np.ndarray  # the first sentence row of each passage
    counts: list[int]

    @classmethod
    def embed(cls, embedder: Embedder, texts: Sequence[str], prefixes: Optional[Sequence[str]] = None,
              split_these: Optional[Sequence[bool]] = None) -> "SentencePassages":
        """``texts``, whole and by sentence, each piece with its text's prefix before it
        (a LoCoMo turn's ``speaker: ``); a text of one sentence, or one ``split_these``
        says not to split (an assistant's), reuses its whole vector."""
        prefixes = prefixes or [""] * len(texts)
        split = [split_sentences(t) if split_these is None or split_these[n] else [t] for n, t in enumerate(texts)]
        whole = embedder.passages([p + t for p, t in zip(prefixes, texts)])
        rows = [p + s for p, parts in zip(prefixes, split) if len(parts) > 1 for s in parts]
        many = embedder.passages(rows) if rows else np.zeros((0, whole.shape[1]), dtype=np.float32)
        blocks, starts, at, taken = [], [], 0, 0
        for n, parts in enumerate(split):
            starts.append(at)
            if len(parts) > 1:
                blocks.append(many[taken : taken + len(parts)])
                taken += len(parts)
            else:
                blocks.append(whole[n : n + 1])
            at += len(blocks[-1])
        return cls(whole, np.concatenate(blocks), np.asarray(starts), [len(p) for p in split])

    def scores(self, queries: np.ndarray) -> dict[str, np.ndarray]:
        """Per scoring, the queries' scores of every passage (queries x passages)."""
        w = queries @ self.whole.T
        b = np.maximum.reduceat(queries @ self.sentences.T, self.starts, axis=1)
        return {name: score(w, b) for name, score in SCORINGS.items()}


def _ranked(scores: np.ndarray) -> np.ndarray:
    return np.argsort(-scores, axis=1, kind="stable")


def auc(positives: Sequence[float], negatives: Sequence[float]) -> float:
    """The chance that a positive scores above a negative (ties count half)."""
    pos, neg = np.asarray(positives)[:, None], np.asarray(negatives)[None, :]
    return float(((pos > neg).sum() + 0.5 * (pos == neg).sum()) / (pos.size * neg.size))


def distractor_turns(path: Path = LOCOMO, count: int = 1500) -> list[str]:
    """The everyday large store's distractors: the first ``count`` LoCoMo turns in file
    order, their text without the speaker."""
    texts: list[str] = []
    for sample in json.loads(path.read_text()):
        texts.extend(t["text"] for t in _turns(sample))
    return texts[:count]


def everyday_sentences(embedder: Embedder, path: Path = EVERYDAY, distractors: Sequence[str] = (),
                       user_only: bool = False) -> dict[str, dict[str, float]]:
    """Per scoring: recall@K and MRR of each fact's questions against the facts' messages
    and replies (and ``distractors``, user messages in the large store); and the AUC of
    the answering message's score for a real question against the best score in the
    store for a never-said one. With ``user_only``, the replies are not split."""
    data = json.loads(path.read_text())
    facts = data["facts"]
    texts = [f["message"] for f in facts] + [f["reply"] for f in facts] + list(distractors)
    users = [True] * len(facts) + [not user_only] * len(facts) + [True] * len(distractors)
    store = SentencePassages.embed(embedder, texts, split_these=users)
    asked = [(n, q) for n, f in enumerate(facts) for q in f["questions"]]
    real = store.scores(embedder.queries([q for _, q in asked]))
    never = store.scores(embedder.queries([q["question"] for q in data["never_said"]]))
    out = {}
    whole: list[int] = []
    for name, scores in real.items():
        order = _ranked(scores)
        positions = [int(np.nonzero(row == n)[0][0]) for (n, _), row in zip(asked, order)]
        whole = whole or positions  # "whole" comes first
        answer = [float(scores[i, n]) for i, (n, _) in enumerate(asked)]
        out[name] = {f"recall@{K}": sum(p < K for p in positions) / len(positions),
                     "mrr": sum(1 / (p + 1) for p in positions) / len(positions),
                     "auc": auc(answer, never[name].max(axis=1).tolist()),
                     "auc_top": auc(scores.max(axis=1).tolist(), never[name].max(axis=1).tolist()),
                     # Questions the whole vector misses that this finds, and the reverse.
                     "rescued": sum(w >= K > p for w, p in zip(whole, positions)),
                     "lost": sum(p >= K > w for w, p in zip(whole, positions))}
    out["_about"] = {"passages": len(texts), "questions": len(asked), "never_said": len(data["never_said"]),
                     "whole_misses": sum(w >= K for w in whole),
                     "whole_misses_multi_sentence": sum(w >= K and store.counts[n] > 1
                                                        for w, (n, _) in zip(whole, asked)),
                     "multi_sentence": sum(c > 1 for c in store.counts) / len(texts),
                     "sentences_per_passage": statistics.fmean(store.counts)}
    return out


def locomo_sentences(embedder: Embedder, path: Path = LOCOMO, user_only: bool = False) -> dict[str, dict[str, float]]:
    """Per scoring: turn recall@K and MRR of LoCoMo questions (categories 1-4), each turn
    embedded whole and by sentence (``speaker: sentence``); with ``user_only``, only
    speaker_a's turns are split (``bench.locomo`` stores speaker_b's as the assistant's)."""
    recalls: dict[str, list[float]] = {name: [] for name in SCORINGS}
    reciprocal: dict[str, list[float]] = {name: [] for name in SCORINGS}
    counts: list[int] = []
    for sample in json.loads(path.read_text()):
        turns = _turns(sample)
        where = {t["dia_id"]: n for n, t in enumerate(turns)}
        # Each sentence with its speaker, as the whole turn has it.
        store = SentencePassages.embed(embedder, [t["text"] for t in turns],
                                       [f"{t['speaker']}: " for t in turns],
                                       [not user_only or t["speaker"] == sample["conversation"].get("speaker_a") for t in turns])
        counts.extend(store.counts)
        asked = [(q["question"], [where[e] for e in _evidence(q.get("evidence", [])) if e in where])
                 for q in sample["qa"] if q.get("category") in (1, 2, 3, 4)]
        asked = [(q, e) for q, e in asked if e]
        for name, scores in store.scores(embedder.queries([q for q, _ in asked])).items():
            for (_, evidence), row in zip(asked, _ranked(scores)):
                top = set(row[:K].tolist())
                recalls[name].append(sum(e in top for e in evidence) / len(evidence))
                reciprocal[name].append(1 / (min(int(np.nonzero(row == e)[0][0]) for e in evidence) + 1))
    out: dict[str, dict[str, float]] = {
        name: {f"turn_recall@{K}": statistics.fmean(recalls[name]), "mrr": statistics.fmean(reciprocal[name])}
        for name in SCORINGS}
    out["_about"] = {"questions": len(recalls["whole"]), "passages": len(counts),
                     "multi_sentence": sum(c > 1 for c in counts) / len(counts),
                     "sentences_per_passage": statistics.fmean(counts)}
    return out


def write_cost(texts: Sequence[str], repeat: int = 3) -> dict[str, float]:
    """What embedding a record's sentences adds to a write, with the library's offline
    model (:meth:`OfflineEmbedding.embed_array`, as the index sync embeds a record):
    the median ms of one message embedded alone (an agent turn's put) and with its
    sentences in the same call, and the ms per message of all of them in one call (a
    bulk import's batches)."""
    from llama_memory.embeddings.offline import default_embedding

    model = default_embedding()
    model.embed_array(["warm-up text."])
    split = [split_sentences(t) for t in texts]
    with_sentences = [[t, *parts] if len(parts) > 1 else [t] for t, parts in zip(texts, split)]

    def each(batches: Sequence[list[str]]) -> float:
        times = []
        for _ in range(repeat):
            for batch in batches:
                start = time.perf_counter()
                model.embed_array(batch)
                times.append((time.perf_counter() - start) * 1000)
        return statistics.median(times)

    def bulk(flat: list[str]) -> float:
        start = time.perf_counter()
        for _ in range(repeat):
            model.embed_array(flat)
        return (time.perf_counter() - start) * 1000 / repeat / len(texts)

    return {"messages": len(texts), "one_whole_ms": each([[t] for t in texts]),
            "one_with_sentences_ms": each(with_sentences),
            "bulk_whole_ms": bulk(list(texts)),
            "bulk_with_sentences_ms": bulk([x for batch in with_sentences for x in batch])}



def sentence_mode(spec: ModelSpec, log: Callable[[str], None] = print, user_only: bool = False) -> dict[str, Any]:
    """Every figure of the sentence mode, for one model (``user_only``: the assistant's
    records are not split)."""
    embedder = Embedder(spec)
    row = {"model": spec.name, "user_only": user_only,
           "everyday small": everyday_sentences(embedder, user_only=user_only),
           "everyday large": everyday_sentences(embedder, distractors=distractor_turns(), user_only=user_only),
           "locomo": locomo_sentences(embedder, user_only=user_only)}
    facts = json.loads(EVERYDAY.read_text())["facts"]
    row["write cost"] = write_cost([f["message"] for f in facts] + distractor_turns(count=90))
    log(json.dumps(row))
    return row


def print_sentence_table(row: dict[str, Any]) -> None:
    """The sentence mode's figures as a markdown table."""
    small, large, lo = row["everyday small"], row["everyday large"], row["locomo"]
    print(f"\n| scoring | everyday small recall@{K} | MRR | AUC never-said | everyday large recall@{K} | MRR | "
          f"AUC never-said | LoCoMo turn recall@{K} | LoCoMo MRR |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name in SCORINGS:
        s, g, c = small[name], large[name], lo[name]
        print(f"| {name} | {s[f'recall@{K}']:.3f} | {s['mrr']:.3f} | {s['auc']:.3f} | {g[f'recall@{K}']:.3f} | "
              f"{g['mrr']:.3f} | {g['auc']:.3f} | {c[f'turn_recall@{K}']:.3f} | {c['mrr']:.3f} |")
    print("\n(AUC with the best score in the store for real questions too: "
          + ", ".join(f"{n} {small[n]['auc_top']:.3f}/{large[n]['auc_top']:.3f}" for n in SCORINGS) + ")")
    print(f"(everyday questions the whole vector misses, small/large: {small['_about']['whole_misses']}/"
          f"{large['_about']['whole_misses']}, of which about a message of several sentences "
          f"{small['_about']['whole_misses_multi_sentence']}/{large['_about']['whole_misses_multi_sentence']}; "
          "rescued and lost by each scoring: "
          + ", ".join(f"{n} +{small[n]['rescued']}-{small[n]['lost']}/+{large[n]['rescued']}-{large[n]['lost']}"
                      for n in SCORINGS if n != "whole") + ")")
    cost = row["write cost"]
    print(f"(write cost, offline model, {cost['messages']} messages: one message alone "
          f"{cost['one_whole_ms']:.1f} ms, with its sentences {cost['one_with_sentences_ms']:.1f} ms; "
          f"in bulk {cost['bulk_whole_ms']:.2f} ms a message, with sentences {cost['bulk_with_sentences_ms']:.2f} ms)")
    for name in ("everyday small", "everyday large", "locomo"):
        a = row[name]["_about"]
        print(f"({name}: {a['passages']} passages, {a['multi_sentence']:.0%} of more than one sentence, "
              f"{a['sentences_per_passage']:.2f} sentences each; {a['questions']} questions)")


def query_ms(embedder: Embedder | StaticEmbedder, texts: Sequence[str], repeat: int = 1) -> float:
    """Median ms of embedding one question (after a warm-up)."""
    embedder.queries(["warm-up question?"])
    times = []
    for text in list(texts) * repeat:
        start = time.perf_counter()
        embedder.queries([text])
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def measure(spec: ModelSpec, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Every figure of one model."""
    embedder = Embedder(spec)
    questions = [q for f in json.loads(EVERYDAY.read_text())["facts"][:30] for q in f["questions"][:1]]
    row = {"model": spec.name, "everyday": everyday(embedder), "locomo": locomo(embedder),
           "query_ms": query_ms(embedder, questions)}
    log(json.dumps(row))
    return row


def main(argv: Optional[Sequence[str]] = None) -> list[dict[str, Any]]:
    """Measure the default model and every ``--model``; print a table."""
    global MIN_WORDS
    parser = argparse.ArgumentParser(prog="python -m bench.embedders", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", type=parse_spec, default=[],
                        help="name=model.onnx:tokenizer.json[:mean|cls[:query prefix[:passage prefix]]]")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    parser.add_argument("--sentences", action="store_true",
                        help="score passages by their whole text, best sentence and mixes (the default model)")
    parser.add_argument("--min-words", type=int, default=MIN_WORDS,
                        help="with --sentences: a sentence of fewer words joins a neighbour")
    parser.add_argument("--user-only", action="store_true",
                        help="with --sentences: split the user's records only, the assistant's stay whole")
    args = parser.parse_args(argv)
    if args.sentences:
        MIN_WORDS = args.min_words
        row = sentence_mode(default_spec(), user_only=args.user_only)
        print_sentence_table(row)
        if args.json is not None:
            args.json.write_text(json.dumps(row, indent=2))
        return [row]
    rows = [measure(spec) for spec in [default_spec(), *args.model]]
    print(f"\n| model | everyday recall@{K} | everyday MRR | LoCoMo turn recall@{K} | LoCoMo MRR | ms per query |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        e, lo = r["everyday"], r["locomo"]
        print(f"| {r['model']} | {e[f'recall@{K}']:.3f} | {e['mrr']:.3f} | {lo[f'turn_recall@{K}']:.3f} | "
              f"{lo['mrr']:.3f} | {r['query_ms']:.1f} |")
    print(f"\n({rows[0]['everyday']['questions']} everyday questions over {rows[0]['everyday']['passages']} "
          f"facts; {rows[0]['locomo']['questions']} LoCoMo questions)")
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2))
    return rows


if __name__ == "__main__":
    main()
