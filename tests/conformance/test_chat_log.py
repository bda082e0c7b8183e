"""The chat log: commit order seen alike by two store objects (two processes)."""

from __future__ import annotations

from llama_index.core.base.llms.types import ChatMessage

from llama_memory.core.types import Scope

SESSION = Scope(user_id="alice", session_id="s1")


def said(*texts: str) -> list[ChatMessage]:
    return [ChatMessage(role="user", content=t) for t in texts]


def contents(messages: list[ChatMessage]) -> list[str]:
    return [str(m.content) for m in messages]


def test_two_writers_see_one_conversation_in_commit_order(backend) -> None:
    first, second = backend.open().chat_log(SESSION), backend.open().chat_log(SESSION)
    first.append(said("a"))
    second.append(said("b"))
    first.append(said("c"))
    assert contents(first.load()) == contents(second.load()) == ["a", "b", "c"]


def test_a_reader_gets_what_others_committed_since_its_cursor(backend) -> None:
    mine, other = backend.open().chat_log(SESSION), backend.open().chat_log(SESSION)
    changes = mine.changes(None)
    assert changes is not None and changes.messages == [] and changes.replaced
    other.append(said("a", "b"))
    news = mine.changes(changes.cursor)
    assert news is not None and contents(news.messages) == ["a", "b"] and not news.replaced
    appended = mine.append_after(news.cursor, said("c"))
    assert appended.messages == []  # nothing came between
    other.replace(said("x"))
    replaced = mine.changes(appended.cursor)
    assert replaced is not None and replaced.replaced and contents(replaced.messages) == ["x"]


def test_sessions_are_separate_and_listed_oldest_first(backend) -> None:
    store = backend.open()
    store.chat_log(Scope(user_id="alice", session_id="s2")).append(said("later"))
    store.chat_log(SESSION).append(said("first"))
    assert store.sessions(SESSION) == ["s2", "s1"]
    assert contents(store.chat_log(SESSION).load()) == ["first"]
    assert store.chat_log(Scope(user_id="bob", session_id="s1")).load() == []
