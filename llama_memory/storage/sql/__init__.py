"""Algorithms over SQL written once for every SQL backend (SQLite, PostgreSQL).

The two databases differ in a few spellings, not in what the algorithms do. So a
shared algorithm writes its statements once, with ``?`` placeholders, and asks a small
:class:`~.dialect.Dialect` object for what is spelt differently: placeholders
(:meth:`~.dialect.Dialect.sql`), ``IN`` lists (:meth:`~.dialect.Dialect.in_list`,
:meth:`~.dialect.Dialect.batches`), prefixes, JSON columns, inserting a row and getting
its id back, boolean literals, and making writers of one key take turns
(:meth:`~.dialect.Dialect.lock`). Each backend package makes its dialect
(``sqlite/dialect.py``, ``postgres/dialect.py``) and subclasses the algorithm, keeping
only what differs for a reason (FTS5 vs ``tsvector``, cascades, read-ahead):

- :mod:`.triples`: the knowledge-triple timeline (``TripleTimeline``);
- :mod:`.profile`: the profile and instruction rows (``ProfileRows``);
- :mod:`.jobs`: the job queue (``JobQueue``, a part of the store); a claim's
  row lock is the dialect's ``skip_locked`` (``FOR UPDATE SKIP LOCKED`` on
  PostgreSQL, nothing on SQLite, whose ``BEGIN IMMEDIATE`` already serialises it);
- :mod:`.admin` and :mod:`.admin_import`: the admin rows (``AdminRows``: users,
  sessions, counts, export and import rows);
- :mod:`.records`: the long-term records (``RecordStore``, a part of the store:
  dedup on write, reads, the dense index's flags, expiry, forgetting a user), a
  record's id and a ``records`` row as a ``MemoryRecord``;
- :mod:`.meta`: the ``meta`` table (``MetaStore``, a part of the store's connection);
- :mod:`.chat`: the chat history's writes and session list (``SQLChatTables``) and the
  chat log facade's plain calls (``SQLChatLog``); reading what changed stays each
  backend's.

Bringing another algorithm here follows the same steps: write its statements once
with ``?``; where the backends truly differ, add one explicit member to ``Dialect``
and to both dialects (as ``skip_locked``, ``same_as``, ``utc_day`` and ``contains``
were), and keep in the backend only what it does its own way.
"""

from .dialect import ALIVE_SQL, Dialect, SQLStore, owner

__all__ = ["ALIVE_SQL", "Dialect", "SQLStore", "owner"]
