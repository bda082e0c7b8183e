"""The user-profile source: updates with history, schema validation, the block's
budget, forgetting, isolation, persistence, tools, LLM extraction, and a real
FunctionAgent across two sessions. Real SQLite files throughout; the LLM is the
scripted one."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from enum import Enum
from pathlib import Path
from typing import Any, Optional

import pytest
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import MessageRole
from pydantic import BaseModel, Field

from helpers import assistant, user
from llama_memory import ComposableMemory, ExtractionError, Scope, ScopeError
from llama_memory.memory.wiring import default_profile_source, default_vector_source
from llama_memory.sources.profile import ProfileOp, ProfileSource, ProfileUpdateError
from llama_memory.storage.sqlite import SQLiteStore
from llama_memory.testing import pass_answer
from scripted_llm import ScriptedLLM, ToolCallReply, message_plain_text

ALICE = Scope(user_id="alice", session_id="s1")
BOB = Scope(user_id="bob", session_id="b1")


class Seat(str, Enum):
    window = "window"
    aisle = "aisle"


class Travel(BaseModel):
    seat: Seat
    meal: Optional[str] = None


class UserProfile(BaseModel):
    """A developer's profile schema."""

    name: str = Field(description="What the user is called.", json_schema_extra={"importance": 10})
    age: Optional[int] = Field(default=None, ge=0)
    diet: Optional[str] = None
    allergies: list[str] = Field(default_factory=list, json_schema_extra={"importance": 8})
    travel: Optional[Travel] = None
    notes: dict[str, str] = Field(default_factory=dict)


# --------------------------------------------------------------------------- fixtures


@pytest.fixture
def store(tmp_path: Path):
    opened = SQLiteStore(tmp_path / "memory")
    yield opened
    opened.close()


@pytest.fixture
def profile(store: SQLiteStore) -> ProfileSource:
    return default_profile_source(store)


@pytest.fixture
def open_memory(tmp_path: Path):
    """Memories on one directory with a profile source (and, with ``vector=True``, the
    default vector source), sharing the file with ComposableMemory's own store."""
    path = tmp_path / "memory"
    opened: list[Any] = []

    def _open(
        user_id: str = "alice",
        session_id: str = "s1",
        *,
        vector: bool = False,
        embed_model: Any = None,
        profile_kwargs: Optional[dict] = None,
        **kwargs: Any,
    ) -> ComposableMemory:
        store = SQLiteStore(path)
        sources: list[Any] = []
        if vector:
            sources.append(default_vector_source(store, path, embed_model))
        sources.append(default_profile_source(store, **(profile_kwargs or {})))
        memory = ComposableMemory.from_defaults(
            user_id=user_id, session_id=session_id, path=path,
            secondary_memory_sources=sources, **kwargs,
        )
        opened.extend([memory, store])
        return memory

    yield _open
    for item in opened:
        item.close()


def row_count(store: SQLiteStore) -> int:
    return int(store.query("count", "SELECT COUNT(*) FROM profile_fields")[0][0])


def block_lines(memory: ComposableMemory, input: Optional[str] = None) -> list[str]:
    memory.get(input)
    return memory.last_block.text.splitlines()


# --------------------------------------------------------------------------- updates and history


def test_newer_value_wins_and_the_old_one_stays_in_history(profile: ProfileSource) -> None:
    profile.set_field("diet", "vegetarian", ALICE, message_ids=["m1"])
    s2 = Scope(user_id="alice", session_id="s2")
    [change] = profile.set_field("diet", "vegan", s2, message_ids=["m7", "m8"])

    assert profile.get_profile(ALICE) == {"diet": "vegan"}
    first, second = profile.history("diet", ALICE)
    assert (first.value, first.op, first.session_id, first.message_ids) == (
        "vegetarian", "set", "s1", ["m1"],
    )
    assert first.superseded_at == second.created_at and not first.current
    assert (second.value, second.session_id, second.message_ids) == ("vegan", "s2", ["m7", "m8"])
    assert second.current and second.superseded_at is None
    assert change == second
    # Setting a field to the value it has writes nothing.
    assert profile.set_field("diet", "vegan", ALICE) == []
    assert len(profile.history("diet", ALICE)) == 2


