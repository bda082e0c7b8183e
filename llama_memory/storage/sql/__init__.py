"""Algorithms over SQL written once for every SQL backend (SQLite, PostgreSQL).

The two databases differ in a few spellings, not in what the algorithms do. So a
shared algorithm writes its statements once, with ``?`` placeholders, and asks a small
:class:`~.dialect.Dialect` object for what is spelt differently: placeholders
(:meth:`~.dialect.Dialect.sql`), ``IN`` lists (:meth:`~.dialect.Dialect.in_list`,
:meth:`~.dialect.Dialect.batches`), prefixes, JSON columns, inserting a row and getting
its id back, boolean literals, and making writers of one key take turns
(:meth:`~.dialect.Dialect.lock`). Each backend package makes its dialect
(``sqlite/connection.py``, ``postgres/dialect.py``) and subclasses the algorithm, keeping
only what differs for a reason (FTS5 vs ``tsvector``, cascades, read-ahead).

These classes are the storage parts the package above storage uses (a backend
does not write them again):

- :mod:`.store`: ``Storage``, the system of record as one object, made of the parts
  below that live in the store (meta, chat, records, jobs) and declaring what a
  backend's store class adds (its connection, lexical index and chat logs);
- :mod:`.records`: the long-term records (``RecordStore``: dedup on write, reads, the
  dense index's flags and vector copies, expiry, forgetting a user), a record's id and
  a ``records`` row as a ``MemoryRecord``;
- :mod:`.meta`: the ``meta`` table (``MetaStore``);
- :mod:`.chat`: the chat history's writes and session list (``SQLChatTables``) and the
  chat log facade's plain calls (``SQLChatLog``); reading what changed stays each
  backend's;
- :mod:`.jobs`: the job queue (``JobQueue``); a claim's row lock is the dialect's
  ``skip_locked`` (``FOR UPDATE SKIP LOCKED`` on PostgreSQL, nothing on SQLite, whose
  ``BEGIN IMMEDIATE`` already serialises it);
- :mod:`.triples`: the knowledge-triple timeline (``TripleTimeline``);
- :mod:`.profile`: the rows of a document with its history, the profile and the
  user's instructions alike (``ProfileRows``);
- :mod:`.admin` and :mod:`.admin_import`: the admin rows (``AdminRows``: users,
  sessions, counts, export and import rows).

What a backend writes is each class's abstract methods and the ports' Protocols
(``tests/docs/test_storage_ports.py`` counts and lists them in docs/architecture.md).

Bringing another algorithm here follows the same steps: write its statements once
with ``?``; where the backends truly differ, add one explicit member to ``Dialect``
and to both dialects (as ``skip_locked``, ``same_as``, ``utc_day`` and ``contains``
were), and keep in the backend only what it does its own way.
"""

from .dialect import ALIVE_SQL, Dialect, SQLStore, owner

__all__ = ["ALIVE_SQL", "Dialect", "SQLStore", "owner"]
