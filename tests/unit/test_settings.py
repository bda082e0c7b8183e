"""Every option of a memory is one field of ``MemorySettings``: ``from_defaults`` takes the
same names with the same defaults, checks them before anything opens, and ``to_dict`` is
the settings' own data plus markers for live objects. Payloads written before the
settings existed still restore."""

from __future__ import annotations

import inspect
import json
import pickle
from datetime import timedelta
from pathlib import Path
from typing import Any, Optional

import pytest
from pydantic import BaseModel, ValidationError

from helpers import message_texts, user
from llama_memory import ChatBuffer, ComposableMemory, MemorySettings, RestoreWarning, ScopeError
from llama_memory.storage.sqlite import DB_FILENAME
from scripted_llm import ScriptedLLM


class Prefs(BaseModel):
    """A profile schema importable by name (``test_settings:Prefs``)."""

    diet: Optional[str] = None


def test_from_defaults_takes_every_setting_with_the_same_default() -> None:
    signature = inspect.signature(ComposableMemory.from_defaults).parameters
    arguments = {n: p.default for n, p in signature.items() if p.kind is not p.VAR_KEYWORD}
    del arguments["chat_history"]  # the conversation to start with, not a setting
    fields = {n: f.default for n, f in MemorySettings.model_fields.items()}
    assert arguments == fields


def test_a_typo_names_the_closest_setting_and_a_bad_value_opens_nothing(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"'top_kk'; did you mean 'top_k'\?"):
        MemorySettings(top_kk=3)
    with pytest.raises(ValidationError, match="min_relevance is a calibrated relevance"):
        ComposableMemory.from_defaults(user_id="alice", path=tmp_path / "m", min_relevance=2.0)
    with pytest.raises(ValidationError, match="(?s)top_k.*must be zero or more"):
        ComposableMemory.from_defaults(user_id="alice", path=tmp_path / "m", top_k=-1)
    assert not (tmp_path / "m").exists()  # refused before the store was created
    with pytest.raises(ValidationError, match="frozen"):
        MemorySettings().top_k = 3  # type: ignore[misc]


def test_memory_settings_say_what_it_was_opened_with(tmp_path: Path, monkeypatch, embed_model) -> None:
    monkeypatch.chdir(tmp_path)
    memory = ComposableMemory.from_defaults(
        user_id="alice", path="m", embed_model=embed_model, ttl=timedelta(minutes=2), top_k=4
    )
    try:
        settings = memory.settings
        assert settings.path == str(tmp_path / "m") and settings.session_id == memory.session_id
        assert (settings.ttl, settings.top_k, settings.embed_model) == (120.0, 4, embed_model)
        memory.top_k = 6  # a field of the memory too: the settings say its value now
        assert memory.settings.top_k == memory.to_dict()["top_k"] == 6
        data = memory.settings.data()
        assert json.loads(json.dumps(data)) == data and "embed_model" not in data  # a live object
        assert MemorySettings(**data).data() == data
    finally:
        memory.close()


