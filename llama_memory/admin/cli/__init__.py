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
        getattr(args, "command_parser", parser).error(f"unrecognized arguments: {' '.join(unknown)}", unknown)
    from ...core.errors import EmbeddingModelError, EncryptionError, LlamaMemoryError

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
        if isinstance(exc, EmbeddingModelError):
            message = f"{message} ({_switch_model_hint(args)})"
        print(f"llama-memory {args.command}: error: {message}", file=sys.stderr)
        return 1
    return status if isinstance(status, int) else 0


def _switch_model_hint(args: object) -> str:
    """What to do on the command line about a store built with another embedding model."""
    switch = "llama-memory reindex --reembed --store ... --embed-model MODULE:NAME switches the store to a new model"
    if getattr(args, "embed_model", None) is None:
        return f"pass the store's model with --embed-model MODULE:NAME; {switch}"
    return f"--embed-model gave {args.embed_model}: pass the store's model instead; {switch}"  # type: ignore[attr-defined]
