"""Algorithms over SQL written once for every SQL backend (SQLite, PostgreSQL): each
writes its statements once with ``?`` placeholders and asks a small
:class:`~.dialect.Dialect` for what the databases spell differently; a backend subclasses
the algorithm only where it differs for a reason (FTS5 vs ``tsvector``, cascades). The
modules and what a backend writes are listed in docs/architecture.md ("The ports").
"""
