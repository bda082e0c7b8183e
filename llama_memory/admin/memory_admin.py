"""Manage a memory store: what is remembered of each user, and why it is shown.

:class:`MemoryAdmin` works on every user of one tenant (listing, inspecting, searching
and explaining, deleting and forgetting, export and import, maintenance); the
``llama-memory`` command line is a thin layer over it::

    from llama_memory import MemoryAdmin

    with MemoryAdmin("./memory") as admin:
        for user in admin.users():
            print(user.user_id, user.records)
        admin.export("alice.jsonl", users=["alice"])

It opens every kind of source that has data in the store, so nothing stored is hidden.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Optional, Union

from ..core.errors import LlamaMemoryError, MemoryClosedError, StorageError
from ..core.progress import watching
from ..core.text import listed
from ..core.types import Expiry, MemoryRecord, Scope, now
from ..memory import DEFAULT_TOP_K
from ..storage.ports import SessionSummary, StoreCounts, UserSummary
from ..storage.ports.jobs import FormationDay, JobRow
from ..storage.reconcile import ReconcileReport
from ..storage.registry import backend_at, check_path, location_of
from ..storage.shared import SHARED
from ..storage.sql.admin import AdminRows
from .transfer import EXPORT_FORMAT, EXPORT_VERSION, ImportCounts, TenantTransfer

if TYPE_CHECKING:
    # The memory, its sources and LlamaIndex are imported by the methods that use them:
    # listing users, sessions and counts (the command line's quick commands) needs none.
    from llama_index.core.base.embeddings.base import BaseEmbedding

    from ..core.progress import Progress
    from ..memory.composable import ComposableMemory
    from ..read.compose import MemoryBlock
    from ..sources.base import MemorySource
    from ..sources.instructions import Instruction
    from ..sources.profile import ProfileChange, ProfileSource
    from ..sources.triples import KnowledgeTriple, TripleSource
    from ..sources.vector import VectorSource
    from ..storage.backend import OpenBackend

__all__ = [
    "EXPORT_FORMAT", "EXPORT_VERSION", "ImportCounts", "MemoryAdmin", "SessionSummary",
    "StoreNotFoundError", "StoreStats", "UnknownUserError", "UserOverview", "UserSummary",
]


class StoreNotFoundError(LlamaMemoryError, FileNotFoundError):
    """The path given is not a memory directory (no ``memory.sqlite3`` in it)."""


class UnknownUserError(LlamaMemoryError, KeyError):
    """The store has nothing of the user asked for (in this tenant)."""

    def __str__(self) -> str:  # KeyError would print the message quoted
        return str(self.args[0])


@dataclass
class UserOverview:
    """What is remembered of one user (:meth:`MemoryAdmin.show`).

    Attributes:
        summary: counts (sessions, messages, records, triples, profile fields).
        profile: the current profile as a nested dict.
        triples: the knowledge triples that hold now.
        instructions: the standing instructions the assistant follows for the user.
        recent: the latest long-term records, newest first.
        sessions: the user's conversations.
    """

    summary: UserSummary
    profile: dict[str, Any] = field(default_factory=dict)
    triples: list[KnowledgeTriple] = field(default_factory=list)
    instructions: list[Instruction] = field(default_factory=list)
    recent: list[MemoryRecord] = field(default_factory=list)
    sessions: list[SessionSummary] = field(default_factory=list)


@dataclass
class StoreStats:
    """What a store holds for a tenant (:meth:`MemoryAdmin.stats`).

    Attributes:
        counts: users, sessions, messages, records by source, triples, profile rows,
            records waiting for the dense index (``counts.pending``) and expired ones
            not purged yet.
        sizes: bytes on disk by part (``sqlite``, ``chroma``; ``postgres``) and
            ``total``.
        schema_version: the SQLite schema version.
        tenants: every tenant in the store.
        location: the store: its directory, or ``host:port/dbname`` (no password).
        jobs: background jobs (formation passes) of the whole store by state:
            ``queued``, ``running``, ``done``, ``dead`` (failed for good).
        formation: what the tenant's formation passes cost, per user and per UTC day
            (:class:`~llama_memory.storage.ports.jobs.FormationDay`), oldest day first.
    """

    counts: StoreCounts
    sizes: dict[str, int]
    schema_version: int
    tenants: list[str]
    jobs: dict[str, int] = field(default_factory=dict)
    location: str = ""
    formation: list[FormationDay] = field(default_factory=list)


Time = Union[float, int, str, Any]


class MemoryAdmin(TenantTransfer, AbstractContextManager["MemoryAdmin"]):
    """Every user of one tenant of a memory store, for inspection and maintenance.

    Args:
        path: the memory directory (``path=`` of ``ComposableMemory.from_defaults``), or
            a PostgreSQL store's ``postgresql://`` URL (``store=``; needs the
            ``postgres`` extra; ``create`` is then implied).
        tenant_id: the tenant to work on.
        embed_model: the embedding model the store was built with (default as
            ``from_defaults``); loaded only by what needs it (search, explain, import,
            reindex).
        create: create the store when ``path`` holds none (for an import); otherwise
            :class:`StoreNotFoundError`, so a mistyped path leaves no empty store.
        chroma_url: server mode: the Chroma server holding the store's vectors
            (``"http://host:port"``); a store used in server mode is refused without it.
        chroma_client: any Chroma client instead of ``chroma_url``.
        encryption_key: the key of an encrypted SQLite store (default the
            ``LLAMA_MEMORY_ENCRYPTION_KEY`` environment variable).
        owner_only: as ``from_defaults``: a store created here is owner-only, export
            files are ``0600``; False leaves modes to the umask.
        **options: options (:class:`~llama_memory.memory.settings.MemorySettings`) of the
            memories built for :meth:`search` and :meth:`explain`: use your
            application's. Checked now (TypeError, ValueError).

    Close it (or use ``with``) to write waiting vectors and release the files. Admins of
    one process on one store share one opening of it, closed by the last one.
    """

    def __init__(
        self,
        path: Union[str, Path],
        tenant_id: str = "default",
        *,
        embed_model: Optional[BaseEmbedding] = None,
        create: bool = False,
        chroma_url: Optional[str] = None,
        chroma_client: Any = None,
        encryption_key: Optional[str] = None,
        owner_only: bool = True,
        **options: Any,
    ) -> None:
        if options:  # (the settings import LlamaIndex: only when there are options to check)
            from ..memory.settings import MemorySettings

            MemorySettings(**options)
        if not isinstance(tenant_id, str) or not tenant_id:
            raise ValueError(f"tenant_id must be a non-empty string, got {tenant_id!r}")
        if isinstance(path, str):
            check_path(path)
        location = location_of(
            path, chroma_url=chroma_url, chroma_client=chroma_client,
            encryption_key=encryption_key, owner_only=owner_only,
        )  # fmt: skip
        backend = backend_at(location)
        missing = None if create else backend.missing(path)
        if missing is not None:
            above = next((p for p in Path(path).parents[:3] if backend.missing(p) is None), None)
            raise StoreNotFoundError(
                f"no memory store at {Path(path)}: the path {missing}. Pass the directory given "
                "as path= to ComposableMemory.from_defaults (an import creates a new one)"
                + (f"; {Path(path)} is inside the store {above}: did you mean {above}?" if above else "")
            )
        self.tenant_id = tenant_id
        self.owner_only = owner_only
        #: The options of the memories it builds (:meth:`memory`).
        self.options = options
        self._embed_model = embed_model
        if chroma_url is not None and chroma_client is not None:
            raise ValueError("pass chroma_url or chroma_client, not both")
        # One opening per store and process (migrated, a key derived, once); a bad Chroma URL fails now.
        self._opened = SHARED.acquire(location, lambda: backend.open(location, for_admin=True))
        self.store: Any = self._opened.store
        self._rows: AdminRows = self._opened.admin_rows()
        self._vector: Optional[VectorSource] = None
        self._profile: Optional[ProfileSource] = None
        self._triples: Optional[TripleSource] = None
        self._closed = False

    # -- life cycle ---------------------------------------------------------------------

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Write waiting vectors to the index and close the store (twice is harmless)."""
        if self._closed:
            return
        self._closed = True
        try:
            for source in (self._vector, self._profile, self._triples):
                if source is not None:
                    source.close()
        finally:
            SHARED.release(self._opened)

    @property
    def _backend(self) -> OpenBackend:
        # MemoryClosedError once closed: the opening may live on for another admin, not this one.
        if self._closed:
            raise MemoryClosedError(
                f"this MemoryAdmin of {self._opened.location} is closed (close() was called, or "
                "its `with` block ended): open a new one, MemoryAdmin(path)"
            )
        return self._opened

    @property
    def _admin(self) -> AdminRows:
        self._backend  # noqa: B018 (raises once closed)
        return self._rows

    # -- sources, opened when first needed ---------------------------------------------

    def _embed(self) -> BaseEmbedding:
        from ..memory.wiring import resolve_embed_model

        if self._embed_model is None:
            self._embed_model = resolve_embed_model(None)
        return self._embed_model

    @property
    def profile_source(self) -> ProfileSource:
        """The profile source on this store (opened on first use; no model needed)."""
        from ..sources.profile import ProfileSource

        if self._profile is None:
            self._profile = ProfileSource(self._backend.profile_rows())
        return self._profile

    @property
    def vector_source(self) -> VectorSource:
        """The past-messages source on this store (loads the embedding model and Chroma)."""
        from ..memory.wiring import vector_source

        if self._vector is None:
            self._vector = vector_source(self._backend, self._embed(), Expiry())
        return self._vector

    def triple_source(self, create: bool = False) -> Optional[TripleSource]:
        """The knowledge-triple source when the store holds triples (or ``create``), else None."""
        from ..memory.wiring import triple_source

        if self._triples is None and (create or self._admin.has_triples()):
            self._triples = triple_source(self._backend, self._embed(), expiry=Expiry())
        return self._triples

    def sources(self) -> list[MemorySource]:
        """Every source kind that has data in the store: past messages and the profile,
        and knowledge triples when there are any."""
        triples = self.triple_source()
        return [self.vector_source, self.profile_source, *([triples] if triples else [])]

    def memory(self, user_id: str, session_id: Optional[str] = None) -> ComposableMemory:
        """A memory of ``user_id`` on this store with the admin's sources, as an
        application would open it (``session_id`` resumes that conversation, default a
        new one). Close the admin, not the memory."""
        from ..memory.composable import ComposableMemory
        from ..memory.settings import MemorySettings
        from ..memory.wiring import memory_on

        settings = MemorySettings(
            user_id=user_id, session_id=session_id, tenant_id=self.tenant_id, path=self._backend.path,
            secondary_memory_sources=self.sources(), **self.options,
        )  # fmt: skip
        return memory_on(ComposableMemory, settings, self._backend)

    # -- listing ----------------------------------------------------------------------

    def users(self) -> list[UserSummary]:
        """Every user of the tenant with what is stored of them, sorted by id."""
        return self._admin.users(self.tenant_id)

    def user(self, user_id: str) -> UserSummary:
        """One user's counts; :class:`UnknownUserError` when the tenant has nothing of them."""
        _require_text(user_id, "user_id")
        users = self.users()
        for summary in users:
            if summary.user_id == user_id:
                return summary
        # Each id cut to 40 characters: an id of any length leaves the message readable.
        known = [repr(u) if len(u) <= 40 else repr(u[:39]) + "…" for u in (s.user_id for s in users)]
        raise UnknownUserError(
            f"no user {user_id!r} in tenant {self.tenant_id!r} of {self.location}"
            + (f"; its users are {listed(known)}" if known else "; it has no users" + self.other_tenants())
        )

    def other_tenants(self) -> str:
        """``" (the store's tenants: 'a', 'b')"`` when the store holds tenants and this
        admin's is not one of them (a mistyped ``tenant_id``, ``--tenant``), else ``""``."""
        tenants = self._admin.tenants()
        if not tenants or self.tenant_id in tenants:
            return ""
        return f" (the store's tenants: {listed([repr(t) for t in tenants])})"

    def sessions(self, user_id: str) -> list[SessionSummary]:
        """The user's conversations, oldest first (:class:`UnknownUserError` for an unknown user)."""
        self.user(user_id)
        return self._admin.sessions(self.tenant_id, user_id)

    def records(
        self,
        user_id: str,
        *,
        session_id: Optional[str] = None,
        source: Optional[str] = None,
        since: Optional[Time] = None,
        until: Optional[Time] = None,
        limit: Optional[int] = None,
        newest_first: bool = False,
    ) -> list[MemoryRecord]:
        """The user's long-term records with their provenance, in the order written.

        Args:
            user_id: whose records.
            session_id: only those written in this conversation.
            source: only those of this source (``"vector"``...).
            since: only those that happened at or after this time (their event time,
                else when stored): a datetime, date, epoch seconds or ISO string.
            until: only those that happened before this time.
            limit: at most this many.
            newest_first: the latest first (default the oldest first).
        """
        from ..core.messages import to_epoch

        self.user(user_id)
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise ValueError(f"limit must be a non-negative integer or None, got {limit!r}")
        return self._admin.records(
            self.tenant_id, user_id, session_id=session_id, source=source,
            since=None if since is None else to_epoch(since), until=None if until is None else to_epoch(until),
            limit=limit, newest_first=newest_first,
        )  # fmt: skip

    def unmatched_filter(
        self, user_id: str, *, session_id: Optional[str] = None, source: Optional[str] = None
    ) -> Optional[str]:
        """Why :meth:`records` with these filters may have found nothing, when one of them
        names nothing there is: a session the user never had, a source no record of the
        tenant comes from (a typo, such as ``"vectors"``); the sentence names those there
        are. None when both exist (the filters then simply matched nothing)."""
        if session_id is not None:
            sessions = [s.session_id for s in self.sessions(user_id)]
            if session_id not in sessions:
                shown = listed([repr(s) for s in sessions])
                return f"user {user_id!r} has no session {session_id!r}; their sessions are {shown}"
        if source is not None:
            sources = sorted(self._admin.counts(self.tenant_id, now()).records)
            if source not in sources:
                return (
                    f"no record of tenant {self.tenant_id!r} comes from a source named {source!r}; "
                    + (f"its records' sources are {', '.join(map(repr, sources))}" if sources else "it has no records")
                    + (" (triples are listed by `show` and MemoryAdmin.triples())" if source == "triples" else "")
                )  # fmt: skip
        return None

    def record(self, user_id: str, record_id: str) -> MemoryRecord:
        """One of the user's records or knowledge triples by id, whole, as stored (a
        triple rendered with its validity); KeyError naming the id when there is none."""
        from ..sources.triples.search import triple_record

        self.user(user_id)
        _require_text(record_id, "record_id")
        found = self._admin.records(self.tenant_id, user_id, ids=[record_id])
        if found:
            return found[0]
        triples = self.triple_source()
        if triples is not None:
            for triple in self.triples(user_id, include_history=True):
                if triple.id == record_id:
                    return triple_record(triple, 0.0, [], triples.name)
        raise KeyError(f"user {user_id!r} has no record or triple with id {record_id!r}")

    def profile(self, user_id: str) -> dict[str, Any]:
        """The user's current profile as a nested dict (``{}`` when none)."""
        return self.profile_source.get_profile(self._scope(user_id))

    def profile_history(self, user_id: str) -> list[ProfileChange]:
        """Every value each profile field has had, oldest first."""
        return self.profile_source.history(None, self._scope(user_id))

    def instructions(self, user_id: str, include_history: bool = False) -> list[Instruction]:
        """The standing instructions the assistant follows for the user, oldest first;
        with ``include_history``, replaced and removed ones too."""
        from ..memory.wiring import open_instructions

        instructions = open_instructions(self._backend, self._scope(user_id))
        assert instructions is not None  # _scope gives a user
        return instructions.history() if include_history else instructions.current()

    def triples(self, user_id: str, include_history: bool = False) -> list[KnowledgeTriple]:
        """The user's unexpired knowledge triples, oldest first: those that hold now, or
        all with ``include_history`` (no model or dense index needed)."""
        from ..sources.triples.model import to_triple

        scope = self._scope(user_id)
        if not self._admin.has_triples():
            return []  # no table to read (and none created by reading)
        rows = self._backend.triple_timeline().select(scope, now(), include_history=include_history)
        return [to_triple(row) for row in rows]

    def show(self, user_id: str, recent: int = 10) -> UserOverview:
        """Counts, profile, current triples, instructions, the ``recent`` latest records
        and the sessions of one user."""
        return UserOverview(
            summary=self.user(user_id), profile=self.profile(user_id), triples=self.triples(user_id),
            instructions=self.instructions(user_id), recent=self.records(user_id, limit=recent, newest_first=True),
            sessions=self._admin.sessions(self.tenant_id, user_id),
        )  # fmt: skip

    # -- retrieval ------------------------------------------------------------------------

    def search(self, user_id: str, query: str, k: int = DEFAULT_TOP_K) -> list[MemoryRecord]:
        """What ``memory.search(query, k)`` returns for the user: records with scores,
        sources and provenance."""
        self.user(user_id)
        _require_text(query, "query")
        return self.memory(user_id).search(query, k)

    def explain(self, user_id: str, query: str, session_id: Optional[str] = None) -> MemoryBlock:
        """The block ``get(query)`` injects for the user, with what was left out and why;
        ``session_id`` resumes that conversation (default a new one)."""
        self.user(user_id)
        _require_text(query, "query")
        memory = self.memory(user_id, session_id)
        memory.get(query)
        return memory.last_block

    # -- deleting -------------------------------------------------------------------------

    def delete_record(self, user_id: str, record_id: str) -> str:
        """Delete one of the user's records or triples by id from every index; return its
        source's name (KeyError when there is none). The store goes first: if the dense
        index cannot be reached, a StorageError says so and :meth:`reconcile` drops the
        vector later."""
        self.user(user_id)
        scope = self._scope(user_id)
        # Opened first: a refusal (no server address, another model) must leave the record in place.
        vector, triples = self.vector_source, self.triple_source()
        source = self._admin.delete_record(self.tenant_id, user_id, record_id)
        if source is not None:
            if source == vector.name:
                vector.forget_records([record_id], scope)
            return source
        if triples is not None and self._admin.delete_triple(self.tenant_id, user_id, record_id):
            triples.index.delete(self.tenant_id, user_id, [record_id])
            return triples.name
        raise KeyError(
            f"user {user_id!r} has no record or triple with id {record_id!r}: take the id "
            "from `llama-memory search` or MemoryAdmin.records()"
        )

    def forget(self, user_id: str) -> None:
        """Remove every trace of the user in this tenant (as ``memory.forget()``); a dense
        index that cannot be reached raises StorageError after the store was cleaned."""
        from ..sources.base import forget_in_each

        self.user(user_id)
        scope = self._scope(user_id)
        sources = self.sources()  # opened first: a refusal must leave the user in place
        self.store.delete_user(scope)
        if failures := forget_in_each(sources, scope):
            raise StorageError(
                f"forget: user {user_id!r} was removed from the system of record, but not from "
                f"every index ({'; '.join(failures)}); run reconcile once it is reachable"
            )

    # -- maintenance ----------------------------------------------------------------------

    def reindex(self, progress: Optional[Progress] = None, *, reembed: bool = False) -> int:
        """Rebuild the dense indexes (past messages, triples) from the system of record,
        for every tenant and user; return how many records were embedded.

        ``reembed``: embed every record and triple again. With this admin's
        ``embed_model``, the store switches to it (as ``from_defaults(..., reembed=True)``
        does: the recorded model is dropped); without one, with the model the store
        recorded if it can be built here (the offline default, or ``Settings.embed_model``),
        else a :class:`LlamaMemoryError` naming it. Call it before anything else opens
        the admin's sources (search, explain, import).
        """
        if reembed:
            if self._vector is not None or self._triples is not None:
                raise LlamaMemoryError(
                    "reindex(reembed=True) must be this MemoryAdmin's first use of the "
                    "embedding model: open a new MemoryAdmin(path, embed_model=...) for it"
                )
            from ..embeddings.store_model import forget_embedding_model
            from .reembedding import recorded_model

            if self._embed_model is None:  # not a switch: the store's own model, checked at open
                self._embed_model = recorded_model(self.store)
            else:
                forget_embedding_model(self.store, vector=True, triples=True)
        return self._embed_indexed("reindex", progress)

    def flush(self, progress: Optional[Progress] = None) -> int:
        """Embed every record (and triple) still waiting for the dense index, of every
        tenant; return how many."""
        return self._embed_indexed("flush", progress)

    def _embed_indexed(self, how: Literal["reindex", "flush"], progress: Optional[Progress]) -> int:
        from ..sources.triples import TripleSource
        from ..sources.vector import VectorSource

        sources = [s for s in self.sources() if isinstance(s, (VectorSource, TripleSource))]
        backlog = partial(self._admin.index_backlog, self.vector_source.name)
        total, waiting = backlog()
        with watching(progress, lambda: backlog()[1], total if how == "reindex" else waiting):
            return sum(getattr(source, how)() for source in sources)

    def reconcile(self) -> dict[str, ReconcileReport]:
        """Bring the dense indexes in line with the system of record, for every user
        (see ``ComposableMemory.reconcile``); what each source did, by name."""
        return {source.name: source.reconcile(True) for source in self.sources()}

    def purge_expired(self) -> int:
        """Delete the records, triples and profile values whose time to live is over, from
        every index; return how many."""
        return sum(source.purge_expired() for source in self.sources())

    def stats(self) -> StoreStats:
        """Counts, sizes on disk, pending index work, jobs, and what the tenant's
        extraction passes cost per user and day."""
        return StoreStats(
            counts=self._admin.counts(self.tenant_id, now()), sizes=self._backend.sizes(),
            schema_version=self.store.schema_version, tenants=self._admin.tenants(),
            jobs=self._backend.jobs.counts(), location=self.location,
            formation=self._backend.jobs.formation_days(tenant_id=self.tenant_id),
        )  # fmt: skip

    # -- background jobs --------------------------------------------------------------------

    def jobs(self, failed_only: bool = True) -> list[JobRow]:
        """The tenant's extraction jobs, oldest first: only the failed ones (with
        ``last_error``) unless ``failed_only=False``."""
        return self._backend.jobs.list_jobs(failed=failed_only, tenant_id=self.tenant_id)

    def retry_job(self, job_id: str) -> str:
        """Queue a failed job of the tenant again, to run now with its attempts from zero.
        Returns the id of the job that will run: ``job_id``, or the session's job already
        queued (it covers the dead one's messages).

        Raises:
            KeyError: the tenant has no job ``job_id``.
            ValueError: the job did not fail (done, running, or queued).
        """
        _require_text(job_id, "job_id")
        return self._backend.jobs.retry(job_id, tenant_id=self.tenant_id)

    def retry_dead_jobs(self) -> dict[str, str]:
        """Queue every dead job of the tenant again (see :meth:`retry_job`): for each
        dead job's id, the id of the job that will run."""
        jobs = self._backend.jobs
        return {
            job.id: jobs.retry(job.id, tenant_id=self.tenant_id)
            for job in jobs.list_jobs(states=["dead"], tenant_id=self.tenant_id)
        }

    # -- internals ------------------------------------------------------------------------

    @property
    def location(self) -> str:
        """The store as an error names it: the directory, or ``host:port/dbname``."""
        return str(self._opened.location)

    def _scope(self, user_id: str) -> Scope:
        _require_text(user_id, "user_id")
        return Scope(user_id=user_id, tenant_id=self.tenant_id)


def _require_text(value: Any, what: str) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{what} must be a non-empty string, got {value!r}")