def test_a_payload_written_before_the_settings_restores(tmp_path: Path, embed_model) -> None:
    # As ComposableMemory.to_dict wrote it until the settings had a model of their own.
    first = ComposableMemory.from_defaults(
        user_id="alice", session_id="s1", path=tmp_path, embed_model=embed_model, triples=True, profile=Prefs
    )
    first.put(user("I like green tea."))
    first.close()
    old = {
        "class_name": "ComposableMemory", "user_id": "alice", "session_id": "s1", "tenant_id": "default",
        "path": str(tmp_path), "memory_token_limit": 1500, "top_k": 7, "insert_method": "user",
        "extract_every": 3, "min_relevance": 0.2, "set_spread": 1.3, "extract_in": "thread",
        "extract_after_quiet": 0.0, "token_limit": 3000, "primary": "default", "sources": "default",
        "triples": True, "profile": "test_settings:Prefs", "llm": {"qualified_name": "llama_memory.testing:ScriptedLLM"},
        "ttl": 3600.0, "refresh_on_read": True,
    }
    with pytest.warns(RestoreWarning, match="extract_every=3 does nothing"):
        restored = ComposableMemory.from_dict(old, embed_model=embed_model)
    try:
        assert [s.name for s in restored.sources] == ["vector", "profile", "triples"]
        assert restored.profile.schema is Prefs and restored.source("vector").expiry.ttl == 3600.0
        assert (restored.top_k, restored.insert_method, restored.extract_every) == (7, "user", 3)
        assert restored.get_all()[-1].content == "I like green tea."
        assert message_texts(restored.search("tea", k=2)) == ["I like green tea."]
    finally:
        restored.close()

    in_memory = {
        "class_name": "ComposableMemory", "user_id": None, "session_id": "s2", "tenant_id": "default",
        "path": None, "memory_token_limit": 1500, "top_k": 10, "insert_method": "system", "extract_every": 0,
        "min_relevance": 0.4, "set_spread": 1.3, "extract_in": "thread", "extract_after_quiet": 0.0,
        "token_limit": 900, "primary": "default", "sources": "none", "triples": False, "profile": False,
        "chat_history": [{"role": "user", "additional_kwargs": {}, "blocks": [{"block_type": "text", "text": "Hi."}]}],
    }
    again = ComposableMemory.from_dict(in_memory)
    assert isinstance(again.primary_memory, ChatBuffer) and again.primary_memory.token_limit == 900
    assert [m.content for m in again.get_all()] == ["Hi."] and again.sources == []


def test_a_copy_carries_the_settings(tmp_path: Path, embed_model: Any) -> None:
    memory = ComposableMemory.from_defaults(
        user_id="alice", path=tmp_path, embed_model=embed_model, llm=ScriptedLLM([]), extract_every=2,
        set_spread=2.0, triples=True,
    )
    try:
        copy = pickle.loads(pickle.dumps(memory))
        try:
            assert copy.settings.data() == memory.settings.data()
            assert isinstance(copy.llm, ScriptedLLM)
        finally:
            copy.close()
    finally:
        memory.close()
    assert (tmp_path / DB_FILENAME).is_file()


@pytest.mark.parametrize(
    ("given", "error", "said"),
    [
        ({"user_id": ""}, ScopeError, "needs a user_id"),
        ({"user_id": "   "}, ScopeError, "blank"),
        ({"user_id": None}, ScopeError, "needs a user_id"),
        ({"user_id": "alice", "tenant_id": " "}, ValueError, "tenant_id .* is blank"),
        ({"user_id": "alice", "secondary_memory_sources": [42]}, TypeError, "not int"),
        ({"user_id": "alice", "primary_memory": 42}, TypeError, "primary_memory takes a LlamaIndex memory"),
        # from_defaults("alice", ...): the user given first, by position.
        ({"primary_memory": "alice"}, TypeError, r"not str 'alice'; to name the user, pass user_id='alice'$"),
        ({"user_id": "alice", "encryption_key": " "}, ValueError, "encryption_key is blank"),
        # The buffer's own check came after the store was created.
        ({"user_id": "alice", "token_limit": -1}, ValueError, "token_limit must be a positive number of tokens, got -1"),
        ({"user_id": "alice", "token_limit": 0}, ValueError, "token_limit must be a positive number of tokens, got 0"),
        # An application's ids are often numbers: said with the fix, not as a validator's dump.
        ({"user_id": 42}, TypeError, r"^user_id takes a string, not int 42: pass user_id='42'$"),
        ({"user_id": "alice", "session_id": 7}, TypeError, r"^session_id takes a string, not int 7: pass session_id='7'$"),
        ({"user_id": "alice", "session_id": 0}, TypeError, "session_id takes a string, not int 0"),  # not a new session
        ({"user_id": "alice", "tenant_id": 3}, TypeError, "tenant_id takes a string, not int 3"),
        # A model name where an object goes fails here, not in the first background pass.
        ({"user_id": "alice", "llm": "gpt-4o-mini"}, TypeError, r"llm takes an LLM object.*OpenAI\(model='gpt-4o-mini'\)"),
        # LlamaIndex's shorthands name no OpenAI model: the fix says what they stand for.
        ({"user_id": "alice", "embed_model": "local"}, TypeError, "shorthand 'local': leave embed_model out"),
        ({"user_id": "alice", "embed_model": "local:BAAI/bge-small-en"}, TypeError,
         r"HuggingFaceEmbedding\(model_name='BAAI/bge-small-en'\)"),
    ],
)
def test_every_argument_is_checked_before_the_store_is_created(tmp_path: Path, given, error, said) -> None:
    where = tmp_path / "m"
    with pytest.raises(error, match=said):
        ComposableMemory.from_defaults(path=where, **given)
    assert not where.exists()


