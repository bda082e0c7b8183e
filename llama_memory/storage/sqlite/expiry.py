"""Expiry in SQLite's queries (the rules are :mod:`llama_memory.storage.expiry`'s)."""

#: SQL condition keeping rows that have not expired; its one parameter is "now".
ALIVE_SQL = "(expires_at IS NULL OR expires_at > ?)"
