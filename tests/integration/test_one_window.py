"""One conversation, one window: memory objects on the same ``path`` and ``session_id``
(threads, processes: web workers behind a load balancer) see every committed message, in
commit order, once; a record of this conversation that left the window is labelled so.
"""

from __future__ import annotations

import threading
from pathlib import Path

from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.utils import get_tokenizer

import workers
from helpers import assistant, user
from llama_memory import ComposableMemory
from llama_memory.core.types import Scope
from llama_memory.read.compose import THIS_CONVERSATION
from llama_memory.storage.sqlite import SQLiteChatLog, SQLiteStore
from llama_memory.testing import ScriptedLLM, message_plain_text
from llama_memory.write.buffer import ChatBuffer


def ids_of(messages) -> list[str]:
    return [m.additional_kwargs["message_id"] for m in messages]


def window_ids(memory: ComposableMemory) -> list[str]:
    return ids_of(m for m in memory.get() if m.role != MessageRole.SYSTEM)


def stored_ids(memory: ComposableMemory) -> list[str]:
    """The conversation's message ids in the chat log, in commit order."""
    rows = memory.runtime.store.query(  # type: ignore[union-attr]
        "test", "SELECT message_json FROM chat_messages WHERE session_id = ? ORDER BY seq",
        (memory.session_id,),
    )
    return [ChatMessage.model_validate_json(r["message_json"]).additional_kwargs["message_id"] for r in rows]


def test_two_memories_see_each_others_turns(make_memory) -> None:
    a, b = make_memory(session_id="shared"), make_memory(session_id="shared")
    a.put(user("My sister Ines lives in Porto.", message_id="a-u"))
    a.put(assistant("Noted: Ines lives in Porto.", message_id="a-a"))
    b.put(user("And my brother Rui lives in Faro.", message_id="b-u"))
    assert ids_of(a.get_all()) == ids_of(b.get_all()) == ["a-u", "a-a", "b-u"]
    # b's turn is in a's window, not in the block as a record of another conversation
    assert window_ids(a) == window_ids(b) == ["a-u", "a-a", "b-u"]
    a.get("Where does Rui live?")
    assert "Faro" not in a.last_block.text
    b.put(assistant("Noted: Rui lives in Faro.", message_id="b-a"))
    assert ids_of(a.get_all()) == ["a-u", "a-a", "b-u", "b-a"]


def test_threads_on_one_conversation_one_order_no_duplicates(make_memory) -> None:
    memories = [make_memory(session_id="shared", token_limit=10**6) for _ in range(3)]
    stop = threading.Event()
    problems: list[str] = []

    def write(w: int) -> None:
        memory = memories[w]
        for i in range(8):
            memory.put_messages([user(f"w{w} question {i}", message_id=f"w{w}-{i}-u"),
                                 assistant(f"w{w} answer {i}", message_id=f"w{w}-{i}-a")])
            seen = ids_of(memory.get_all())
            if len(seen) != len(set(seen)):
                problems.append(f"w{w} sees a message twice: {seen}")
            mine = [m for m in seen if m.startswith(f"w{w}-")]
            if mine != [f"w{w}-{j}-{r}" for j in range(i + 1) for r in "ua"]:
                problems.append(f"w{w} misses or misorders its own messages: {mine}")

    def read() -> None:
        while not stop.is_set():
            seen = ids_of(memories[0].get_all())
            if len(seen) != len(set(seen)):
                problems.append(f"reader sees a message twice: {seen}")

    reader = threading.Thread(target=read)
    reader.start()
    writers = [threading.Thread(target=write, args=(w,)) for w in range(3)]
    for t in writers:
        t.start()
    for t in writers:
        t.join()
    stop.set()
    reader.join()
    assert problems == []
    committed = stored_ids(memories[0])
    assert len(committed) == 48 == len(set(committed))
    for memory in memories:  # every object: every message, in commit order, once
        assert ids_of(memory.get_all()) == committed
        assert window_ids(memory) == committed
    # a batch is one append: its user and assistant messages stay together
    for k in range(0, 48, 2):
        assert committed[k][:-1] == committed[k + 1][:-1]


def test_set_and_reset_by_one_are_seen_by_the_other(make_memory) -> None:
    a, b = make_memory(session_id="shared"), make_memory(session_id="shared")
    a.put_messages([user("one", message_id="1"), assistant("two", message_id="2")])
    assert ids_of(b.get_all()) == ["1", "2"]
    b.set([user("one", message_id="1"), user("three", message_id="3")])
    assert ids_of(a.get_all()) == ["1", "3"]
    a.put(assistant("four", message_id="4"))  # appended after b's set, not after a's old view
    assert ids_of(b.get_all()) == ids_of(a.get_all()) == ["1", "3", "4"]
    b.reset()
    assert a.get_all() == [] and a.get() == []
    a.put(user("five", message_id="5"))
    assert ids_of(b.get_all()) == ["5"]