@pytest.mark.parametrize(("path", "said"), [("", r"^path is empty \(''\): pass a directory, e.g. path='./memory'"),
                                          ("  ", r"^path is blank \('  '\)")])
def test_an_empty_path_is_refused_not_taken_for_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str, said: str
) -> None:
    """``path=os.environ.get("MEMORY_PATH", "")`` wrote the store into the working directory."""
    from llama_memory import MemoryAdmin
    from llama_memory.blocks import MemoryBlocks

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=said):
        ComposableMemory.from_defaults(user_id="alice", path=path)
    with pytest.raises(ValueError, match=said):
        MemoryBlocks.open("alice", path=path)
    with pytest.raises(ValueError, match=said):
        MemoryAdmin(path, create=True)
    assert list(tmp_path.iterdir()) == []


def test_the_command_lines_help_states_the_settings_defaults() -> None:
    """``llama-memory explain`` and ``search`` fall back to the memory's own defaults, and
    their help says which: the numbers come from the settings, not from the parser."""
    from llama_memory import MemorySettings
    from llama_memory.admin.cli.parser import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if a.choices and "explain" in a.choices).choices
    explain = " ".join(commands["explain"].format_help().split())
    search = " ".join(commands["search"].format_help().split())
    fields = MemorySettings.model_fields
    assert f"records per source (default {fields['top_k'].default}, as from_defaults)" in explain
    assert f"the block's token budget (default {fields['memory_token_limit'].default})" in explain
    assert f"how many records (default {fields['top_k'].default})" in search
    assert commands["search"].get_default("k") == fields["top_k"].default


def test_every_option_is_an_attribute_of_the_memory(tmp_path: Path, embed_model: Any) -> None:
    """A memory reads each of its options from its settings, whatever the option: one
    field of MemorySettings is all a new option needs to be ``memory.<name>``."""
    memory = ComposableMemory.from_defaults(
        user_id="alice", path=tmp_path, embed_model=embed_model, ttl=60, formation_token_budget=500
    )
    try:
        # The parts a memory holds as built (its buffer, sources, tokenizer) and its
        # profile source (memory.profile) are not the options' values.
        for name in MemorySettings.model_fields:
            if name not in ("primary_memory", "secondary_memory_sources", "tokenizer_fn", "profile"):
                assert getattr(memory, name) == getattr(memory.settings, name), name
        assert (memory.ttl, memory.formation_token_budget, memory.owner_only) == (60.0, 500, True)
        memory.min_relevance = 0.5  # changed after it opened: the settings and to_dict say so
        assert memory.settings.min_relevance == memory.to_dict()["min_relevance"] == 0.5
        with pytest.raises(AttributeError):
            memory.top_kk  # noqa: B018 (not an option)
    finally:
        memory.close()


def test_the_admin_builds_its_memories_with_the_settings_options(tmp_path: Path, embed_model: Any) -> None:
    """MemoryAdmin takes any option of the memories it builds (explain, search), checked
    when it is made, as from_defaults checks them."""
    from llama_memory import MemoryAdmin

    memory = ComposableMemory.from_defaults(user_id="alice", path=tmp_path, embed_model=embed_model)
    memory.put(user("I like green tea."))
    memory.close()
    with pytest.raises(TypeError, match=r"'top_kk'; did you mean 'top_k'\?"):
        MemoryAdmin(tmp_path, top_kk=3)
    with pytest.raises(ValidationError, match="min_relevance is a calibrated relevance"):
        MemoryAdmin(tmp_path, min_relevance=2.0)
    with MemoryAdmin(tmp_path, embed_model=embed_model, min_relevance=0.9, top_k=3) as admin:
        built = admin.memory("alice")
        assert (built.settings.min_relevance, built.top_k, built.path) == (0.9, 3, str(tmp_path))
        assert built.runtime.instructions is not None  # the user's instructions, as the app's memory


