"""Tests for :mod:`llama_memory.write.buffer` (real tiktoken tokenizer, no network)."""

from __future__ import annotations

import asyncio
import copy
import pickle
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import pytest
from llama_index.core.base.llms.types import ToolCallBlock
from llama_index.core.llms import ChatMessage, ImageBlock, MessageRole, TextBlock
from llama_index.core.memory import ChatMemoryBuffer
from llama_index.core.utils import get_tokenizer

from llama_memory.memory import DEFAULT_TOKEN_LIMIT
from llama_memory.storage.codec import dump_message, load_message
from llama_memory.write.buffer import ChatBuffer, ChatLog

USER, ASSISTANT, TOOL, SYSTEM = (
    MessageRole.USER,
    MessageRole.ASSISTANT,
    MessageRole.TOOL,
    MessageRole.SYSTEM,
)


# --------------------------------------------------------------------------- helpers


class ListChatLog:
    """A chat log kept in a Python list; records how it was called."""

    def __init__(self, messages: Optional[Sequence[ChatMessage]] = None) -> None:
        self.messages: list[ChatMessage] = list(messages or [])
        self.calls: list[str] = []

    def load(self) -> list[ChatMessage]:
        self.calls.append("load")
        return list(self.messages)

    def append(self, messages: Sequence[ChatMessage]) -> None:
        self.calls.append("append")
        self.messages.extend(messages)

    def replace(self, messages: Sequence[ChatMessage]) -> None:
        self.calls.append("replace")
        self.messages = list(messages)

    def clear(self) -> None:
        self.calls.append("clear")
        self.messages = []


