"""``python -m llama_memory``: the ``llama-memory`` command, for an environment whose
scripts folder is not on ``PATH`` (an MCP client's configuration, a cron job)."""

from .admin.cli import main

raise SystemExit(main())