@pytest.mark.parametrize(
    ("given", "error", "said"),
    [
        # A Literal option: the values it takes, not pydantic's dump and URL.
        ({"insert_method": "bogus"}, ValueError, r"^insert_method takes 'system' or 'user', not 'bogus' \(default 'system'\)$"),
        ({"extract_in": "worker "}, ValueError, r"^extract_in takes 'thread' or 'worker', not 'worker '"),
        # A float option given a word: the type, with the range its check allows.
        ({"min_relevance": "high"}, TypeError, r"^min_relevance takes a number from 0 to 1, not str 'high' \(default 0\.03\)$"),
        ({"set_spread": None}, TypeError, r"^set_spread takes a number of 1 or more, not NoneType None"),
        ({"top_k": 2.5}, TypeError, r"^top_k takes a whole number of 0 or more, not float 2\.5"),
        ({"triples": "maybe"}, TypeError, r"^triples takes True or False, not str 'maybe'"),
        ({"chroma_url": 8000}, TypeError, r"^chroma_url takes a string or None, not int 8000"),
    ],
)
def test_a_value_of_the_wrong_kind_names_the_option_the_value_and_what_it_takes(
    tmp_path: Path, given: dict[str, Any], error: type[Exception], said: str
) -> None:
    where = tmp_path / "m"
    with pytest.raises(error, match=said) as raised:
        ComposableMemory.from_defaults(user_id="alice", path=where, **given)
    assert not isinstance(raised.value, ValidationError) and "pydantic.dev" not in str(raised.value)
    with pytest.raises(error, match=said):
        MemorySettings(**given)
    assert not where.exists()


#: Options an open memory reads once, when it is built, with a value to try changing.
FIXED = {
    "user_id": "bob", "session_id": "another", "tenant_id": "other", "path": "/tmp/elsewhere",
    "token_limit": 200, "ttl": 60, "embed_model": None, "owner_only": False, "triples": True,
    # The buffer counts with the tokenizer it was built with, and caches the counts.
    "tokenizer_fn": str.split,
}


def test_an_open_memory_refuses_a_change_it_would_not_follow(tmp_path: Path, embed_model: Any) -> None:
    """``memory.user_id = "bob"`` used to show "bob" while the conversation stayed
    Alice's: Bob's message went into her window and his records beside it. An option
    read only when the memory is built is refused, saying how to get the new value, and
    the memory goes on as it was."""
    from llama_memory import MemoryAdmin

    memory = ComposableMemory.from_defaults(user_id="alice", session_id="s", path=tmp_path, embed_model=embed_model)
    try:
        memory.put(user("I live in Porto."))
        before = memory.settings
        for name, value in FIXED.items():
            with pytest.raises(AttributeError, match=rf"^{name} is fixed when a memory opens.*from_defaults\(\.\.\., {name}=\.\.\.\)"):
                setattr(memory, name, value)
        assert memory.settings == before and memory.user_id == "alice"
        memory.put(user("I play the violin."))
        assert [m.content for m in memory.get_all()] == ["I live in Porto.", "I play the violin."]
        assert "I live in Porto." in message_texts(memory.search("Where do I live?", k=1))
    finally:
        memory.close()
    assert [u.user_id for u in MemoryAdmin(tmp_path).users()] == ["alice"]


