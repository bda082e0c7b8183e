"""PostgreSQL connection URLs as the store shows them (never a password)."""

from __future__ import annotations

from urllib.parse import quote, urlencode

import psycopg


def describe_url(url: str) -> str:
    """``host:port/dbname`` of a connection URL, without user or password."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "<unparsable PostgreSQL URL>"
    host = info.get("host") or "localhost"
    return f"{host}:{info.get('port') or 5432}/{info.get('dbname') or ''}"


def url_without_password(conninfo: str) -> str:
    """A ``postgresql://`` URL of ``conninfo`` (URL or ``key=value``) without its password
    (libpq finds it again: ``PGPASSWORD``, ``~/.pgpass``)."""
    info = psycopg.conninfo.conninfo_to_dict(conninfo)
    info.pop("password", None)
    user, host, port, dbname = (info.pop(k, None) for k in ("user", "host", "port", "dbname"))
    netloc = f"{quote(str(user), safe='')}@" if user else ""
    if host:  # a socket directory is a path: percent-encoded; an IPv6 address: bracketed
        netloc += f"[{host}]" if ":" in str(host) else quote(str(host), safe="")
    netloc += f":{port}" if port else ""
    query = urlencode({k: str(v) for k, v in info.items() if v is not None})
    return f"postgresql://{netloc}/{quote(str(dbname or ''), safe='')}" + (f"?{query}" if query else "")


def shown_store(value: object) -> str:
    """What an error may say of a refused ``store``: a string's scheme only, else its type."""
    if isinstance(value, str):
        return f"a {value.partition(':')[0][:20]!r} URL" if ":" in value else "that string"
    return type(value).__name__

