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

Run::

    .venv/bin/python -m bench.embedders                       # the default model alone
    .venv/bin/python -m bench.embedders --model \\
        bge-small=/path/model.onnx:/path/tokenizer.json:cls:"Represent this sentence for searching relevant passages: ":
"""

from __future__ import annotations

import argparse
import json
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


def locomo(embedder: Embedder, path: Path = LOCOMO) -> dict[str, Any]:
    """Turn recall@K and MRR of LoCoMo questions (categories 1-4) against each
    conversation's turns."""
    recalls: list[float] = []
    reciprocal: list[float] = []
    for sample in json.loads(path.read_text()):
        talk = sample["conversation"]
        turns = [t for key in sorted((k for k in talk if k.startswith("session_") and not k.endswith("date_time")),
                                     key=lambda k: int(k.split("_")[1]))
                 for t in talk[key]]
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


def query_ms(embedder: Embedder, texts: Sequence[str], repeat: int = 1) -> float:
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
    parser = argparse.ArgumentParser(prog="python -m bench.embedders", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", type=parse_spec, default=[],
                        help="name=model.onnx:tokenizer.json[:mean|cls[:query prefix[:passage prefix]]]")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args(argv)
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
