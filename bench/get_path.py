"""How far one ``get()`` of a question wanders through the package: a ``sys.setprofile``
trace of one call on a small store, counting the calls into llama-memory's functions and
the modules they live in (docs/architecture.md, "The path of one get()").

    python -m bench.get_path            # the counts and the modules, in order of first call
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Optional

from llama_index.core.llms import ChatMessage

from llama_memory import ComposableMemory

PACKAGE = "llama_memory"
QUESTION = "Where do I live?"


@dataclass
class Trace:
    """The calls into the package's functions during one ``get()``, in order."""

    calls: list[tuple[str, str]] = field(default_factory=list)

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        """``sys.setprofile``'s hook: note each call of a function of the package."""
        if event == "call":
            module = frame.f_globals.get("__name__", "")
            if module == PACKAGE or module.startswith(PACKAGE + "."):
                self.calls.append((module, frame.f_code.co_name))

    @property
    def modules(self) -> list[str]:
        """The modules called into, in the order of their first call."""
        return list(dict.fromkeys(module for module, _ in self.calls))

    @property
    def reentries(self) -> int:
        """How often the trace goes back into a module it had left."""
        seen: set[str] = set()
        count, previous = 0, None
        for module, _ in self.calls:
            if module != previous and module in seen:
                count += 1
            seen.add(module)
            previous = module
        return count


def trace_get(path: str) -> Trace:
    """One warm ``get(QUESTION)`` in a second conversation of a two-message store at ``path``."""
    first = ComposableMemory.from_defaults(user_id="alice", session_id="one", path=path)
    first.put(ChatMessage(role="user", content="I just moved to Porto last month."))
    first.put(ChatMessage(role="assistant", content="Congratulations on the move!"))
    first.close()
    memory = ComposableMemory.from_defaults(user_id="alice", session_id="two", path=path)
    try:
        memory.get(QUESTION)  # warm: imports, the model, caches
        trace = Trace()
        sys.setprofile(trace.profile)
        try:
            memory.get(QUESTION)
        finally:
            sys.setprofile(None)
        return trace
    finally:
        memory.close()


def main(argv: Optional[list[str]] = None) -> Trace:
    """Print the counts and the modules of one traced ``get()``."""
    argparse.ArgumentParser(prog="python -m bench.get_path", description=__doc__).parse_args(argv)
    with tempfile.TemporaryDirectory() as path:
        trace = trace_get(path)
    functions = len(set(trace.calls))
    print(
        f"one get(): {len(trace.calls)} calls into {functions} functions across "
        f"{len(trace.modules)} modules; {trace.reentries} re-entries into a module already left"
    )
    for module in trace.modules:
        print(f"  {module}")
    return trace


if __name__ == "__main__":
    main()