def test_merge_patch_merges_objects_field_by_field_and_null_removes(profile: ProfileSource) -> None:
    profile.update_profile({"name": "Alice", "travel": {"seat": "window", "meal": "veg"}}, ALICE)
    profile.update_profile({"travel": {"seat": "aisle"}, "home": {}}, ALICE)
    assert profile.get_profile(ALICE) == {
        "name": "Alice", "travel": {"seat": "aisle", "meal": "veg"},
    }
    profile.update_profile({"travel": {"meal": None}}, ALICE)
    assert profile.get_profile(ALICE) == {"name": "Alice", "travel": {"seat": "aisle"}}
    # set_field with an object replaces the whole object; a scalar becomes an object.
    profile.set_field("travel", {"class": "economy"}, ALICE)
    profile.set_field("name", "Alice Smith", ALICE)
    profile.set_field("name.nickname", "Al", ALICE)
    assert profile.get_profile(ALICE) == {"travel": {"class": "economy"}, "name": {"nickname": "Al"}}
    assert [c.value for c in profile.history("name", ALICE)] == ["Alice", "Alice Smith", "Al"]


def test_list_fields_append_and_remove_items(profile: ProfileSource) -> None:
    profile.append("allergies", "peanuts", ALICE)
    profile.append("allergies", "shellfish", ALICE)
    assert profile.append("allergies", "peanuts", ALICE) == []  # already there
    profile.remove_item("allergies", "peanuts", ALICE)
    assert profile.get_profile(ALICE) == {"allergies": ["shellfish"]}
    assert [(c.op, c.value) for c in profile.history("allergies", ALICE)] == [
        ("append", ["peanuts"]), ("append", ["peanuts", "shellfish"]), ("remove", ["shellfish"]),
    ]
    with pytest.raises(ProfileUpdateError, match=r"allergies\.0: 'allergies' is a list"):
        profile.set_field("allergies.0", "milk", ALICE)
    profile.set_field("diet", "vegan", ALICE)
    with pytest.raises(ProfileUpdateError, match="diet: is a string, not a list"):
        profile.append("diet", "fish", ALICE)


def test_an_invalid_update_is_rejected_whole_and_names_every_problem(
    profile: ProfileSource, store: SQLiteStore
) -> None:
    profile.update_profile({"diet": "vegetarian", "city": "Lisbon"}, ALICE)
    before, rows = profile.get_profile(ALICE), row_count(store)

    with pytest.raises(ProfileUpdateError) as caught:
        profile.update_profile(
            [
                {"op": "set", "path": "city", "value": "Porto"},  # valid on its own
                {"op": "replace", "path": "diet", "value": "vegan"},
                {"op": "set", "path": "favourite food", "value": "pizza"},
                {"op": "set", "path": "mood", "value": {1, 2}},
                {"op": "append", "path": "city", "value": "Faro"},
                {"path": "diet"},
            ],
            ALICE,
        )
    problems = caught.value.problems
    assert [where for where, _ in problems] == ["diet", "favourite food", "mood", "city", "diet"]
    assert "op: Input should be 'set', 'append' or 'remove'" in problems[0][1]
    assert "invalid path segment 'favourite food'" in problems[1][1]
    assert "not JSON" in problems[2][1]
    assert "is a string, not a list" in problems[3][1]
    assert "op: Field required" in problems[4][1]
    assert "nothing was written" in str(caught.value)
    # Nothing already stored is lost, and nothing of the update was written.
    assert profile.get_profile(ALICE) == before and row_count(store) == rows

    for bad in ("diet", 42):
        with pytest.raises(ProfileUpdateError, match="list of operations or a dict"):
            profile.update_profile(bad, ALICE)  # type: ignore[arg-type]
    with pytest.raises(ProfileUpdateError, match="append needs a value"):
        profile.update_profile([ProfileOp(op="append", path="likes")], ALICE)
    with pytest.raises(ScopeError):
        profile.set_field("diet", "vegan", Scope(user_id=None))


def test_null_is_never_stored(profile: ProfileSource) -> None:
    with pytest.raises(ProfileUpdateError, match="set needs a value"):
        profile.set_field("diet", None, ALICE)
    profile.set_field("travel", {"seat": "aisle", "meal": None}, ALICE)
    assert profile.get_profile(ALICE) == {"travel": {"seat": "aisle"}}
    # "remove" with an empty value, as LLMs often send it, removes the field.
    profile.update_profile([{"op": "remove", "path": "travel.seat", "value": ""}], ALICE)
    assert profile.get_profile(ALICE) == {}


# --------------------------------------------------------------------------- schema


