"""``ChatBuffer`` does what ``ChatMemoryBuffer`` users rely on.

Adapted from LlamaIndex's own test file for ``ChatMemoryBuffer``,
``llama-index-core/tests/memory/test_chat_memory_buffer.py`` (run-llama/llama_index,
commit f9e4870feb73c1e5926cd48cdc13a115282b9dc1): the same scenarios, messages and
token limits, written anew and run on both classes (``buffer_cls``), so every
expectation is checked against the stock class too. What was adapted:

* the upstream file calls ``memory.get(initial_tokens)``, which passes the number as
  ``input`` (ignored), not as ``initial_token_count``; so run unchanged against
  llama-index-core 0.14.25, four of its tests fail on ``ChatMemoryBuffer`` itself.
  Here the number is passed as ``initial_token_count=``, and the expectations are what
  ``ChatMemoryBuffer`` 0.14.25 returns, where they differ from the upstream ones (the
  upstream ones expect an empty history on overflow; the stock class returns the last
  message);
* one deliberate difference, asserted as such: when only an assistant message would
  fit, ``ChatMemoryBuffer`` returns that assistant message alone, ``ChatBuffer`` the
  whole last user turn (a window never starts with an assistant message);
* the exact text of the "initial token count" error: ``ChatBuffer``'s says the numbers;
* ``ChatMemoryBuffer.to_dict``/``to_string`` raise a ``PydanticSerializationError``
  with the pydantic installed here: the stock side of those tests is an expected failure.
"""

from __future__ import annotations

import json
import pickle
from typing import Any

import pytest
from llama_index.core.llms import ChatMessage, MessageRole
from llama_index.core.memory.chat_memory_buffer import ChatMemoryBuffer
from llama_index.core.utils import get_tokenizer

from llama_memory.write.buffer import ChatBuffer

tokenizer = get_tokenizer()


def tokens(message: ChatMessage) -> int:
    """Tokens of a message as ChatMemoryBuffer counts them."""
    return len(tokenizer(str(message.content)))


FIRST_Q = ChatMessage(role=MessageRole.USER, content="first message")
SECOND_Q = ChatMessage(role=MessageRole.USER, content="second message")
FIRST_A = ChatMessage(role=MessageRole.ASSISTANT, content="first answer")
SECOND_A = ChatMessage(role=MessageRole.USER, content="second answer")  # a USER role upstream too
DIALOGUE = [FIRST_Q, FIRST_A, SECOND_Q, SECOND_A]


def stock_serialization_broken() -> bool:
    try:
        ChatMemoryBuffer.from_defaults(chat_history=[FIRST_Q]).to_dict()
    except Exception:
        return True
    return False


@pytest.fixture(params=[ChatMemoryBuffer, ChatBuffer], ids=["ChatMemoryBuffer", "ChatBuffer"])
def buffer_cls(request: pytest.FixtureRequest) -> Any:
    return request.param


@pytest.fixture
def serializable_cls(buffer_cls: Any) -> Any:
    if buffer_cls is ChatMemoryBuffer and stock_serialization_broken():
        pytest.xfail("ChatMemoryBuffer.to_dict fails with the installed pydantic")
    return buffer_cls


def test_messages_are_two_tokens_each() -> None:
    # what the limits below are built on
    assert [tokens(m) for m in DIALOGUE] == [2, 2, 2, 2]


def test_put_get(buffer_cls: Any) -> None:
    memory = buffer_cls.from_defaults(chat_history=[FIRST_Q])
    history = memory.get()
    assert len(history) == 1 and history[0].content == FIRST_Q.content


def test_initial_tokens_below_the_limit_keep_the_history(buffer_cls: Any) -> None:
    memory = buffer_cls.from_defaults(token_limit=1000, chat_history=[FIRST_Q])
    assert memory.get(initial_token_count=5) == [FIRST_Q]


def test_initial_tokens_above_the_limit_raise(buffer_cls: Any) -> None:
    memory = buffer_cls.from_defaults(token_limit=49)
    with pytest.raises(ValueError, match="^Initial token count exceeds token limit"):
        memory.get(initial_token_count=50)


def test_initial_tokens_equal_to_the_limit_return_the_last_message(buffer_cls: Any) -> None:
    # upstream expects []; both classes return the message that overflows, so the LLM
    # provider reports it instead of the conversation silently vanishing
    memory = buffer_cls.from_defaults(token_limit=5, chat_history=[FIRST_Q])
    assert memory.get(initial_token_count=5) == [FIRST_Q]


def test_room_for_the_answer_only(buffer_cls: Any) -> None:
    memory = buffer_cls.from_defaults(token_limit=5, chat_history=[FIRST_Q, FIRST_A])
    history = memory.get(initial_token_count=5 - tokens(FIRST_Q))
    if buffer_cls is ChatMemoryBuffer:
        assert history == [FIRST_A]  # a window that starts with an assistant message
    else:
        assert history == [FIRST_Q, FIRST_A]  # deliberate: the last user turn, whole


