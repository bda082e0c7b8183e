"""``python -m llama_memory.cli``: the ``llama-memory`` command."""

from . import main

raise SystemExit(main())
