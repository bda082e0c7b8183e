"""The dense index: vectors of memory records in Chroma, one collection per (tenant,
user), derived from the system of record (same ids) and rebuildable from it. A collection
per user needs no metadata filter (filtered search slows as a collection grows: 75 ms at
10,000 vectors against 2-3 ms) and no query reaches another user's vectors.
"""

from __future__ import annotations

import hashlib
import os
import threading
import uuid
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, TypeVar, Union

if TYPE_CHECKING:
    import numpy as np

from ..core.errors import StorageError
from .privacy import PRIVATE_FILE, is_private, make_private_dir, tighten_entries
from .sqlite.connection import DB_FILENAME

T = TypeVar("T")
#: A vector: any sequence of floats (lists, numpy arrays).
Vector = Union[Sequence[float], "np.ndarray"]

#: Sub-directory of a memory directory that holds Chroma's files.
CHROMA_DIRNAME = "chroma"
#: File in a memory directory locked while Chroma opens (see ``_opening_lock``).
OPEN_LOCK = "chroma.lock"


def _quiet_settings() -> Any:
    from chromadb.config import Settings

    return Settings(anonymized_telemetry=False, allow_reset=False)


def persistent_client(path: Path | str) -> Any:
    """An embedded Chroma client storing its files under ``path/chroma``, as private as
    the store's database (``0700`` beside an owner-only one, tightened on each open)."""
    import chromadb

    database = Path(path) / DB_FILENAME
    private = Path(path).is_dir() and is_private(database if database.exists() else path)
    directory = Path(path) / CHROMA_DIRNAME
    try:
        if private and not directory.exists():
            make_private_dir(directory)
        with _opening_lock(Path(path) / OPEN_LOCK, private):
            client = chromadb.PersistentClient(path=str(directory), settings=_quiet_settings())
    except Exception as exc:  # chromadb raises many types; name the place
        _forget_failed_system(str(directory))
        raise StorageError(f"cannot open the Chroma index under {path}: {exc}") from exc
    if private and is_private(directory):
        tighten_entries(directory)
    return client


def http_client(host: str, port: int = 8000, ssl: bool = False) -> Any:
    """A client of the Chroma server at ``host:port``; StorageError when unreachable."""
    import chromadb

    try:
        return chromadb.HttpClient(host=host, port=int(port), ssl=ssl, settings=_quiet_settings())
    except Exception as exc:  # ValueError "Could not connect...", httpx errors
        raise StorageError(f"cannot reach the Chroma server at {host}:{port}: {exc}") from exc