def test_room_for_the_second_question_and_answer(buffer_cls: Any) -> None:
    memory = buffer_cls.from_defaults(token_limit=5, chat_history=DIALOGUE)
    history = memory.get(initial_token_count=5 - tokens(FIRST_Q) - tokens(FIRST_A))
    assert history == [SECOND_Q, SECOND_A]


def test_room_for_all_but_the_first_question(buffer_cls: Any) -> None:
    memory = buffer_cls.from_defaults(token_limit=10, chat_history=DIALOGUE)
    history = memory.get(initial_token_count=10 - tokens(FIRST_A) - tokens(FIRST_Q) - tokens(SECOND_A))
    assert history == [SECOND_Q, SECOND_A]  # the answer cannot lead: it goes too


def test_set(buffer_cls: Any) -> None:
    memory = buffer_cls.from_defaults(chat_history=[FIRST_Q])
    memory.put(FIRST_Q)
    assert len(memory.get()) == 2
    memory.set([FIRST_Q])
    assert len(memory.get()) == 1


def test_max_tokens(buffer_cls: Any) -> None:
    # a limit of 5 keeps two two-token messages (ChatBuffer used to keep one)
    memory = buffer_cls.from_defaults(chat_history=[FIRST_Q], token_limit=5)
    memory.put(FIRST_Q)
    assert len(memory.get()) == 2
    memory.put(FIRST_Q)
    memory.put(FIRST_Q)
    assert len(memory.get()) == 2
    assert len(memory.get_all()) == 4
    memory.put(ChatMessage(role=MessageRole.USER, content="test message2"))
    assert memory.get()[-1].content == "test message2"
    assert len(memory.get()) == 2


def test_string_save_load(serializable_cls: Any) -> None:
    memory = serializable_cls.from_defaults(chat_history=[FIRST_Q], token_limit=5)
    text = memory.to_string()
    assert isinstance(json.loads(text), dict)
    restored = serializable_cls.from_string(text)
    assert len(restored.get()) == 1 and restored.token_limit == 5


def test_dict_save_load(serializable_cls: Any) -> None:
    memory = serializable_cls.from_defaults(chat_history=[FIRST_Q], token_limit=5)
    restored = serializable_cls.from_dict(memory.to_dict())
    assert len(restored.get()) == 1 and restored.token_limit == 5


def test_pickle(buffer_cls: Any) -> None:
    """The tiktoken tokenizer does not pickle: both classes get around it."""
    memory = buffer_cls.from_defaults(chat_history=[FIRST_Q], token_limit=5)
    restored = pickle.loads(pickle.dumps(memory))
    assert isinstance(restored, buffer_cls)
    assert restored.get() == [FIRST_Q] and restored.token_limit == 5


def test_same_windows_as_chat_memory_buffer_on_a_longer_chat() -> None:
    """Beyond the upstream file: at every limit the last turn fits in, both keep the same
    messages on a chat of plain turns (the counts of a window add up to
    ChatMemoryBuffer's count of the joined contents). Below that, the overflow rule
    differs on purpose (see test_room_for_the_answer_only)."""
    chat = [
        ChatMessage(role=MessageRole.USER if i % 2 == 0 else MessageRole.ASSISTANT,
                    content=f"message number {i} says {'hello ' * (i % 4)}".strip())
        for i in range(12)
    ]
    stock = ChatMemoryBuffer.from_defaults(chat_history=chat, token_limit=10)
    ours = ChatBuffer.from_defaults(chat_history=chat, token_limit=10)
    assert ours.token_count == len(tokenizer(" ".join(str(m.content) for m in chat)))
    last_turn = ours.count_tokens(chat[-2]) + ours.count_tokens(chat[-1])
    for limit in range(last_turn, ours.token_count + 1):
        stock.token_limit = ours.token_limit = limit
        assert ours.get() == stock.get(), limit


def test_from_dict_reads_a_chat_memory_buffer_dict() -> None:
    """Beyond the upstream file: a ChatMemoryBuffer's dict (its history in a
    SimpleChatStore) loads into a ChatBuffer with its messages, not as an empty one."""
    data = {
        "token_limit": 5,
        "chat_store": {
            "store": {"chat_history": [m.model_dump(mode="json") for m in DIALOGUE]},
            "class_name": "SimpleChatStore",
        },
        "chat_store_key": "chat_history",
        "class_name": "ChatMemoryBuffer",
    }
    restored = ChatBuffer.from_dict(data)
    assert restored.get_all() == DIALOGUE and restored.token_limit == 5
    with pytest.raises(ValueError, match="chat_history="):
        ChatBuffer.from_dict({**data, "chat_store": {"class_name": "RedisChatStore"}})