def test_two_processes_taking_turns(tmp_path: Path) -> None:
    """Two processes (two web workers) alternate on one conversation: before each turn a
    worker's history is exactly every message committed so far, and its window the same
    as the other's would be; a set() and a reset() by one are seen by the other."""
    plan: list[tuple[str, list[str]]] = [("put", [f"t{t}-u", f"t{t}-a"]) for t in range(6)]
    plan += [("set", ["t1-u", "t1-a", "x-u"]), ("put", ["t7-u", "t7-a"]), ("reset", [])]
    plan += [("put", [f"t{t}-u", f"t{t}-a"]) for t in range(9, 12)]
    expected: list[list[str]] = [[]]  # the history before each turn, and after the last
    for action, ids in plan:
        expected.append(expected[-1] + ids if action == "put" else list(ids))
    ctx = workers.forkserver()
    turn, changed = ctx.Value("i", 0), ctx.Condition()
    path = str(tmp_path / "memory")
    started = [
        workers.start(ctx, workers.turn_taker, path, me, plan, turn, changed) for me in (0, 1)
    ]
    notes = []
    for process, conn in started:
        kind, payload = workers.receive(conn, timeout=300)
        assert kind == "done", payload
        notes.append(payload)
        process.join(60)
        assert process.exitcode == 0
    buffer = ChatBuffer(token_limit=60)  # what a window of this history must be
    for mine in notes:
        for t, history, window in mine:
            assert history == expected[t], (t, history)
            buffer.set([ChatMessage(role="user" if m.endswith("u") else "assistant",
                                    content=f"{'user' if m.endswith('u') else 'assistant'} says {m}",
                                    additional_kwargs={"message_id": m}) for m in history])
            assert window == ids_of(buffer.get()), (t, window)
    assert notes[0][-1] == notes[1][-1]  # the same history and window at the end


def test_a_read_costs_the_new_rows_not_the_history(tmp_path: Path) -> None:
    """The change check reads nothing when nothing changed, and only what another
    writer added when something did (not the whole log)."""
    scope = Scope(user_id="alice", session_id="s")
    writer = ChatBuffer(chat_log=SQLiteChatLog(SQLiteStore(tmp_path), scope))
    writer.put_messages([user(f"message {i}") for i in range(5000)])
    reader_log = SQLiteChatLog(SQLiteStore(tmp_path), scope)
    counted: list[int] = []

    class Tokenizer:
        def __call__(self, text: str):
            counted.append(1)
            return get_tokenizer()(text)

    reader = ChatBuffer(chat_log=reader_log, tokenizer_fn=Tokenizer(), token_limit=50)
    assert len(counted) == 5000  # each message counted once, when it arrives
    cursor = reader._cursor
    assert reader_log.changes(cursor) is None  # nothing new: no rows read
    writer.put(user("one more"))
    changes = reader_log.changes(cursor)
    assert changes is not None and not changes.replaced
    assert [m.content for m in changes.messages] == ["one more"]
    assert reader.get()[-1].content == "one more"
    assert len(counted) == 5001  # only the new message was counted
    reader.put(assistant("reply"))  # its own message is not read back
    assert [m.content for m in reader.get_all()[-2:]] == ["one more", "reply"]
    assert len(reader.get_all()) == 5002 and len(counted) == 5002


def test_a_record_of_this_conversation_is_labelled_so(make_memory) -> None:
    earlier = make_memory(session_id="monday")
    earlier.put(user("My bike is a green Brompton.", message_id="m1"))
    memory = make_memory(session_id="friday", token_limit=30)
    memory.put(user("My car is a red Fiat Panda from 2011.", message_id="f1"))
    for i in range(6):  # push the car out of the window
        memory.put_messages([user(f"Filler question number {i} about the weather?"),
                             assistant(f"Filler answer number {i}: sunny.")])
    assert "f1" not in [m.additional_kwargs.get("message_id") for m in memory.primary_memory.get()]
    memory.get("What colour is my car, and my bike?")
    lines = memory.last_block.text.splitlines()
    car = [line for line in lines if "Fiat" in line]
    bike = [line for line in lines if "Brompton" in line]
    assert car and all(THIS_CONVERSATION in line for line in car), lines
    assert bike and all(THIS_CONVERSATION not in line for line in bike), lines


async def test_an_agent_served_by_two_workers_sees_the_whole_conversation(make_memory) -> None:
    """A web app: each turn of one conversation lands on either of two workers, each with
    its own memory object on the conversation. The LLM sees every earlier turn, once, as
    chat messages, whichever worker served them."""
    workers_ = [make_memory(session_id="chat-42"), make_memory(session_id="chat-42")]
    said = ["My name is Ada.", "I live in Lisbon.", "I keep bees.", "What do you know about me?"]
    llm = ScriptedLLM([f"Reply {i}." for i in range(len(said))])
    agent = FunctionAgent(llm=llm, system_prompt="Be brief.")
    for turn, text in enumerate(said):
        await agent.run(user_msg=text, memory=workers_[turn % 2])
    last = llm.calls[-1]
    chat = [message_plain_text(m) for m in last.messages if m.role != MessageRole.SYSTEM]
    assert chat == [
        "My name is Ada.", "Reply 0.", "I live in Lisbon.", "Reply 1.",
        "I keep bees.", "Reply 2.", "What do you know about me?",
    ]
    # the earlier turns are in the window, so none comes back as a record of the past
    assert all("Ada" not in text and "bees" not in text for text in last.system_texts())


def test_own_writes_leave_nothing_to_read(tmp_path: Path) -> None:
    """After its own write (alone or inside a larger transaction) a buffer's next check
    finds nothing new: its own messages are never read back."""
    store = SQLiteStore(tmp_path)
    log = SQLiteChatLog(store, Scope(user_id="alice", session_id="s"))
    buffer = ChatBuffer(chat_log=log)
    buffer.put(user("alone"))
    assert log.changes(buffer._cursor) is None
    with store.transaction("a larger write"):
        buffer.put(user("inside"))
    assert log.changes(buffer._cursor) is None
    buffer.set([user("set")])
    assert log.changes(buffer._cursor) is None
    assert [m.content for m in buffer.get_all()] == ["set"]