def server_address(url: str) -> tuple[str, int, bool]:
    """``(host, port, ssl)`` of a Chroma server URL (default port 8000, or 443 for https)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url if "://" in url else f"http://{url}")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"chroma_url must look like http://host:port, got {url!r}")
    secure = parts.scheme == "https"
    return parts.hostname, parts.port or (443 if secure else 8000), secure


def describe_client(client: Any) -> str:
    """Where a Chroma client keeps its data, for error messages."""
    try:
        settings = client.get_settings()
    except Exception:
        return "a custom Chroma client"
    if getattr(settings, "chroma_server_host", None):
        return f"the Chroma server at {settings.chroma_server_host}:{settings.chroma_server_http_port}"
    if getattr(settings, "is_persistent", False):
        return f"the embedded Chroma index under {settings.persist_directory}"
    return "the in-memory Chroma index"


def _forget_failed_system(directory: str) -> None:
    """Drop a failed client system from Chroma's per-directory cache, or one failed open
    would fail every later open in this process, even after a rebuild."""
    try:
        from chromadb.api.shared_system_client import SharedSystemClient

        SharedSystemClient._identifier_to_system.pop(directory, None)
    except Exception:  # a Chroma release without this cache: nothing to forget
        pass


@contextmanager
def _opening_lock(lock_file: Path, private: bool = False) -> Iterator[None]:
    """Hold an exclusive lock on ``lock_file`` while Chroma opens: processes opening one new
    directory at once race its schema creation (no lock without ``fcntl`` or write access);
    ``private``: a new lock file is ``0600``."""
    try:
        import fcntl

        handle = open(
            lock_file, "a", opener=lambda name, flags: os.open(name, flags, PRIVATE_FILE if private else 0o666)
        )
    except (ImportError, OSError):
        yield
        return
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def ephemeral_client() -> Any:
    """An in-memory Chroma client (nothing written to disk)."""
    import chromadb

    return chromadb.EphemeralClient(settings=_quiet_settings())


def open_index(
    prefix: str, path: Optional[Path | str] = None, chroma_client: Any = None, namespace: Optional[str] = None
) -> "DenseIndex":
    """The dense index of one source: on ``chroma_client`` (names carry ``namespace``, the
    store's id, so a server's stores never touch each other's), else embedded under
    ``path``, else in the process-wide ephemeral Chroma."""
    if chroma_client is not None:
        return DenseIndex(chroma_client, f"{prefix}-{namespace}" if namespace else prefix)
    if path is not None:
        return DenseIndex(persistent_client(path), prefix)
    return DenseIndex(ephemeral_client(), DenseIndex.unique_prefix(prefix))


class DenseIndex:
    """Record vectors in Chroma collections named ``<prefix>-<hash of tenant and user>``
    on ``client``. Chroma errors are re-raised as
    :class:`~llama_memory.core.errors.StorageError`.
    """

    def __init__(self, client: Any, prefix: str) -> None:
        self.client = client
        self.prefix = prefix
        #: Where the vectors live (named in every error).
        self.location = describe_client(client)
        self._collections: dict[str, Any] = {}
        self._lock = threading.Lock()

    @staticmethod
    def unique_prefix(prefix: str) -> str:
        """A prefix no other index uses (in-memory memories share one Chroma)."""
        return f"{prefix}-{uuid.uuid4().hex[:12]}"

    def collection_name(self, tenant_id: str, user_id: str) -> str:
        digest = hashlib.sha256(f"{tenant_id}\x1f{user_id}".encode("utf-8")).hexdigest()[:32]
        return f"{self.prefix}-{digest}"

    def _collection(self, tenant_id: str, user_id: str, create: bool = True) -> Any:
        """One user's collection (cached); ``create=False``: None when there is none."""
        from chromadb.errors import NotFoundError

        name = self.collection_name(tenant_id, user_id)
        with self._lock:
            if name not in self._collections:
                try:
                    if create:
                        self._collections[name] = self.client.get_or_create_collection(
                            name, embedding_function=None, configuration={"hnsw": {"space": "cosine"}}
                        )
                    else:
                        self._collections[name] = self.client.get_collection(name, embedding_function=None)
                except NotFoundError:
                    return None
                except Exception as exc:
                    raise StorageError(f"cannot open Chroma collection {name!r} on {self.location}: {exc}") from exc
            return self._collections[name]

    def _on_collection(
        self, tenant_id: str, user_id: str, action: str, operation: Callable[[Any], T], empty: T, create: bool = False
    ) -> T:
        """Run ``operation`` on one user's collection (a cached handle dropped meanwhile is
        opened again once); none reads as ``empty``, created only with ``create`` (a write)."""
        from chromadb.errors import NotFoundError

        name = self.collection_name(tenant_id, user_id)
        for attempt in range(2):
            collection = self._collection(tenant_id, user_id, create)
            if collection is None:
                return empty
            try:
                return operation(collection)
            except NotFoundError as exc:
                with self._lock:
                    self._collections.pop(name, None)
                if attempt:
                    raise self._error(action, name, exc) from exc
            except Exception as exc:
                raise self._error(action, name, exc) from exc
        raise AssertionError("unreachable")

    def _error(self, action: str, name: str, exc: Exception) -> StorageError:
        return StorageError(f"Chroma {action} on {name!r} failed ({self.location}): {exc}")

    def upsert(self, tenant_id: str, user_id: str, ids: Sequence[str], embeddings: Sequence[Vector]) -> None:
        if not ids:
            return
        vectors = [list(map(float, e)) for e in embeddings]
        self._on_collection(tenant_id, user_id, "upsert", lambda c: c.upsert(ids=list(ids), embeddings=vectors), None, create=True)

    def query(
        self, tenant_id: str, user_id: str, embedding: Vector, k: int, exclude: Collection[str] = ()
    ) -> list[tuple[str, float]]:
        """Chroma filters on metadata, not ids: as many more asked as ``exclude`` leaves out."""
        if k <= 0:
            return []
        vector = [list(map(float, embedding))]
        wanted = k + len(exclude)
        result: dict[str, Any] = self._on_collection(
            tenant_id, user_id, "query",
            lambda c: c.query(query_embeddings=vector, n_results=wanted, include=["distances"]),
            {"ids": [], "distances": []},
        )  # fmt: skip
        ids = result["ids"][0] if result["ids"] else []
        distances = result["distances"][0] if result.get("distances") else [1.0] * len(ids)
        found = [(i, 1.0 - float(d)) for i, d in zip(ids, distances)]
        if not exclude:
            return found
        left_out = set(exclude)
        return [hit for hit in found if hit[0] not in left_out][:k]

    def vectors(self, tenant_id: str, user_id: str, ids: Sequence[str]) -> dict[str, Vector]:
        if not ids:
            return {}
        result: dict[str, Any] = self._on_collection(
            tenant_id, user_id, "get vectors", lambda c: c.get(ids=list(ids), include=["embeddings"]),
            {"ids": [], "embeddings": None},
        )  # fmt: skip
        embeddings = result.get("embeddings")
        if embeddings is None:
            return {}
        return dict(zip(result["ids"], embeddings))

    def count(self, tenant_id: str, user_id: str) -> int:
        return int(self._on_collection(tenant_id, user_id, "count", lambda c: c.count(), 0))

    def ids(self, tenant_id: str, user_id: str, page: int = 5000) -> set[str]:
        """Read in pages."""
        found: set[str] = set()
        while True:
            offset = len(found)
            batch: list[str] = self._on_collection(
                tenant_id, user_id, "list ids", lambda c: c.get(include=[], limit=page, offset=offset)["ids"], []
            )
            found.update(batch)
            if len(batch) < page:
                return found

    def delete(self, tenant_id: str, user_id: str, ids: Sequence[str]) -> None:
        if ids:
            self._on_collection(tenant_id, user_id, "delete", lambda c: c.delete(ids=list(ids)), None)

    def drop(self, tenant_id: str, user_id: str) -> None:
        self.drop_collection(self.collection_name(tenant_id, user_id))

    def collection_names(self) -> list[str]:
        try:
            names = [getattr(c, "name", c) for c in self.client.list_collections()]
        except Exception as exc:
            raise StorageError(f"cannot list Chroma collections on {self.location}: {exc}") from exc
        return [name for name in names if name.startswith(self.prefix + "-")]

    def clear(self) -> None:
        for name in self.collection_names():
            self.drop_collection(name)

    def drop_collection(self, name: str) -> None:
        with self._lock:
            self._collections.pop(name, None)
            try:
                existing = {getattr(c, "name", c) for c in self.client.list_collections()}
                if name in existing:
                    self.client.delete_collection(name)
            except Exception as exc:
                raise StorageError(f"cannot drop Chroma collection {name!r} on {self.location}: {exc}") from exc