def test_schema_validates_updates_naming_the_field_and_the_problem(store: SQLiteStore) -> None:
    profile = default_profile_source(store, schema=UserProfile)
    # Required fields may be missing: a profile fills up over time.
    profile.update_profile({"diet": "vegetarian", "travel": {"seat": "window"}}, ALICE)
    profile.update_profile({"notes": {"coffee": "black"}}, ALICE)

    cases = {
        "age": ({"age": "forty-two"}, "Input should be a valid integer"),
        "travel.seat": ({"travel": {"seat": "middle"}}, "Input should be 'window' or 'aisle'"),
        "nickname": ({"nickname": "Al"}, "unknown field 'nickname': the profile has the fields name"),
        "travel.legroom": ({"travel": {"legroom": "extra"}}, "unknown field 'legroom'"),
        "diet.style": ({"diet": {"style": "vegan"}}, "'diet' is a field of type Optional[str]"),
        "allergies": ({"allergies": "peanuts"}, "Input should be a valid array"),
    }
    for field_path, (update, message) in cases.items():
        with pytest.raises(ProfileUpdateError) as caught:
            profile.update_profile(update, ALICE)
        [(where, problem)] = caught.value.problems
        assert where == field_path and message in problem, caught.value
    with pytest.raises(ProfileUpdateError, match="age: Input should be greater than or equal to 0"):
        profile.set_field("age", -3, ALICE)
    # Strict: what is stored is exactly what the schema accepts.
    with pytest.raises(ProfileUpdateError, match=r'age: Input should be a valid integer \(got "42"\)'):
        profile.set_field("age", "42", ALICE)

    profile.set_field("age", 42, ALICE)
    profile.append("allergies", "peanuts", ALICE)
    profile.set_field("name", "Alice", ALICE)
    expected = {
        "diet": "vegetarian", "travel": {"seat": "window"}, "notes": {"coffee": "black"},
        "age": 42, "allergies": ["peanuts"], "name": "Alice",
    }
    assert profile.get_profile(ALICE) == expected
    assert UserProfile.model_validate(profile.get_profile(ALICE)).travel.seat is Seat.window
    # A required field can be removed again; the schema only checks what is there.
    profile.remove_field("name", ALICE)
    profile.remove_field("travel.seat", ALICE)
    assert "name" not in profile.get_profile(ALICE) and "travel" not in profile.get_profile(ALICE)


def test_stored_fields_that_break_a_newer_schema_do_not_block_other_updates(
    store: SQLiteStore,
) -> None:
    default_profile_source(store).set_field("age", "unknown", ALICE)  # written before the schema existed
    profile = default_profile_source(store, schema=UserProfile)
    profile.set_field("diet", "vegan", ALICE)
    assert profile.get_profile(ALICE) == {"age": "unknown", "diet": "vegan"}
    with pytest.raises(ProfileUpdateError, match="age"):
        profile.set_field("age", "still unknown", ALICE)


# --------------------------------------------------------------------------- the memory block


def test_the_profile_is_in_every_block_whatever_the_query(open_memory) -> None:
    memory = open_memory()
    profile = memory.source("profile")
    profile.update_profile({"diet": "vegetarian", "travel": {"seat": "window"}}, memory.scope)
    # No user message at all, an unrelated query, a related one: always there.
    for query in (None, "what is the capital of Peru?", "dinner"):
        lines = block_lines(memory, query)
        assert '- [profile] "travel.seat: window"' in lines, lines
        assert '- [profile] "diet: vegetarian"' in lines, lines
    assert memory.get()[0].role == MessageRole.SYSTEM