class FileChatLog:
    """A chat log in a JSON-lines file: one ``dump_message`` per line."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> list[ChatMessage]:
        if not self.path.exists():
            return []
        # split("\n"), not splitlines(): message text may contain U+2028 etc.
        return [load_message(line) for line in self.path.read_text("utf-8").split("\n") if line]

    def append(self, messages: Sequence[ChatMessage]) -> None:
        with self.path.open("a", encoding="utf-8") as f:
            f.writelines(dump_message(m) + "\n" for m in messages)

    def replace(self, messages: Sequence[ChatMessage]) -> None:
        self.path.write_text("".join(dump_message(m) + "\n" for m in messages), "utf-8")

    def clear(self) -> None:
        self.path.write_text("", "utf-8")


class FailingChatLog(ListChatLog):
    """A chat log whose writes all fail."""

    def append(self, messages: Sequence[ChatMessage]) -> None:
        raise OSError("disk full (append)")

    def replace(self, messages: Sequence[ChatMessage]) -> None:
        raise OSError("disk full (replace)")

    def clear(self) -> None:
        raise OSError("disk full (clear)")


class CountingTokenizer:
    """Wraps a tokenizer and counts how often it is called."""

    def __init__(self, inner: Callable[[str], Sequence[Any]]) -> None:
        self.inner = inner
        self.calls = 0

    def __call__(self, text: str) -> Sequence[Any]:
        self.calls += 1
        return self.inner(text)


def msg(role: MessageRole, text: str, **kwargs: Any) -> ChatMessage:
    return ChatMessage(role=role, content=text, additional_kwargs=kwargs)


def tool_turn(i: int) -> list[ChatMessage]:
    """user -> assistant tool call -> tool result -> assistant answer."""
    call_id = f"call_{i}"
    return [
        msg(USER, f"Question {i}: what is the weather in city number {i}?"),
        ChatMessage(
            role=ASSISTANT,
            content="",
            additional_kwargs={
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "weather", "arguments": f'{{"city": "c{i}"}}'},
                    }
                ]
            },
        ),
        msg(TOOL, f"Sunny and {20 + i} degrees in city {i}.", tool_call_id=call_id),
        msg(ASSISTANT, f"It is sunny and {20 + i} degrees in city number {i}."),
    ]


def block_tool_turn(i: int) -> list[ChatMessage]:
    """Like :func:`tool_turn` with the call as a ToolCallBlock (how agents store it)."""
    call_id = f"block_call_{i}"
    return [
        msg(USER, f"Look up item {i} please."),
        ChatMessage(
            role=ASSISTANT,
            blocks=[ToolCallBlock(tool_call_id=call_id, tool_name="lookup", tool_kwargs={"item": i})],
        ),
        msg(TOOL, f"Item {i} costs {i * 3} euros.", tool_call_id=call_id),
        msg(ASSISTANT, f"Item {i} costs {i * 3} euros."),
    ]


def tool_call_ids(message: ChatMessage) -> set[str]:
    ids = {c["id"] for c in message.additional_kwargs.get("tool_calls") or []}
    ids |= {b.tool_call_id for b in message.blocks if isinstance(b, ToolCallBlock)}
    return ids


def assert_well_formed(window: list[ChatMessage]) -> None:
    """Every tool result in the window follows the assistant call that produced it."""
    seen: set[str] = set()
    for m in window:
        seen |= tool_call_ids(m)
        if m.role == TOOL:
            assert m.additional_kwargs["tool_call_id"] in seen, window


@pytest.fixture(scope="module")
def tokenizer() -> Callable[[str], Sequence[Any]]:
    return get_tokenizer()


# --------------------------------------------------------------------------- construction


def test_defaults_and_class_name() -> None:
    buf = ChatBuffer.from_defaults(llm=object(), unknown_option=1)  # ignored kwargs
    assert buf.token_limit == DEFAULT_TOKEN_LIMIT == 3000
    assert ChatBuffer.class_name() == "ChatBuffer"
    assert buf.get() == [] and buf.get_all() == [] and buf.token_count == 0
    # the default tokenizer is tiktoken's cl100k, not e.g. a whitespace split
    assert buf.count_tokens(msg(USER, "tokenization")) == len(get_tokenizer()("tokenization")) == 2


@pytest.mark.parametrize("bad", [0, -1, -3000])
def test_invalid_token_limit(bad: int) -> None:
    with pytest.raises(ValueError, match="token_limit must be a positive"):
        ChatBuffer(token_limit=bad)
    with pytest.raises(ValueError, match="token_limit must be a positive"):
        ChatBuffer.from_defaults(token_limit=bad)
    buf = ChatBuffer(token_limit=10)
    with pytest.raises(ValueError, match="token_limit must be a positive"):
        buf.token_limit = bad
    assert buf.token_limit == 10


def test_buffer_is_truthy_when_empty() -> None:
    buf = ChatBuffer()
    assert bool(buf) is True
    # the idiom agents use must keep our memory, not swap in a stock one
    assert (buf or ChatMemoryBuffer.from_defaults()) is buf
    assert not hasattr(buf, "__len__")


def test_tokenizer_not_serialized() -> None:
    buf = ChatBuffer(token_limit=10, tokenizer_fn=str.split)
    assert "tokenizer_fn" not in buf.to_dict()
    assert "tokenizer_fn" not in buf.model_dump()


# --------------------------------------------------------------------------- token counting


def test_count_includes_text_and_tool_calls(tokenizer: Callable[[str], Sequence[Any]]) -> None:
    buf = ChatBuffer()
    plain = msg(USER, "Hello there, how are you?")
    # the content alone, as ChatMemoryBuffer counts it: no role prefix
    assert buf.count_tokens(plain) == len(tokenizer("Hello there, how are you?"))
    bare_call = ChatMessage(role=ASSISTANT, content="")
    with_call = tool_turn(1)[1]
    with_block = block_tool_turn(1)[1]
    assert buf.count_tokens(with_call) > buf.count_tokens(bare_call) + 10
    assert buf.count_tokens(with_block) > buf.count_tokens(bare_call) + 5
    # deterministic: same message, same count
    assert buf.count_tokens(with_call) == buf.count_tokens(copy.deepcopy(with_call))


def test_custom_tokenizer_respected() -> None:
    buf = ChatBuffer(token_limit=10, tokenizer_fn=str.split)
    buf.put(msg(USER, "one two three"))  # 3 words
    assert buf.token_count == 3
    buf.put(msg(ASSISTANT, "four five six seven eight"))  # 5 words
    assert buf.token_count == 8
    assert buf.get() == buf.get_all()
    buf.put(msg(USER, "nine ten eleven"))  # 3 words: total 11 > 10
    assert buf.get() == [buf.get_all()[-1]]
    assert buf.window_token_count() == 3


def test_tokenizer_called_once_per_message() -> None:
    counting = CountingTokenizer(get_tokenizer())
    buf = ChatBuffer(token_limit=40, tokenizer_fn=counting)
    turns = [m for i in range(5) for m in tool_turn(i)]
    for m in turns[:12]:
        buf.put(m)
    buf.put_messages(turns[12:])
    n = len(turns)
    assert counting.calls == n
    for limit in range(50):
        buf.get(initial_token_count=limit % 30)
    buf.window_token_count()
    _ = buf.token_count
    buf.get_all()
    assert counting.calls == n
    # re-setting messages already in the buffer reuses their counts ...
    buf.set(buf.get_all()[-8:])
    assert counting.calls == n
    # ... and only new messages are tokenized
    buf.set([*buf.get_all(), msg(USER, "new one")])
    assert counting.calls == n + 1


def test_get_cost_independent_of_history_length() -> None:
    counting = CountingTokenizer(get_tokenizer())
    buf = ChatBuffer(token_limit=200, tokenizer_fn=counting)
    buf.put_messages([msg(USER if i % 2 == 0 else ASSISTANT, f"message {i}") for i in range(10_000)])
    calls = counting.calls
    for _ in range(200):
        window = buf.get()
    # get() sums cached counts over the window: no tokenizer call, whatever the history
    # length (the timing is measured in bench/speed.py, not here).
    assert counting.calls == calls
    assert 0 < len(window) < 100


# --------------------------------------------------------------------------- get()


def test_everything_fits_returns_history_unchanged() -> None:
    history = [msg(ASSISTANT, "hello, I start the chat"), msg(TOOL, "odd but kept", tool_call_id="x")]
    buf = ChatBuffer.from_defaults(chat_history=history)
    window = buf.get()
    assert window == history
    assert all(a is b for a, b in zip(window, history))
    window.append(msg(USER, "mutating the returned list"))
    assert len(buf.get_all()) == 2  # get() returns a new list


def test_truncation_keeps_most_recent_within_limit() -> None:
    history = [msg(USER if i % 2 == 0 else ASSISTANT, f"message {i} " + "word " * (i % 7)) for i in range(40)]
    buf = ChatBuffer(token_limit=60, chat_history=history)
    counts = [buf.count_tokens(m) for m in history]
    assert sum(counts) > 60
    window = buf.get()
    k = len(window)
    assert 0 < k < len(history)
    assert window == history[-k:]  # a suffix: the most recent messages
    assert sum(counts[-k:]) <= 60
    assert buf.window_token_count() == sum(counts[-k:])
    assert window[0].role == USER
    # maximal: the next longer suffix starting with a user message does not fit
    assert sum(counts[-(k + 2):]) > 60


def test_leading_system_message_kept() -> None:
    system = msg(SYSTEM, "You are a helpful assistant who answers briefly.")
    history = [system] + [msg(USER if i % 2 == 0 else ASSISTANT, f"turn {i} with some text") for i in range(30)]
    buf = ChatBuffer(token_limit=50, chat_history=history)
    counts = [buf.count_tokens(m) for m in history]
    window = buf.get()
    assert window[0] is system
    rest = window[1:]
    assert rest and rest == history[-len(rest):]
    assert rest[0].role == USER
    assert counts[0] + sum(counts[-len(rest):]) <= 50  # system tokens count against the limit
    assert counts[0] + sum(counts[-len(rest) - 2:]) > 50


def test_system_message_only_counted_once_when_it_alone_overflows() -> None:
    system = msg(SYSTEM, "word " * 50)
    buf = ChatBuffer(token_limit=10, tokenizer_fn=str.split, chat_history=[system])
    assert buf.get() == [system]


@pytest.mark.parametrize("make_turn", [tool_turn, block_tool_turn])
def test_window_never_starts_with_tool_or_assistant(make_turn: Callable[[int], list[ChatMessage]]) -> None:
    system = msg(SYSTEM, "Use tools.")
    history = [system] + [m for i in range(6) for m in make_turn(i)]
    buf = ChatBuffer(chat_history=history)
    total = buf.token_count
    truncated_starts = set()
    for limit in range(1, total + 1):
        buf.token_limit = limit
        window = buf.get()
        assert window[0] is system
        body = window[1:]
        assert body == history[-len(body):]
        if len(window) < len(history):
            assert body[0].role == USER, (limit, body[0])
            truncated_starts.add(len(body))
        assert_well_formed(window)
    # the sweep did exercise several different truncation points
    assert len(truncated_starts) >= 5


def test_truncation_skips_to_next_user_when_assistant_would_lead() -> None:
    # user(big) assistant tool-call, tool, assistant, user(small) ...: a limit that
    # fits everything but the first user message must drop the whole first turn.
    first = [msg(USER, "word " * 30), *tool_turn(1)[1:]]
    second = tool_turn(2)
    history = first + second
    buf = ChatBuffer(chat_history=history)
    counts = [buf.count_tokens(m) for m in history]
    buf.token_limit = sum(counts[1:])  # everything after the big user message fits
    assert buf.get() == second


def test_overflow_returns_last_user_turn() -> None:
    system = msg(SYSTEM, "sys")
    huge_turn = [msg(USER, "word " * 40), *tool_turn(9)[1:]]
    history = [system, *tool_turn(1), *huge_turn]
    buf = ChatBuffer(token_limit=20, tokenizer_fn=str.split, chat_history=history)
    window = buf.get()
    # not even the last user turn fits: it is returned whole, with the system message
    assert window == [system, *huge_turn]
    assert buf.window_token_count() > 20
    assert_well_formed(window)


def test_overflow_without_user_message_returns_last_message() -> None:
    history = [msg(ASSISTANT, "word " * 20), msg(ASSISTANT, "word " * 30)]
    buf = ChatBuffer(token_limit=10, tokenizer_fn=str.split, chat_history=history)
    assert buf.get() == history[-1:]


def test_initial_token_count() -> None:
    # "a b c d e" is 5 words
    history = [msg(USER if i % 2 == 0 else ASSISTANT, "a b c d e") for i in range(10)]
    buf = ChatBuffer(token_limit=27, tokenizer_fn=str.split, chat_history=history)
    assert len(buf.get()) == 4  # 5 fit, but then the window would start with an assistant
    assert len(buf.get(initial_token_count=3)) == 4
    assert len(buf.get(initial_token_count=8)) == 2  # 3 fit, trimmed to start at a user
    assert buf.window_token_count(initial_token_count=8) == 10
    assert buf.get(initial_token_count=27) == history[-2:]  # overflow: the last user turn
    with pytest.raises(ValueError, match="Initial token count exceeds token limit"):
        buf.get(initial_token_count=28)


# --------------------------------------------------------------------------- writes


def test_put_messages_set_reset() -> None:
    log = ListChatLog()
    buf = ChatBuffer(tokenizer_fn=str.split, chat_log=log)
    a, b, c = msg(USER, "a a"), msg(ASSISTANT, "b b b"), msg(USER, "c c c c")
    buf.put(a)
    buf.put_messages([b, c])
    assert buf.get_all() == [a, b, c] and log.messages == [a, b, c]
    assert log.calls.count("append") == 2  # the batch was one append
    assert buf.token_count == 2 + 3 + 4
    buf.put_messages([])
    assert log.calls.count("append") == 2

    buf.set([c, a])
    assert buf.get_all() == [c, a] and log.messages == [c, a]
    assert buf.token_count == 4 + 2

    buf.reset()
    assert buf.get_all() == [] and buf.get() == [] and log.messages == []
    assert buf.token_count == 0
    buf.put(b)
    assert buf.get_all() == [b] and buf.token_count == 3


def test_put_rejects_non_messages() -> None:
    buf = ChatBuffer()
    with pytest.raises(TypeError, match="expected a ChatMessage"):
        buf.put("hello")  # type: ignore[arg-type]
    assert buf.get_all() == []


def test_chat_log_loaded_at_construction_and_written_through() -> None:
    stored = [msg(USER, "earlier question"), msg(ASSISTANT, "earlier answer")]
    log = ListChatLog(stored)
    counting = CountingTokenizer(get_tokenizer())
    buf = ChatBuffer(chat_log=log, tokenizer_fn=counting)
    assert buf.get_all() == stored and counting.calls == 2
    assert buf.chat_log is log
    assert isinstance(log, ChatLog)
    buf.put(msg(USER, "new"))
    assert log.messages == buf.get_all()


def test_from_defaults_history_replaces_log() -> None:
    log = ListChatLog([msg(USER, "old")])
    fresh = [msg(USER, "fresh")]
    buf = ChatBuffer.from_defaults(chat_history=fresh, chat_log=log)
    assert buf.get_all() == fresh and log.messages == fresh
    assert "replace" in log.calls and "load" not in log.calls


def test_chat_log_failure_leaves_buffer_unchanged() -> None:
    history = [msg(USER, "kept"), msg(ASSISTANT, "also kept")]
    log = FailingChatLog(history)
    buf = ChatBuffer(chat_log=log)
    before, tokens = buf.get_all(), buf.token_count
    with pytest.raises(OSError, match="append"):
        buf.put(msg(USER, "lost"))
    with pytest.raises(OSError, match="append"):
        buf.put_messages([msg(USER, "lost"), msg(ASSISTANT, "lost")])
    with pytest.raises(OSError, match="replace"):
        buf.set([msg(USER, "lost")])
    with pytest.raises(OSError, match="clear"):
        buf.reset()
    assert buf.get_all() == before and buf.get() == before
    assert buf.token_count == tokens


async def test_chat_log_failure_propagates_async() -> None:
    buf = ChatBuffer(chat_log=FailingChatLog([msg(USER, "kept")]))
    with pytest.raises(OSError):
        await buf.aput(msg(USER, "lost"))
    with pytest.raises(OSError):
        await buf.areset()
    assert [m.content for m in await buf.aget_all()] == ["kept"]


# --------------------------------------------------------------------------- lossless


def rich_messages() -> list[ChatMessage]:
    return [
        msg(SYSTEM, "You are terse."),
        ChatMessage(
            role=USER,
            blocks=[TextBlock(text="What is in this picture?"), ImageBlock(url="https://example.com/cat.png")],
            additional_kwargs={"message_id": "m1", "timestamp": "2024-05-08T13:56:00", "meta": {"k": [1, 2]}},
        ),
        *tool_turn(7),
        *block_tool_turn(8),
        msg(ASSISTANT, "Ünïcödé — \u2028 line separator and emoji 🦙", custom={"nested": [None, True, 1.5]}),
    ]


def test_lossless_in_memory() -> None:
    originals = rich_messages()
    buf = ChatBuffer(token_limit=100_000)
    buf.put_messages(originals)
    assert buf.get_all() == originals
    assert buf.get() == originals
    assert all(a is b for a, b in zip(buf.get(), originals))
    got = buf.get_all()
    assert got[3].additional_kwargs["tool_calls"][0]["id"] == "call_7"
    assert got[4].additional_kwargs["tool_call_id"] == "call_7"
    assert isinstance(got[1].blocks[1], ImageBlock)
    assert str(got[1].blocks[1].url) == "https://example.com/cat.png"


def test_lossless_through_file_chat_log(tmp_path: Path) -> None:
    originals = rich_messages()
    path = tmp_path / "chat.jsonl"
    buf = ChatBuffer(token_limit=100_000, chat_log=FileChatLog(path))
    buf.put_messages(originals[:3])
    for m in originals[3:]:
        buf.put(m)
    assert path.read_text("utf-8").count("\n") == len(originals)

    reopened = ChatBuffer(token_limit=100_000, chat_log=FileChatLog(path))
    restored = reopened.get_all()
    assert restored == originals
    assert restored[0] is not originals[0]  # really came back from the file
    assert isinstance(restored[7].blocks[0], ToolCallBlock)
    assert restored[7].blocks[0].tool_kwargs == {"item": 8}
    assert restored[-1].additional_kwargs["custom"] == {"nested": [None, True, 1.5]}
    assert reopened.token_count == buf.token_count

    reopened.set(originals[:2])
    assert ChatBuffer(chat_log=FileChatLog(path)).get_all() == originals[:2]
    reopened.reset()
    assert ChatBuffer(chat_log=FileChatLog(path)).get_all() == []


def test_to_dict_from_dict_roundtrip() -> None:
    originals = rich_messages()
    buf = ChatBuffer(token_limit=1234, chat_history=originals)
    data = buf.to_dict()
    assert data["class_name"] == "ChatBuffer"
    restored = ChatBuffer.from_json(buf.to_json())
    assert restored.token_limit == 1234
    assert restored.get_all() == originals
    assert restored.token_count == buf.token_count
    # reattaching a log makes the log the source of truth
    log = ListChatLog([msg(USER, "from the log")])
    assert [m.content for m in ChatBuffer.from_dict(data, chat_log=log).get_all()] == ["from the log"]


def test_copy_deepcopy_pickle() -> None:
    originals = rich_messages()
    buf = ChatBuffer(token_limit=777, chat_history=originals)

    shallow = copy.copy(buf)
    shallow.put(msg(USER, "only in the shallow copy"))
    assert buf.get_all() == originals and shallow.get_all()[0] is originals[0]

    deep = copy.deepcopy(buf)
    assert deep.get_all() == originals and deep.get_all()[0] is not originals[0]
    deep.reset()
    assert buf.get_all() == originals
    assert deep.tokenizer_fn is buf.tokenizer_fn

    unpickled = pickle.loads(pickle.dumps(buf))
    assert unpickled.get_all() == originals
    assert unpickled.token_limit == 777 and unpickled.token_count == buf.token_count
    unpickled.put(msg(USER, "lock works"))  # a fresh lock, usable
    assert len(unpickled.get_all()) == len(originals) + 1


def test_pickle_with_unpicklable_tokenizer_recounts() -> None:
    history = [msg(USER, "tokenization is counted"), msg(ASSISTANT, "again, differently")]
    buf = ChatBuffer(tokenizer_fn=lambda text: text.split(), chat_history=history)
    unpickled = pickle.loads(pickle.dumps(buf))
    assert unpickled.get_all() == history
    # the lambda could not travel: the default tokenizer is used and counts follow it
    expected = sum(len(get_tokenizer()(m.content or "")) for m in history)
    assert unpickled.token_count == expected != buf.token_count


# --------------------------------------------------------------------------- concurrency


async def test_fifty_concurrent_aput_tasks_all_land() -> None:
    buf = ChatBuffer()
    await asyncio.gather(*(buf.aput(msg(USER, f"task {i}")) for i in range(50)))
    assert sorted(m.content for m in await buf.aget_all()) == sorted(f"task {i}" for i in range(50))
    assert buf.token_count == sum(buf.count_tokens(m) for m in buf.get_all())


async def test_fifty_concurrent_aput_tasks_with_chat_log() -> None:
    log = ListChatLog()
    buf = ChatBuffer(chat_log=log)
    await asyncio.gather(*(buf.aput(msg(USER, f"task {i}")) for i in range(50)))
    contents = [m.content for m in await buf.aget_all()]
    assert sorted(contents) == sorted(f"task {i}" for i in range(50))
    assert [m.content for m in log.messages] == contents  # same order in log and memory


async def test_async_methods_with_chat_log() -> None:
    log = ListChatLog()
    buf = ChatBuffer(tokenizer_fn=str.split, token_limit=5, chat_log=log)
    await buf.aput_messages([msg(USER, "a b"), msg(ASSISTANT, "c")])
    assert [m.content for m in log.messages] == ["a b", "c"]
    assert [m.content for m in await buf.aget()] == ["a b", "c"]
    await buf.aset([msg(USER, "x y z w")])
    assert [m.content for m in log.messages] == ["x y z w"]
    assert [m.content for m in await buf.aget(initial_token_count=0)] == ["x y z w"]
    await buf.areset()
    assert log.messages == [] and await buf.aget_all() == []


class SlowListChatLog(ListChatLog):
    """A list log that yields the CPU after each append.

    That widens the gap between writing the log and updating memory, so writers
    that are not serialized would record messages in different orders.
    """

    def append(self, messages: Sequence[ChatMessage]) -> None:
        super().append(messages)
        time.sleep(0.0005)


def test_threads_writing_concurrently() -> None:
    log = SlowListChatLog()
    buf = ChatBuffer(chat_log=log)

    def writer(t: int) -> None:
        for i in range(25):
            buf.put(msg(USER, f"thread {t} message {i}"))
            buf.get()

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(buf.get_all()) == 100
    assert [m.content for m in log.messages] == [m.content for m in buf.get_all()]
    assert buf.token_count == sum(buf.count_tokens(m) for m in buf.get_all())


# --------------------------------------------------------------------------- agent integration


async def test_works_as_function_agent_memory() -> None:
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.core.llms import MockFunctionCallingLLM
    from llama_index.core.tools import FunctionTool

    def get_weather(city: str = "Paris") -> str:
        """Return the weather in a city."""
        return f"Sunny in {city}"

    log = ListChatLog()
    buf = ChatBuffer(chat_log=log)
    agent = FunctionAgent(
        tools=[FunctionTool.from_defaults(fn=get_weather)],
        llm=MockFunctionCallingLLM(),
        system_prompt="You are a weather bot.",
    )
    result = await agent.run(user_msg="What's the weather?", memory=buf)

    history = buf.get_all()
    assert history[0].role == USER and history[0].content == "What's the weather?"
    assert history[-1].role == ASSISTANT and history[-1].content == str(result)
    # the tool round trip landed too, with the call id linking result to call
    tool_msgs = [m for m in history if m.role == TOOL]
    assert tool_msgs and "Sunny in Paris" in (tool_msgs[0].content or "")
    assert_well_formed(history)
    assert log.messages == history
