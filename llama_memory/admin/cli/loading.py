"""What a command loads from its arguments: the store (a :class:`MemoryAdmin`), the
objects named ``MODULE:NAME`` (an embedding model, an LLM) and its progress bar; and
the error it reports in one line."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any


class CommandError(Exception):
    """Bad input the command line reports in one line (exit status 1)."""


def _open(args: argparse.Namespace, create: bool = False) -> Any:
    from ..memory_admin import MemoryAdmin

    tenant = args.tenant or "default"
    # The options a command sets for the memories it builds (explain's --top-k...):
    # the parser stores each as "setting.<name>" (parser.add_setting).
    kwargs: dict[str, Any] = {
        dest.removeprefix("setting."): value
        for dest, value in vars(args).items() if dest.startswith("setting.") and value is not None
    }
    # An encrypted store's key comes from LLAMA_MEMORY_ENCRYPTION_KEY, never from an
    # argument: other accounts can read arguments in the process list.
    return MemoryAdmin(
        args.store, tenant, create=create, chroma_url=args.chroma_url,
        owner_only=not getattr(args, "no_owner_only", False), **kwargs, **_embed_model(args),
    )  # fmt: skip


def _embed_model(args: argparse.Namespace) -> dict[str, Any]:
    """``{"embed_model": the model --embed-model names}`` (``{}`` without it): a
    BaseEmbedding object, or a callable that returns one when called without arguments."""
    if args.embed_model is None:
        return {}  # (LlamaIndex not imported: the listing commands need none)
    from llama_index.core.base.embeddings.base import BaseEmbedding

    return {"embed_model": _load(args.embed_model, "--embed-model", "myapp.memory:embed_model", BaseEmbedding)}


def _import_attribute(spec: str, option: str, example: str) -> Any:
    """The attribute ``name`` of the module ``module`` named by ``spec`` (``module:name``),
    the module found as ``python -m`` finds it: in the current directory first."""
    import importlib

    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise CommandError(f"{option} takes module:name, e.g. {example}; got {spec!r}")
    # The console script's sys.path starts with its own directory, not the current one
    # (python -m puts the current directory first): a user's module beside them is found.
    here = os.getcwd()
    if not any(entry in ("", here) for entry in sys.path):
        sys.path.insert(0, here)
    try:
        return getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise CommandError(f"{option} {spec}: cannot load it: {exc}") from None


def _load(spec: str, option: str, example: str, kind: type, kind_name: str = "") -> Any:
    """The ``kind`` object named ``module:name`` (``example`` shows the form), or what the
    function or class so named returns when called without arguments."""
    value = _import_attribute(spec, option, example)
    if callable(value) and not isinstance(value, kind):
        try:
            value = value()
        except Exception as exc:  # noqa: BLE001 (the user's code, e.g. a missing API key: one line, not a traceback)
            hint = " (name an object, or a function that takes no arguments)" if isinstance(exc, TypeError) else ""
            raise CommandError(
                f"{option} {spec}: calling it without arguments failed: {type(exc).__name__}: {exc}{hint}"
            ) from None
    if not isinstance(value, kind):
        raise CommandError(
            f"{option} {spec}: expected a LlamaIndex {kind_name or kind.__name__} (or a function "
            f"returning one), got {type(value).__name__}"
        )
    return value


def _load_llm(spec: str, option: str = "--llm") -> Any:
    """The LlamaIndex LLM named ``module:name``: an LLM object, or a function or class
    that returns one when called without arguments."""
    from llama_index.core.base.llms.base import BaseLLM

    example = "myapp.llms:make_llm (a LlamaIndex LLM, or a function returning one)"
    return _load(spec, option, example, BaseLLM, "LLM")


def _progress(label: str) -> Any:
    from ...core.progress import Progress

    return Progress(label)  # draws on a terminal only
