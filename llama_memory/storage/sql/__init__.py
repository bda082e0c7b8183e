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

The modules: :mod:`.store` (``Storage``, the system of record as one object, with
``MetaStore``, ``SQLChatTables`` and ``SQLChatLog``), :mod:`.records` (``RecordStore``), :mod:`.jobs` (``JobQueue``; a claim's row lock is the
dialect's ``skip_locked``), :mod:`.triples` (``TripleTimeline``), :mod:`.profile` (a
document with its history: the profile and the instructions, ``ProfileRows``),
:mod:`.admin` (``AdminRows``). What a backend writes is each
class's abstract methods and the ports' Protocols (``tests/docs/test_storage_ports.py``
lists them in docs/architecture.md).

Bringing another algorithm here: write its statements once with ``?``; where the
backends truly differ, add one explicit member to ``Dialect`` (as ``skip_locked``,
``same_as``, ``utc_day`` and ``contains`` were): with the standard SQL spelling as its
default where there is one, overridden by a dialect whose database spells it otherwise,
else abstract, written by every dialect.
"""
