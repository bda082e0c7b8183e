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

- :mod:`.triples`: the knowledge-triple timeline (``SQLTripleTimeline``);
- :mod:`.profile`: the profile and instruction rows (``SQLProfileRows``).

Bringing another algorithm here (the job queue, the admin rows) follows the same
steps: write its statements once with ``?``; where the backends truly differ, add one
explicit member to ``Dialect`` and to both dialects (e.g. ``skip_locked``: ``FOR UPDATE
SKIP LOCKED`` on PostgreSQL, nothing on SQLite, whose ``BEGIN IMMEDIATE`` already
serialises a claim; ``returning``: ``RETURNING`` vs ``cursor.lastrowid``, as
:meth:`~.dialect.Dialect.insert` does), and keep in the backend only what it does its
own way.
"""

from .dialect import ALIVE_SQL, Dialect, SQLStore, owner

__all__ = ["ALIVE_SQL", "Dialect", "SQLStore", "owner"]