def test_tight_budget_keeps_important_then_recent_fields_and_says_what_was_left_out(
    open_memory,
) -> None:
    memory = open_memory(profile_kwargs={"schema": UserProfile, "max_tokens": 60})
    profile = memory.source("profile")
    scope = memory.scope
    profile.set_field("name", "Alice", scope)  # oldest, but most important
    for i in range(12):
        profile.set_field(f"notes.n{i:02d}", f"note number {i} about something", scope)
    profile.append("allergies", "peanuts", scope)

    records = profile.retrieve("", scope, 5)
    texts = [r.text for r in records]
    assert texts[:2] == ["name: Alice", "allergies: peanuts"]  # importance 10, then 8
    assert texts[2] == "notes.n11: note number 11 about something"  # then the most recent
    assert texts[-1].startswith("(") and "more profile fields left out" in texts[-1]
    shown_notes = [t for t in texts if t.startswith("notes.")]
    left_out = records[-1].metadata["left_out"]
    assert len(shown_notes) + left_out == 12 and left_out > 0
    assert f"({left_out} more profile fields left out for the token budget)" == texts[-1]
    # Most recent notes first: the ones left out are the oldest.
    assert shown_notes == [f"notes.n{i:02d}: note number {i} about something"
                           for i in range(11, 11 - len(shown_notes), -1)]

    lines = block_lines(memory)
    assert lines[2] == '- [profile] "name: Alice"'
    assert any("more profile fields left out" in line for line in lines)
    assert memory.last_block.token_count <= memory.memory_token_limit

    # The memory's own budget is a hard limit too: the block never exceeds it and
    # what is cut off is counted.
    tight = open_memory(memory_token_limit=45, profile_kwargs={"schema": UserProfile})
    tight.get()
    assert tight.last_block.token_count <= 45
    assert tight.last_block.records[0].text == "name: Alice"
    assert tight.last_block.dropped_for_budget > 0


def test_importance_argument_overrides_the_schema(store: SQLiteStore) -> None:
    profile = default_profile_source(store, schema=UserProfile, importance={"travel": 20, "name": 1})
    profile.update_profile({"name": "Alice", "travel": {"seat": "aisle"}, "diet": "vegan"}, ALICE)
    assert [r.text for r in profile.retrieve("", ALICE, 10)] == [
        "travel.seat: aisle", "name: Alice", "diet: vegan",
    ]
    assert profile.importance_of("travel.seat") == 20 and profile.importance_of("allergies") == 8


# --------------------------------------------------------------------------- forgetting


def test_remove_a_field_with_or_without_its_history(profile: ProfileSource) -> None:
    profile.update_profile({"diet": "vegan", "city": "Lisbon", "travel": {"seat": "aisle"}}, ALICE)
    profile.set_field("city", "Porto", ALICE)

    [tombstone] = profile.remove_field("city", ALICE)
    assert tombstone.removed and tombstone.op == "remove"
    assert "city" not in profile.get_profile(ALICE)
    assert [(c.value, c.removed) for c in profile.history("city", ALICE)] == [
        ("Lisbon", False), ("Porto", False), (None, True),
    ]
    assert profile.remove_field("city", ALICE) == []  # nothing left to remove

    profile.remove_field("travel", ALICE, with_history=True)
    assert profile.history("travel", ALICE) == []
    assert profile.get_profile(ALICE) == {"diet": "vegan"}
    assert [r.text for r in profile.retrieve("", ALICE, 10)] == ["diet: vegan"]


def test_forget_the_whole_profile_keeping_history_or_not(profile: ProfileSource) -> None:
    profile.update_profile({"diet": "vegan", "travel": {"seat": "aisle"}}, ALICE)
    profile.update_profile({"diet": "omnivore"}, BOB)

    profile.forget(ALICE, with_history=False)
    assert profile.get_profile(ALICE) == {} and profile.retrieve("", ALICE, 10) == []
    assert {c.path for c in profile.history(None, ALICE) if c.removed} == {"diet", "travel"}

    profile.forget(ALICE)  # "forget me": history too
    assert profile.history(None, ALICE) == []
    assert profile.get_profile(BOB) == {"diet": "omnivore"}  # nobody else is touched


def test_memory_reset_keeps_the_profile_and_the_source_reset_clears_it(open_memory) -> None:
    memory = open_memory()
    memory.profile.set_field("diet", "vegan", memory.scope)
    memory.reset()  # a new chat: the profile is long-term memory
    assert memory.profile.get_profile(memory.scope) == {"diet": "vegan"}
    memory.profile.reset(memory.scope)  # clearing it is explicit
    assert memory.profile.history(None, memory.scope) == []
    assert memory.get() == []


# --------------------------------------------------------------------------- scope and storage


def test_profiles_are_isolated_per_user_and_tenant(profile: ProfileSource) -> None:
    other_tenant = Scope(user_id="alice", tenant_id="other-app")
    profile.set_field("diet", "vegan", ALICE)
    profile.set_field("diet", "carnivore", BOB)
    profile.set_field("diet", "keto", other_tenant)
    profile.remove_field("diet", BOB, with_history=True)

    assert profile.get_profile(ALICE) == {"diet": "vegan"}
    assert profile.get_profile(other_tenant) == {"diet": "keto"}
    assert profile.get_profile(BOB) == {} and profile.history("diet", BOB) == []
    assert [r.user_id for r in profile.retrieve("", ALICE, 5)] == ["alice"]
    assert [c.value for c in profile.history("diet", ALICE)] == ["vegan"]
    with pytest.raises(ScopeError):
        profile.retrieve("", Scope(), 5)