def test_a_live_option_changed_is_checked_and_holds_from_the_next_call(tmp_path: Path, embed_model: Any) -> None:
    from llama_memory.memory.settings import LIVE_OPTIONS

    assert LIVE_OPTIONS < set(MemorySettings.model_fields) and not LIVE_OPTIONS & set(FIXED)
    for session, fact in enumerate(["I live in Porto.", "I play the violin.", "My sister is called Ana."]):
        earlier = ComposableMemory.from_defaults(user_id="alice", session_id=str(session), path=tmp_path,
                                                 embed_model=embed_model)
        earlier.put(user(fact))
        earlier.close()
    memory = ComposableMemory.from_defaults(user_id="alice", session_id="two", path=tmp_path, embed_model=embed_model,
                                            min_relevance=0)
    try:
        memory.get("Tell me about my life.")
        assert len(memory.last_block.records) == 3
        memory.top_k = 1
        memory.get("Tell me about my life.")
        assert len(memory.last_block.records) == 1 and memory.settings.top_k == 1
        with pytest.raises(ValueError, match=r"insert_method takes 'system' or 'user', not 'above'"):
            memory.insert_method = "above"
        with pytest.raises(ValueError, match=r"extract_every=2 asks for automatic extraction passes, but this memory has no llm"):
            memory.extract_every = 2
        assert (memory.insert_method, memory.extract_every) == ("system", 0)  # unchanged by a refused value
        memory.llm = ScriptedLLM()
        memory.extract_every = 2  # with an llm now, the same value is taken
        assert memory.settings.extract_every == 2
    finally:
        memory.close()


def test_what_is_set_on_an_open_memory_is_checked_when_set(tmp_path: Path, embed_model: Any) -> None:
    """``memory.topk = 3`` was pydantic's ValueError ('object has no field "topk"'),
    naming no option: an AttributeError now says which one was meant. A buffer or
    sources put in place are checked as from_defaults checks them."""
    memory = ComposableMemory.from_defaults(user_id="alice", path=tmp_path, embed_model=embed_model)
    try:
        with pytest.raises(AttributeError, match=r"^ComposableMemory has no attribute 'topk' to set; did you mean 'top_k'\?"):
            memory.topk = 3
        assert memory.top_k == 10 and not hasattr(memory, "topk")
        with pytest.raises(AttributeError, match="no attribute 'wibble' to set; its options are"):
            memory.wibble = 1
        # The parts that may be replaced are checked as from_defaults checks them, not at
        # the next put() ("'str' object has no attribute 'put_messages'").
        with pytest.raises(TypeError, match="primary_memory takes a LlamaIndex memory .*not str 'alice'"):
            memory.primary_memory = "alice"
        with pytest.raises(TypeError, match="secondary_memory_sources takes llama-memory sources .*not int"):
            memory.secondary_memory_sources = [42]
        for part in ("primary_memory", "secondary_memory_sources"):
            with pytest.raises(TypeError, match=f"^{part} of an open memory takes a memory or a list of sources, not None"):
                setattr(memory, part, None)
        memory.put(user("I live in Porto."))
        assert [m.content for m in memory.get_all()] == ["I live in Porto."]
    finally:
        memory.close()


def test_a_copy_holds_the_buffer_the_memory_holds_now(tmp_path: Path, embed_model: Any) -> None:
    """The conversation's buffer changed after the memory opened (its token limit, or
    another buffer in its place, as LlamaIndex's memories allow) is what
    ``memory.token_limit``, ``to_dict`` and a pickle say: a workflow Context restored
    the buffer the memory was opened with, and the stored conversation came back in
    place of the one the agent was having."""
    from llama_index.core.memory import ChatMemoryBuffer

    memory = ComposableMemory.from_defaults(user_id="alice", session_id="s", path=tmp_path, embed_model=embed_model)
    try:
        memory.put(user("I live in Porto."))
        memory.primary_memory.token_limit = 50
        assert memory.token_limit == memory.to_dict()["token_limit"] == 50
        copy = pickle.loads(pickle.dumps(memory))
        try:
            assert copy.primary_memory.token_limit == copy.token_limit == 50
        finally:
            copy.close()
        memory.primary_memory = ChatMemoryBuffer.from_defaults(token_limit=400)
        memory.put(user("I play the violin."))
        restored = ComposableMemory.from_dict(memory.to_dict())
        try:
            assert [m.content for m in restored.get_all()] == ["I play the violin."]
            assert restored.token_limit == 400
        finally:
            restored.close()
    finally:
        memory.close()
