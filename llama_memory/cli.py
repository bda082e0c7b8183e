"""The ``llama-memory`` command line."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Optional


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``llama-memory`` command."""
    parser = argparse.ArgumentParser(prog="llama-memory", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="run the offline two-conversation demo")
    demo.add_argument(
        "--path", type=Path, default=None, help="memory directory (default: a new temporary one)"
    )
    args = parser.parse_args(argv)
    if args.command == "demo":
        from .demo import run_demo

        run_demo(args.path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
