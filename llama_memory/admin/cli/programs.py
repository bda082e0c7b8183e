"""The commands that run a program over a store: ``mcp`` (an MCP server) and ``demo``
(the offline two-conversation demo)."""

from __future__ import annotations

import argparse
import sys

from .loading import _embed_model


def cmd_mcp(args: argparse.Namespace) -> None:
    from ..mcp_server import DEFAULT_PORT, serve

    if args.port is not None and not args.http:
        raise ValueError(
            f"--port {args.port} goes with --http (streamable HTTP on 127.0.0.1); without it the "
            "server speaks MCP on stdin and stdout, as a desktop client starts it: add --http"
        )
    users = [*(args.user or []), *(u.strip() for u in (args.users or "").split(",") if u.strip())]
    try:
        serve(
            args.store, users, tenant_id=args.tenant or "default", allow_delete=args.allow_delete,
            http=args.http, port=args.port or DEFAULT_PORT, session_id=args.session, create=args.create,
            log_level=args.log_level, chroma_url=args.chroma_url, **_embed_model(args),
        )  # fmt: skip
    except KeyboardInterrupt:  # stopped while starting, or the HTTP server stopped: the store is closed
        print("llama-memory mcp: stopped", file=sys.stderr)


def cmd_demo(args: argparse.Namespace) -> None:
    from ..demo import run_demo

    run_demo(args.path)