def test_a_profile_source_on_something_other_than_a_store_says_what_to_pass(
    tmp_path: Path,
) -> None:
    # A path is the most likely mistake: the memory takes one, the source takes the port;
    # a bare store too (before 0.x the source wrapped one itself; config does that now).
    with pytest.raises(TypeError, match=r"not str .*pass SQLiteProfileRows\(SQLiteStore\('./memory'\)\)"):
        ProfileSource(str(tmp_path / "memory"))  # type: ignore[arg-type]
    store = SQLiteStore(tmp_path / "memory")
    try:
        with pytest.raises(TypeError, match=r"not SQLiteStore .*default_profile_source\(store\)"):
            ProfileSource(store)
    finally:
        store.close()


def test_a_write_inside_an_open_store_transaction_joins_it(
    profile: ProfileSource, store: SQLiteStore
) -> None:
    # The memory writes a batch to every source all or nothing this way.
    with pytest.raises(RuntimeError, match="after the profile write"):
        with store.transaction("a batch"):
            profile.set_field("diet", "vegan", ALICE)
            raise RuntimeError("failed after the profile write")
    assert profile.get_profile(ALICE) == {} and row_count(store) == 0


def test_profile_persists_across_processes(tmp_path: Path) -> None:
    path = tmp_path / "memory"
    script = textwrap.dedent(
        f"""
        from llama_memory.memory.wiring import default_profile_source
        from llama_memory.storage.sqlite import SQLiteStore
        from llama_memory.core.types import Scope
        store = SQLiteStore({str(path)!r})
        profile = default_profile_source(store)
        scope = Scope(user_id="alice", session_id="other-process")
        profile.update_profile({{"diet": "vegetarian", "travel": {{"seat": "window"}}}}, scope)
        profile.set_field("diet", "vegan", scope, message_ids=["m42"])
        store.close()
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)

    store = SQLiteStore(path)
    try:
        profile = default_profile_source(store)  # the schema exists: opening migrates nothing
        assert profile.get_profile(ALICE) == {"diet": "vegan", "travel": {"seat": "window"}}
        last = profile.history("diet", ALICE)[-1]
        assert (last.session_id, last.message_ids) == ("other-process", ["m42"])
    finally:
        store.close()


def test_concurrent_writers_on_one_file_newer_wins(tmp_path: Path) -> None:
    first, second = SQLiteStore(tmp_path / "m"), SQLiteStore(tmp_path / "m")
    try:
        a, b = default_profile_source(first), default_profile_source(second)
        a.update_profile({"diet": "vegetarian", "city": "Lisbon"}, ALICE)
        b.set_field("diet", "vegan", ALICE)  # b read the state a committed
        a.append("likes", "jazz", ALICE)
        assert a.get_profile(ALICE) == b.get_profile(ALICE) == {
            "diet": "vegan", "city": "Lisbon", "likes": ["jazz"],
        }
        assert [c.current for c in b.history("diet", ALICE)] == [False, True]
    finally:
        first.close()
        second.close()


# --------------------------------------------------------------------------- tools


def test_tools_are_bound_to_the_memory_user(open_memory) -> None:
    memory = open_memory(user_id="alice", profile_kwargs={"schema": UserProfile})
    bob = open_memory(user_id="bob")
    update, get, _instructions = memory.tools()
    assert (update.metadata.name, get.metadata.name) == ("update_profile", "get_profile")
    assert "travel.seat" in update.metadata.description  # the schema's fields are listed
    # What an LLM integration sends as the tool's parameters: operations only, no user.
    parameters = update.metadata.get_parameters_dict()
    assert list(parameters["properties"]) == ["operations"]
    assert "user_id" not in json.dumps(parameters)
    assert get.metadata.get_parameters_dict()["properties"] == {}

    output = update.call(operations=[
        {"op": "set", "path": "diet", "value": "vegetarian"},
        {"op": "append", "path": "allergies", "value": "peanuts"},
    ])
    assert "diet = vegetarian" in str(output) and "allergies = peanuts" in str(output)
    assert json.loads(str(get.call())) == {"diet": "vegetarian", "allergies": ["peanuts"]}
    assert "Nothing changed" in str(update.call(operations=[
        {"op": "set", "path": "diet", "value": "vegetarian"}
    ]))
    with pytest.raises(ProfileUpdateError, match="unknown field 'seat_preference'"):
        update.call(operations=[{"op": "set", "path": "seat_preference", "value": "window"}])
    assert bob.source("profile").get_profile(bob.scope) == {}
    assert [r.user_id for r in memory.source("profile").retrieve("", memory.scope, 9)] == ["alice"] * 2


# --------------------------------------------------------------------------- extraction


def _ops_reply(*ops: dict) -> ToolCallReply:
    """What a function-calling LLM answers to a pass whose one part is the profile."""
    return pass_answer(profile=list(ops))


def test_extract_on_demand_applies_the_llm_operations_with_provenance(open_memory) -> None:
    memory = open_memory()
    memory.source("profile").set_field("city", "Lisbon", memory.scope)
    memory.put_messages([
        user("I became vegetarian last month.", message_id="u1"),
        assistant("Good to know!", message_id="a1"),
        user("And I moved to Porto.", message_id="u2"),
    ])
    llm = ScriptedLLM([_ops_reply(
        {"op": "set", "path": "diet", "value": "vegetarian"},
        {"op": "set", "path": "city", "value": "Porto"},
    )])
    memory.extract(llm=llm)

    profile = memory.source("profile")
    assert profile.get_profile(memory.scope) == {"city": "Porto", "diet": "vegetarian"}
    change = profile.history("diet", memory.scope)[-1]
    assert (change.session_id, change.message_ids) == ("s1", ["u1", "a1", "u2"])
    # The LLM was offered the output class as a tool and saw the profile and the conversation.
    [call] = llm.calls
    assert call.tool_names == ["FormationPass"]
    prompt = call.text()
    assert '"city": "Lisbon"' in prompt and 'user: "And I moved to Porto."' in prompt
    assert 'assistant: "Good to know!"' in prompt


def test_extract_every_n_user_turns(open_memory) -> None:
    llm = ScriptedLLM([_ops_reply({"op": "append", "path": "likes", "value": "jazz"})])
    memory = open_memory(llm=llm, extract_every=2)
    memory.put(user("I like jazz."))
    memory.put(assistant("Nice."))
    assert llm.calls == []
    memory.put(user("Especially Coltrane."))
    memory.flush()  # the pass runs in the background; flush waits for it
    assert len(llm.calls) == 1
    assert memory.source("profile").get_profile(memory.scope) == {"likes": ["jazz"]}


def test_extract_with_a_text_llm_parses_json(profile: ProfileSource) -> None:
    llm = ScriptedLLM(
        ['{"profile": [{"op": "set", "path": "travel.seat", "value": "aisle"}]}'],
        function_calling=False,
    )
    profile.extract([user("Aisle seats for me, always.")], llm, ALICE)
    assert profile.get_profile(ALICE) == {"travel": {"seat": "aisle"}}


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ("I think the user is vegetarian.", "did not produce a valid FormationPass"),
        (pass_answer(profile=[{"op": "upsert", "path": "diet"}]), "'profile' answer was rejected.*op"),
        (ToolCallReply("SomethingElse", {}), "did not produce a valid FormationPass"),
        (_ops_reply({"op": "set", "path": "diet", "value": "vegan"},
                    {"op": "set", "path": "nickname", "value": "Al"}),
         "operations were rejected.*nickname: unknown field"),
    ],
)
def test_malformed_or_invalid_extraction_is_rejected_whole(
    store: SQLiteStore, reply: Any, message: str
) -> None:
    profile = default_profile_source(store, schema=UserProfile)
    profile.set_field("diet", "vegetarian", ALICE)
    rows = row_count(store)
    with pytest.raises(ExtractionError, match=message):
        profile.extract([user("Call me Al; I am vegan now.")], ScriptedLLM([reply]), ALICE)
    assert profile.get_profile(ALICE) == {"diet": "vegetarian"} and row_count(store) == rows


def test_no_llm_call_without_anything_the_user_said(profile: ProfileSource) -> None:
    llm = ScriptedLLM([])  # any call would raise
    profile.extract([assistant("Hello! How can I help?")], llm, ALICE)
    profile.extract([], llm, ALICE)
    assert llm.calls == [] and profile.get_profile(ALICE) == {}


# --------------------------------------------------------------------------- a real agent


async def test_preferences_told_in_session_1_shape_the_prompt_of_session_2(
    open_memory, embed_model
) -> None:
    system_prompt = "You are a travel assistant."
    first = open_memory(session_id="s1", vector=True, embed_model=embed_model)
    llm = ScriptedLLM([
        ToolCallReply("update_profile", {"operations": [
            {"op": "set", "path": "diet", "value": "vegetarian"},
            {"op": "set", "path": "travel.seat", "value": "window"},
        ]}),
        "Noted: vegetarian meals and window seats.",
    ])
    agent = FunctionAgent(llm=llm, tools=first.tools(), system_prompt=system_prompt)
    await agent.run(user_msg="I'm vegetarian and I always want a window seat.", memory=first)
    tool_results = [m for m in llm.calls[1].messages if m.role == MessageRole.TOOL]
    assert "Profile updated" in message_plain_text(tool_results[0])

    second = open_memory(session_id="s2", vector=True, embed_model=embed_model)
    assert second.get_all() == []
    llm2 = ScriptedLLM(["A vegetarian meal and a window seat are booked."])
    agent2 = FunctionAgent(llm=llm2, tools=second.tools(), system_prompt=system_prompt)
    await agent2.run(user_msg="Book me a flight to Rome.", memory=second)

    first_call = llm2.calls[0]
    systems = [message_plain_text(m) for m in first_call.messages if m.role == MessageRole.SYSTEM]
    block = next(t for t in systems if "<memory>" in t)
    assert '- [profile] "travel.seat: window"' in block
    assert '- [profile] "diet: vegetarian"' in block
    # The profile is served before the vector source's records.
    lines = [line for line in block.splitlines() if line.startswith("- [")]
    assert lines[0].startswith("- [profile]") and lines[1].startswith("- [profile]")
    assert set(first_call.tool_names) == {"update_profile", "get_profile", "update_instructions"}

    # Another user's session 2 sees none of it.
    carol = open_memory(user_id="carol", session_id="c2", vector=True, embed_model=embed_model)
    llm3 = ScriptedLLM(["Done."])
    await FunctionAgent(llm=llm3, system_prompt=system_prompt).run(
        user_msg="Book me a flight to Rome.", memory=carol
    )
    assert "vegetarian" not in llm3.calls[0].text()


# --------------------------------------------------------------------------- wiring (from_defaults)


def test_from_defaults_wires_the_profile(tmp_path: Path, embed_model) -> None:
    memory = ComposableMemory.from_defaults(user_id="alice", path=tmp_path, embed_model=embed_model)
    assert [s.name for s in memory.sources] == ["vector", "profile"]
    memory.source("profile").set_field("diet", "vegan", memory.scope)
    assert '- [profile] "diet: vegan"' in memory.get()[0].content
    restored = ComposableMemory.from_dict(memory.to_dict(), embed_model=embed_model)
    assert restored.source("profile").get_profile(restored.scope) == {"diet": "vegan"}
    memory.close()
    restored.close()

    assert ComposableMemory.from_defaults(user_id="alice", secondary_memory_sources=[]).sources == []
    typed = ComposableMemory.from_defaults(
        user_id="alice", secondary_memory_sources=[], profile=UserProfile
    )
    with pytest.raises(ProfileUpdateError, match="unknown field"):
        typed.source("profile").set_field("nickname", "Al", typed.scope)
    off = ComposableMemory.from_defaults(user_id="alice", embed_model=embed_model, profile=False)
    assert [s.name for s in off.sources] == ["vector"]
    again = ComposableMemory.from_dict(off.to_dict(), embed_model=embed_model)
    assert [s.name for s in again.sources] == ["vector"]
    with pytest.raises(TypeError, match="profile takes"):
        ComposableMemory.from_defaults(user_id="alice", profile="yes")


def test_the_block_says_how_many_records_did_not_fit() -> None:
    memory = ComposableMemory.from_defaults(
        user_id="alice", secondary_memory_sources=[], profile=True, memory_token_limit=70
    )
    for i in range(10):
        memory.source("profile").set_field(f"note{i}", f"fact number {i}", memory.scope)
    memory.get()
    block = memory.last_block
    n = block.dropped_for_budget
    assert n > 0 and block.token_count <= 70
    assert f"({n} more records left out for the token budget: {n} profile)" in block.text
