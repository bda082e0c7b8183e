"""Moving a SQLite memory directory into PostgreSQL: ``llama-memory copy``. Each user is
copied in one transaction (export rows, per-session meta, waiting jobs), after the
store-wide meta; ``skip_existing`` resumes a copy that stopped. Vectors are re-embedded
into pgvector, not read from Chroma (one embedding per record and triple).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

from llama_index.core.base.embeddings.base import BaseEmbedding

from ..core.errors import LlamaMemoryError
from ..core.progress import Progress
from ..core.text import listed, replace_unstorable
from ..sources.triples.normalize import search_text
from ..storage.registry import entry_for
from .memory_admin import MemoryAdmin


class CopyRefusedError(LlamaMemoryError, ValueError):
    """The target cannot take the copy as asked (it already holds some of the users,
    or vectors of another embedding model); nothing was written."""


@dataclass
class CopyReport:
    """What :func:`copy_store` did.

    Attributes:
        users: users copied, by tenant.
        skipped: users the target already held (``skip_existing``), by tenant.
        rows: rows written by kind (``message``, ``record``, ``profile``, ``triple``,
            ``meta``, ``job``).
        embedded: records and triples embedded into pgvector after the copy.
        replaced: characters PostgreSQL cannot store (NUL) replaced by U+FFFD, by
            tenant and user.
    """

    users: dict[str, list[str]] = field(default_factory=dict)
    skipped: dict[str, list[str]] = field(default_factory=dict)
    rows: Counter[str] = field(default_factory=Counter)
    embedded: int = 0
    replaced: dict[str, dict[str, int]] = field(default_factory=dict)


def copy_store(
    source: Union[str, Path], target: str, *, tenant_id: Optional[str] = None, skip_existing: bool = False,
    embed_model: Optional[BaseEmbedding] = None, chroma_url: Optional[str] = None, progress: Optional[Progress] = None,
) -> CopyReport:  # fmt: skip
    """Copy the SQLite memory directory ``source`` into the PostgreSQL store ``target``.

    Args:
        source: the memory directory (``path=`` of ``from_defaults``).
        target: the ``postgresql://`` URL; its schema is created or migrated on open.
        tenant_id: copy this tenant only (default every tenant).
        skip_existing: leave out the users the target already holds (to resume); by
            default they make the copy refuse, before writing anything.
        embed_model: the model the directory's vectors were made with, if not the
            offline default.
        chroma_url: not needed (vectors are re-embedded); accepted so that a
            server-mode directory opens.
        progress: told the rows copied.

    Raises:
        CopyRefusedError: the target holds some of the users (without
            ``skip_existing``) or vectors of another embedding model.
        StoreNotFoundError: ``source`` is not a memory directory.
        ValueError: ``target`` is not a PostgreSQL URL, or ``source`` is one.
    """
    # The URL of a store a copy may go into: a server backend's that takes copies (the
    # copy re-embeds the vectors into its database).
    entry = entry_for(target)
    if not (isinstance(target, str) and entry.path_form is None and entry.load().copy_target):
        # Not echoed: a URL of another scheme may hold a password.
        scheme = target.partition("://")[0] if isinstance(target, str) and "://" in target else None
        if scheme:
            got = f"a {scheme[:20]!r} URL"
        elif isinstance(target, (str, Path)):  # a path holds no password: show it
            got = f"{str(target)!r}, a path (copy moves a SQLite memory directory into PostgreSQL)"
        else:
            got = f"a {type(target).__name__}"
        raise ValueError(f"copy --to takes a PostgreSQL URL ('postgresql://user@host:5432/dbname'), got {got}")
    if isinstance(source, str) and entry_for(source).path_form is None:
        raise ValueError("copy --from takes a SQLite memory directory; the source is already PostgreSQL")
    report = CopyReport()
    with MemoryAdmin(source, embed_model=embed_model, chroma_url=chroma_url) as src:
        with MemoryAdmin(target, embed_model=embed_model) as dst:
            tenants = [tenant_id] if tenant_id is not None else src.rows.tenants()
            plan = _plan(src, dst, tenants, skip_existing, report)
            store_meta = src.rows.store_meta()
            _check_meta(store_meta, dst.rows.store_meta(), dst.location)
            dst.rows.add_meta(store_meta)
            if progress is not None:
                progress.total = sum(src.rows.count_export_rows(t, users) for t, users in plan.items())
            for tenant, users in plan.items():
                for user in users:
                    written, replaced = _copy_user(src, dst, tenant, user)
                    report.rows += written
                    report.users.setdefault(tenant, []).append(user)
                    if replaced:
                        report.replaced.setdefault(tenant, {})[user] = replaced
                    if progress is not None:
                        progress.advance(src.rows.count_export_rows(tenant, [user]))
            report.embedded = dst.flush(progress and progress.child("embedding"))
            # A new database has no statistics yet: the first gets would be planned blind.
            dst.rows.refresh_statistics()
    return report


def _plan(
    src: MemoryAdmin, dst: MemoryAdmin, tenants: list[str], skip_existing: bool, report: CopyReport
) -> dict[str, list[str]]:
    """The users to copy by tenant; CopyRefusedError (before any write) when the target
    holds some of them and ``skip_existing`` is off."""
    plan: dict[str, list[str]] = {}
    held: list[str] = []
    for tenant in tenants:
        users = [u.user_id for u in src.rows.users(tenant)]
        there = {u.user_id for u in dst.rows.users(tenant)} & set(users)
        if there and skip_existing:
            report.skipped[tenant] = sorted(there)
        held += [f"{user!r} (tenant {tenant!r})" for user in sorted(there)]
        plan[tenant] = [u for u in users if u not in there]
    if held and not skip_existing:
        raise CopyRefusedError(
            f"the PostgreSQL store {dst.location} already holds {len(held)} of the users to copy: "
            f"{listed(held)}. Nothing was copied. Pass skip_existing (--skip-existing) to copy only the "
            "others, or forget those users there first"
        )
    return plan


def _check_meta(source: dict[str, str], target: dict[str, str], where: str) -> None:
    """CopyRefusedError when the target records another embedding model (or dimension)
    than the source: their vectors would not be comparable."""
    clash = sorted(k for k in source.keys() & target.keys() if source[k] != target[k])
    if clash:
        raise CopyRefusedError(
            f"the PostgreSQL store {where} was written with another embedding model than the "
            f"directory (meta {', '.join(clash)} differ): copy into an empty database, or "
            "re-embed one side first (from_defaults(..., reembed=True))"
        )


def _copy_user(src: MemoryAdmin, dst: MemoryAdmin, tenant: str, user: str) -> tuple[Counter[str], int]:
    """One user's rows, meta and waiting jobs, in one transaction of the target; and
    how many characters PostgreSQL cannot store were replaced by U+FFFD in them."""
    rows, replaced = replace_unstorable(list(src.rows.export_rows(tenant, user)))
    texts = [search_text(r["subject"], r["predicate"], r["object"]) if r["kind"] == "triple" else "" for r in rows]
    meta = src.rows.user_meta(tenant, user)
    jobs = src.rows.user_jobs(tenant, user)
    store: Any = dst.store
    with store.transaction(f"copy user {user!r}"):
        written = dst.rows.import_rows(tenant, rows, texts)
        dst.rows.add_meta(meta)
        dst.rows.add_jobs(tenant, user, jobs)
    written["meta"] += len(meta)
    written["job"] += len(jobs)
    return written, replaced
