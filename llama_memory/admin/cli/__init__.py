"""The ``llama-memory`` command line, a thin layer over
:class:`llama_memory.admin.memory_admin.MemoryAdmin`: each command opens ``--store`` for
one ``--tenant``, prints for people (or ``--json`` for scripts) and exits non-zero with a
message on stderr when something is wrong. Modules: :mod:`.parser`, :mod:`.loading`,
:mod:`.output`, and one per group of commands.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Optional

from .loading import CommandError
from .output import CELL_WIDTH
from .parser import build_parser

__all__ = ["CELL_WIDTH", "CommandError", "build_parser", "main"]


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``llama-memory`` command; returns the exit status."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # reported with the command's own usage, which lists its options
        getattr(args, "command_parser", parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    from ...core.errors import EmbeddingDimensionError, EncryptionError, LlamaMemoryError

    try:
        status = args.run(args)
    except KeyboardInterrupt:  # Ctrl-C: one line, not a traceback (the store was closed on the way out)
        print(f"llama-memory {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # Output piped into a reader that stopped (`| head`): not an error of ours.
        sys.stdout = open(os.devnull, "w")
        return 0
    except (CommandError, LlamaMemoryError, ValueError, KeyError, OSError, ImportError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        if isinstance(exc, EncryptionError):
            message = exc.command_line  # the key comes from the environment here
        if isinstance(exc, EmbeddingDimensionError) or type(exc).__name__ == "EmbeddingMismatchError":
            message = f"{message} (pass it with --embed-model MODULE:NAME)"
        print(f"llama-memory {args.command}: error: {message}", file=sys.stderr)
        return 1
    return status if isinstance(status, int) else 0
