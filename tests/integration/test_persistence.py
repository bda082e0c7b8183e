"""A new process that opens the same path sees everything stored before."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from helpers import assistant, user

WRITER = textwrap.dedent(
    """
    import sys
    from llama_index.core.base.llms.types import ChatMessage
    from llama_memory import ComposableMemory

    memory = ComposableMemory.from_defaults(user_id="alice", session_id="s1", path=sys.argv[1])
    memory.put(ChatMessage(role="user", content="My favourite colour is teal."))
    memory.put(ChatMessage(role="assistant", content="Teal, noted.",
                           additional_kwargs={"tool_calls": [{"id": "c1", "type": "function",
                             "function": {"name": "note", "arguments": "{}"}}]}))
    memory.close()
    """
)

READER = textwrap.dedent(
    """
    import json, sys
    from llama_memory import ComposableMemory

    memory = ComposableMemory.from_defaults(user_id="alice", session_id="s2", path=sys.argv[1])
    found = memory.search("What is my favourite colour?", k=5)
    print(json.dumps([p.text for r in found for p in (r.parts or [r])]))
    """
)


def run(script: str, path: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_records_and_chat_history_survive_a_new_process(tmp_path: Path, embed_model) -> None:
    from llama_memory import ComposableMemory

    run(WRITER, tmp_path)
    resumed = ComposableMemory.from_defaults(
        user_id="alice", session_id="s1", path=tmp_path, embed_model=embed_model
    )
    history = resumed.get_all()
    assert [m.content for m in history] == ["My favourite colour is teal.", "Teal, noted."]
    assert history[1].additional_kwargs["tool_calls"][0]["id"] == "c1"
    other_session = ComposableMemory.from_defaults(
        user_id="alice", session_id="s2", path=tmp_path, embed_model=embed_model
    )
    assert other_session.get_all() == []
    other_session.put(user("Which colour should I paint my room?"))
    assert "teal" in other_session.get()[0].content
    resumed.close()
    other_session.close()


def test_what_this_process_stored_is_seen_by_another(tmp_path: Path, embed_model) -> None:
    from llama_memory import ComposableMemory

    memory = ComposableMemory.from_defaults(
        user_id="alice", session_id="s1", path=tmp_path, embed_model=embed_model
    )
    memory.put_messages([user("My favourite colour is crimson."), assistant("Crimson it is.")])
    memory.close()
    found = json.loads(run(READER, tmp_path))
    assert found[0] == "My favourite colour is crimson."
