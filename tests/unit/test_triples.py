"""Knowledge-triple memory on real storage: SQLite files, embedded Chroma and the
real offline embedding; extraction and agents driven by the scripted LLM.

Covers the update rules (dedup, supersede chains, history), retrieval (dense,
lexical, entity neighbourhood), strict per-user isolation, malformed input and
LLM output (rejected whole), tools, persistence across processes, the graph
export, and the LangGraph tutorial's agent scenario through ComposableMemory.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ChatMessage, MessageRole

from helpers import assistant, user
from llama_memory import ComposableMemory, ExtractionError, Scope, ScopeError
from llama_memory.memory.wiring import default_triple_source, default_vector_source
from llama_memory.sources.triples import (
    KnowledgeTriple,
    TripleError,
    TripleSource,
    normalize_entity,
    normalize_predicate,
)
from llama_memory.storage.sqlite import SQLiteStore
from llama_memory.testing import pass_answer
from scripted_llm import ScriptedLLM, ToolCallReply, message_plain_text

ALICE = Scope(user_id="alice", session_id="s1")
BOB = Scope(user_id="bob", session_id="b1")


def epoch(day: str) -> float:
    return datetime.fromisoformat(day).replace(tzinfo=timezone.utc).timestamp()


# --------------------------------------------------------------------------- fixtures


@pytest.fixture
def open_source(tmp_path: Path, embed_model):
    """Factory of TripleSources on one memory directory (each with its own store
    connection, as separate processes would have); closes everything at teardown."""
    opened: list[tuple[TripleSource, SQLiteStore]] = []

    def _open(**kwargs: Any) -> TripleSource:
        store = SQLiteStore(tmp_path)
        source = default_triple_source(store, tmp_path, embed_model, **kwargs)
        opened.append((source, store))
        return source

    yield _open
    for source, store in opened:
        source.close()
        store.close()


@pytest.fixture
def source(open_source) -> TripleSource:
    return open_source()


@pytest.fixture
def open_memory(tmp_path: Path, embed_model):
    """ComposableMemory with the vector and triple sources, as the issue prescribes."""
    opened: list[tuple[ComposableMemory, SQLiteStore]] = []

    def _open(user_id: str = "alice", session_id: str = "s1", **kwargs: Any) -> ComposableMemory:
        store = SQLiteStore(tmp_path)
        memory = ComposableMemory.from_defaults(
            user_id=user_id,
            session_id=session_id,
            path=tmp_path,
            embed_model=embed_model,
            secondary_memory_sources=[
                default_vector_source(store, tmp_path, embed_model),
                default_triple_source(store, tmp_path, embed_model),
            ],
            **kwargs,
        )
        opened.append((memory, store))
        return memory

    yield _open
    for memory, store in opened:
        memory.close()
        store.close()


def texts(records) -> list[str]:
    return [r.text for r in records]


# --------------------------------------------------------------------------- normalisation


def test_predicates_meet_across_case_separators_tense_and_plural() -> None:
    forms = ["lives in", "Lives_In", "livesIn", "lived in", "is living in", "LIVES IN"]
    assert {normalize_predicate(f) for f in forms} == {normalize_predicate("lives in")}
    assert normalize_predicate("has friends") == normalize_predicate("has a friend")
    assert normalize_predicate("likes") == normalize_predicate("liked")
    assert normalize_predicate("is married to") == normalize_predicate("married to")
    # ... but different relations stay apart.
    assert normalize_predicate("likes") != normalize_predicate("lives in")
    assert normalize_predicate("works at") != normalize_predicate("works for")


def test_entities_fold_case_whitespace_possessive_and_self_names() -> None:
    assert normalize_entity("  New   York ") == normalize_entity("new york") == "new york"
    assert normalize_entity("John's") == normalize_entity("JOHN")
    assert normalize_entity("I") == normalize_entity("me") == normalize_entity("User") == "user"
    assert normalize_entity("Johnny") != normalize_entity("John")


# --------------------------------------------------------------------------- writing


def test_identical_triple_is_stored_once_and_its_provenance_grows(source: TripleSource) -> None:
    first = source.add_triples(
        [("John", "likes", "pizza")], ALICE, event_time="2023-05-08", message_ids=["m1"]
    )
    again = source.add_triples(
        [{"subject": " john ", "predicate": "LIKES", "object": "Pizza"}],
        Scope(user_id="alice", session_id="s2"),
        message_ids=["m7"],
    )
    [stored] = source.triples(ALICE, include_history=True)
    assert first[0].id == again[0].id == stored.id
    assert (stored.subject, stored.predicate, stored.object) == ("John", "likes", "pizza")
    assert stored.mentions == 2
    assert stored.session_ids == ("s1", "s2")
    assert stored.message_ids == ("m1", "m7")
    assert stored.valid_from == epoch("2023-05-08") and stored.current
    assert texts(source.search("pizza", ALICE)) == ["John — likes — pizza (since 2023-05-08)"]
    # Two statements in one batch: one triple too.
    source.add_triples([("Ann", "likes", "tea"), ("ann", "liked", "tea")], ALICE)
    assert source.count(ALICE) == 2


def test_functional_predicate_supersedes_and_keeps_the_chain(source: TripleSource) -> None:
    source.add_triples([KnowledgeTriple("Alice", "lives in", "Paris")], ALICE, event_time="2020-01-01")
    source.add_triples([("alice", "lives_in", "London")], ALICE, event_time="2022-03-01")
    source.add_triples([("Alice", "moved to", "Berlin")], ALICE)  # another predicate: no effect
    source.add_triples([("Alice", "lived in", "Paris")], ALICE, event_time="2024-06-01")

    chain = source.history("ALICE", "lives in", ALICE)
    assert [t.object for t in chain] == ["Paris", "London", "Paris"]
    assert [t.valid_from for t in chain] == [epoch(d) for d in ("2020-01-01", "2022-03-01", "2024-06-01")]
    assert [t.valid_to for t in chain] == [epoch("2022-03-01"), epoch("2024-06-01"), None]
    assert [t.superseded_by for t in chain] == [chain[1].id, chain[2].id, None]
    assert chain[0].id != chain[2].id  # living in Paris again is a new interval
    # Displays use the first spelling of the entity and predicate.
    assert chain[1].render() == "Alice — lives in — London (2022-03-01 to 2024-06-01)"

    # Retrieval shows only the current value unless history is asked for.
    current = texts(source.search("Where does Alice live?", ALICE))
    assert "Alice — lives in — Paris (since 2024-06-01)" in current
    assert not any("London" in t for t in current)
    with_history = source.search("Where does Alice live?", ALICE, include_history=True)
    assert "Alice — lives in — London (2022-03-01 to 2024-06-01)" in texts(with_history)
    assert {r.metadata["current"] for r in with_history} == {True, False}
    assert [t.object for t in source.triples(ALICE, predicate="lives in")] == ["Paris"]
    assert source.count(ALICE, include_history=True) == 4


def test_other_predicates_accumulate_and_declared_ones_supersede(open_source) -> None:
    source = open_source(functional_predicates=["favourite colour"])
    source.add_triples([("Alice", "likes", "pizza"), ("Alice", "likes", "sushi")], ALICE)
    assert sorted(t.object for t in source.triples(ALICE)) == ["pizza", "sushi"]

    source.add_triples([("Alice", "favourite colour", "teal")], ALICE, event_time="2023-01-01")
    source.add_triples([("Alice", "favourite colours", "red")], ALICE, event_time="2023-02-01")
    assert [t.object for t in source.triples(ALICE, predicate="favourite colour")] == ["red"]
    # The custom list replaced the defaults: "lives in" now holds several values.
    source.add_triples([("Alice", "lives in", "Rome"), ("Alice", "lives in", "Oslo")], ALICE)
    assert len(source.triples(ALICE, predicate="lives in")) == 2
    source.declare_functional("age")
    source.add_triples([("Alice", "age", 30)], ALICE, event_time="2023-01-01")
    source.add_triples([("Alice", "age", 31)], ALICE, event_time="2024-01-01")
    assert [t.object for t in source.history("Alice", "age", ALICE)] == ["30", "31"]
    assert source.is_functional("Age") and not source.is_functional("likes")


def test_a_statement_dated_in_the_past_slots_into_history(source: TripleSource) -> None:
    source.add_triples([("Bo", "works at", "Acme")], ALICE, event_time="2020-01-01")
    source.add_triples([("Bo", "works at", "Globex")], ALICE, event_time="2023-01-01")
    # Learnt late: Bo worked at Initech in 2021. It must not override the newer Globex.
    source.add_triples([("Bo", "works at", "Initech")], ALICE, event_time="2021-06-01")
    chain = source.history("Bo", "works at", ALICE)
    assert [t.object for t in chain] == ["Acme", "Initech", "Globex"]
    assert [t.valid_to for t in chain] == [epoch("2021-06-01"), epoch("2023-01-01"), None]
    assert [t.superseded_by for t in chain] == [chain[1].id, chain[2].id, None]
    # Repeating a past value inside its interval only adds a mention.
    source.add_triples([("Bo", "works at", "Acme")], ALICE, event_time="2020-08-01")
    assert [t.mentions for t in source.history("Bo", "works at", ALICE)] == [2, 1, 1]


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ([("John", "", "pizza")], r"triples\[0\]: 'predicate' is empty"),
        ([("John", "likes", "pizza"), ("   ", "likes", "tea")], r"triples\[1\]: 'subject' is empty"),
        ([("John", "likes", None)], r"triples\[0\]: 'object' must be a string, got NoneType"),
        ([("John", "likes", ["pizza"])], r"'object' must be a string, got list"),
        ([("John", "likes", True)], r"'object' must be a string, got bool"),
        ([("John", "likes")], r"a sequence must have 3 items"),
        ([{"subject": "John", "predicate": "likes"}], r"missing 'object'"),
        ([42], r"expected a KnowledgeTriple, a mapping .* got int"),
        ([("John", "likes", "x" * 400)], r"400 characters long"),
        ([("John", "likes", "?!")], r"'object' has no letters or digits"),
        # One triple not in a list: said as such, not as a bad first item ("got str 'John'").
        (("John", "likes", "pizza"), r"^expected a list of triples, got tuple: .*\(wrap a single triple in a list\)$"),
        ({"subject": "John", "predicate": "likes", "object": "pizza"}, r"expected a list of triples"),
    ],
)
def test_malformed_triples_are_refused_whole_and_nothing_is_lost(
    source: TripleSource, bad: Any, message: str
) -> None:
    source.add_triples([("Alice", "lives in", "Paris")], ALICE)
    with pytest.raises(TripleError, match=message):
        source.add_triples(bad, ALICE)
    # The good triple of a mixed batch was not written; what was stored is intact.
    assert [t.text() for t in source.triples(ALICE, include_history=True)] == [
        "Alice — lives in — Paris"
    ]


def test_a_user_is_required(source: TripleSource) -> None:
    with pytest.raises(ScopeError, match="user_id"):
        source.add_triples([("a", "b", "c")], Scope())
    with pytest.raises(ScopeError):
        source.search("a", Scope())
    with pytest.raises(ScopeError):
        source.tools(Scope())


# --------------------------------------------------------------------------- retrieval

FILLER = [
    ("Alice", "plays", "the cello"),
    ("Alice", "works at", "Globex"),
    ("Kim", "works as", "plumber"),
    ("Lee", "works as", "teacher"),
    ("Carol", "owns", "a red bicycle"),
    ("Dave", "studies", "astronomy"),
    ("Eve", "speaks", "Portuguese"),
    ("Frank", "collects", "stamps"),
    ("Grace", "runs", "a bakery"),
    ("Heidi", "visited", "Japan"),
    ("Ivan", "drives", "a taxi"),
    ("Judy", "grows", "tomatoes"),
]


def test_retrieval_fuses_meaning_words_and_the_named_entities(source: TripleSource) -> None:
    source.add_triples(FILLER + [("Alice", "has friend", "John"), ("John", "likes", "pizza")], ALICE)
    found = source.search("What food should I bring to John's party?", ALICE, k=3)
    assert set(texts(found)[:2]) == {
        t + f" (since {datetime.now(timezone.utc):%Y-%m-%d})"
        for t in ("John — likes — pizza", "Alice — has friend — John")
    }
    assert "entity" in found[0].metadata["matched_by"]
    assert found[0].score >= found[1].score >= found[2].score
    record = found[0]
    assert record.source == "triples" and record.user_id == "alice" and record.session_id == "s1"
    assert record.metadata["subject"] in {"John", "Alice"} and record.metadata["current"]

    # Words alone find a fact ("bicycle"), the entity alone finds a person's facts.
    [bike] = source.search("bicycle", ALICE, k=1)
    assert bike.text.startswith("Carol — owns — a red bicycle")
    assert bike.metadata["matched_by"] == ["dense", "lexical"]  # "bicycle" names no entity
    assert texts(source.search("Tell me about Ivan", ALICE, k=1))[0].startswith("Ivan — drives")
    assert source.search("", ALICE) == [] and source.search("   ", ALICE) == []


def test_two_hops_reach_a_fact_about_a_named_entitys_neighbour(open_source) -> None:
    source = open_source(hops=2)
    source.add_triples(FILLER + [("John", "has sister", "Mary"), ("Mary", "works as", "dentist")], ALICE)
    question = "What does John's sister do?"
    one = [r.text.split(" (")[0] for r in source.search(question, ALICE, k=3, hops=1)]
    assert one[0] == "John — has sister — Mary" and "Mary — works as — dentist" not in one
    two = source.search(question, ALICE, k=3)  # the source's default: hops=2
    assert [r.text.split(" (")[0] for r in two][:2] == [
        "John — has sister — Mary",
        "Mary — works as — dentist",
    ]
    assert two[1].metadata["matched_by"] == ["2-hop"]
    assert two[1].score < two[0].score


def test_users_are_strictly_isolated(source: TripleSource, embed_model, tmp_path: Path) -> None:
    source.add_triples([("John", "likes", "pizza")], ALICE)
    source.add_triples([("John", "likes", "durian"), ("Bob", "bank pin", "4321")], BOB)
    other_tenant = Scope(user_id="alice", tenant_id="acme")
    source.add_triples([("John", "likes", "kimchi")], other_tenant)

    everything = texts(source.search("John likes what? bank pin durian kimchi", ALICE, k=50))
    assert everything == [everything[0]] and "pizza" in everything[0]
    assert [t.object for t in source.triples(ALICE, include_history=True)] == ["pizza"]
    assert [t.object for t in source.history("John", "likes", BOB)] == ["durian"]
    assert [t.object for t in source.triples(other_tenant)] == ["kimchi"]
    assert set(source.to_networkx(ALICE).nodes) == {"john", "pizza"}
    [_, search_tool] = source.tools(ALICE)
    assert "durian" not in search_tool.call(query="durian").content

    # Resetting Alice leaves Bob (and Alice of another tenant) alone.
    source.reset(ALICE)
    assert source.search("John pizza", ALICE) == [] and source.count(ALICE, include_history=True) == 0
    assert texts(source.search("John", BOB, k=1))[0].startswith("John — likes — durian")
    assert source.count(other_tenant) == 1
    assert source.index.count("default", "bob") == 2


def test_persists_across_processes(tmp_path: Path, source: TripleSource) -> None:
    writer = textwrap.dedent(
        """
        import sys
        from llama_memory import Scope, default_embedding
        from llama_memory.memory.wiring import default_triple_source
        from llama_memory.storage.sqlite import SQLiteStore

        store = SQLiteStore(sys.argv[1])
        source = default_triple_source(store, sys.argv[1], default_embedding())
        alice = Scope(user_id="alice", session_id="s0")
        source.add_triples([("Alice", "lives in", "Paris")], alice, event_time="2020-01-01")
        source.add_triples([("Alice", "lives in", "Lisbon"), ("Alice", "has cat", "Tom")], alice,
                           event_time="2023-05-08")
        source.close()
        store.close()
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", writer, str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert [t.object for t in source.history("Alice", "lives in", ALICE)] == ["Paris", "Lisbon"]
    found = texts(source.search("Where does Alice live?", ALICE, k=2))
    assert found[0] == "Alice — lives in — Lisbon (since 2023-05-08)"
    assert source.flush() == 0  # the writer's close() indexed everything already
    assert source.index.count("default", "alice") == 3
    assert source.reindex() == 3
    assert texts(source.search("cat", ALICE, k=1)) == ["Alice — has cat — Tom (since 2023-05-08)"]


# --------------------------------------------------------------------------- tools


def test_tools_act_for_the_memory_user_only(source: TripleSource) -> None:
    save, search = source.tools(ALICE)
    assert (save.metadata.name, search.metadata.name) == ("save_knowledge", "search_knowledge")
    # The LLM fills in facts or a query; it has no way to name a user.
    assert set(save.metadata.get_parameters_dict()["properties"]) == {"triples"}
    assert set(search.metadata.get_parameters_dict()["properties"]) == {"query"}

    out = save.call(triples=[{"subject": "Alice", "predicate": "lives in", "object": "Paris"}])
    assert out.content == "- Alice — lives in — Paris (saved)"
    out = save.call(
        triples=[
            {"subject": "Alice", "predicate": "lives in", "object": "Rome"},
            {"subject": "alice", "predicate": "lives in", "object": "rome"},
        ]
    )
    assert out.content.splitlines() == [
        "- Alice — lives in — Rome (saved; replaces Alice — lives in — Paris)",
        "- Alice — lives in — Rome (already known)",
    ]
    assert "Alice — lives in — Rome" in search.call(query="Where does Alice live?").content
    assert source.triples(BOB) == []
    [mention] = source.triples(ALICE)
    assert mention.session_ids == ("s1",) and mention.mentions == 2
    with pytest.raises(TripleError, match="'object' is empty"):
        save.call(triples=[{"subject": "Alice", "predicate": "likes", "object": ""}])
    assert "No saved facts" in search_for_nothing(source)


def search_for_nothing(source: TripleSource) -> str:
    [_, search] = source.tools(BOB)
    return search.call(query="anything").content


# --------------------------------------------------------------------------- extraction


def extraction_reply(*triples: tuple[str, str, str]) -> ToolCallReply:
    return pass_answer(
        triples={"new": [dict(zip(("subject", "predicate", "object"), t)) for t in triples], "retracted": []}
    )


def test_extraction_writes_validated_triples_with_provenance(source: TripleSource) -> None:
    llm = ScriptedLLM([extraction_reply(("User", "lives in", "Lisbon"), ("User", "has dog", "Rex"))])
    messages = [
        user("I live in Lisbon with my dog Rex.", message_id="m1", timestamp="2023-05-08T10:00:00"),
        assistant("Lovely! What breed is Rex?", message_id="m2", timestamp="2023-05-08T10:00:05"),
    ]
    stored = source.extract(messages, llm, ALICE)
    assert [t.text() for t in stored] == ["User — lives in — Lisbon", "User — has dog — Rex"]
    assert stored[0].message_ids == ("m1", "m2")
    assert stored[0].valid_from == epoch("2023-05-08T10:00:05")
    # The LLM saw the conversation (as quoted data) and was offered the output tool.
    [call] = llm.calls
    assert call.tool_names == ["FormationPass"]
    assert '"I live in Lisbon with my dog Rex."' in call.text()
    # "I" in a question reaches the user's own node.
    assert texts(source.search("Where do I live?", ALICE, k=1))[0].startswith("User — lives in")


@pytest.mark.parametrize(
    "reply",
    [
        # A triple without an object: the output does not validate.
        pass_answer(triples={"new": [{"subject": "User", "predicate": "likes", "object": "tea"},
                                     {"subject": "User", "predicate": "likes"}]}),
        # Valid shape, but an empty subject next to a good triple.
        extraction_reply(("User", "likes", "tea"), ("", "likes", "coffee")),
        # No tool call at all: plain text.
        "The user likes tea.",
        # The wrong tool.
        ToolCallReply("save_knowledge", {"triples": []}),
    ],
    ids=["missing-field", "empty-subject", "plain-text", "wrong-tool"],
)
def test_malformed_extraction_output_is_rejected_whole(source: TripleSource, reply: Any) -> None:
    source.add_triples([("User", "likes", "jazz")], ALICE)
    with pytest.raises(ExtractionError):
        source.extract([user("I like tea and coffee.")], ScriptedLLM([reply]), ALICE)
    assert [t.text() for t in source.triples(ALICE, include_history=True)] == ["User — likes — jazz"]


def test_extraction_needs_messages_with_text_before_calling_the_llm(source: TripleSource) -> None:
    llm = ScriptedLLM([])  # any call would raise ScriptExhausted
    system = ChatMessage(role=MessageRole.SYSTEM, content="You are helpful.")
    assert source.extract([system, user("   ")], llm, ALICE) == []
    assert llm.calls == []


def test_memory_extracts_automatically_every_n_user_turns(open_memory) -> None:
    llm = ScriptedLLM(
        [extraction_reply(("User", "works at", "Acme")), extraction_reply(("User", "works at", "Globex"))]
    )
    memory = open_memory(llm=llm, extract_every=1)
    triples = memory.source("triples")
    memory.put(user("I work at Acme."))
    memory.flush()  # the pass runs in the background; flush waits for it
    assert [t.object for t in triples.triples(memory.scope)] == ["Acme"]
    memory.put(assistant("Nice."))
    memory.put(user("Actually I just changed jobs, I'm at Globex now."))
    memory.flush()
    assert [t.object for t in triples.history("User", "works at", memory.scope)] == ["Acme", "Globex"]
    assert llm.remaining == 0
    # The second extraction saw only the messages not extracted from yet.
    assert "I work at Acme." not in llm.calls[1].text()


def test_failed_on_demand_extraction_writes_nothing_and_can_be_retried(open_memory) -> None:
    memory = open_memory()
    memory.put(user("My sister Maria is a dentist."))
    with pytest.raises(ExtractionError, match="FormationPass"):
        memory.extract(llm=ScriptedLLM(["Maria is a dentist."]))
    assert memory.source("triples").count(memory.scope) == 0
    memory.extract(llm=ScriptedLLM([extraction_reply(("Maria", "works as", "dentist"))]))
    assert memory.source("triples").count(memory.scope) == 1


# --------------------------------------------------------------------------- ComposableMemory


def test_memory_block_shows_current_triples_first(open_memory) -> None:
    memory = open_memory()
    memory.put_messages([user("I used to live in Paris."), assistant("Paris is lovely.")])
    triples = memory.source("triples")
    assert isinstance(triples, TripleSource) and triples.priority == 5
    triples.add_triples([("Alice", "lives in", "Paris")], memory.scope, event_time="2020-01-01")
    triples.add_triples([("Alice", "lives in", "New York")], memory.scope, event_time="2023-05-08")

    # min_relevance=0: this pins the order of the sources, whatever the calibration
    # thinks of "I used to live in Paris" for this question (cosine 0.29).
    later = open_memory(session_id="s2", min_relevance=0.0)
    block = later.get("Where does Alice live now?")[0].content
    assert '"Alice — lives in — New York (since 2023-05-08)"' in block
    assert "Alice — lives in — Paris" not in block  # superseded: history only
    shown = [r.source for r in later.last_block.records]
    assert shown[0] == "triples" and "vector" in shown
    assert later.search("Where does Alice live?", k=3)[0].source == "triples"
    assert {t.metadata.name for t in later.tools()} == {
        "save_knowledge", "search_knowledge", "update_instructions"
    }


# --------------------------------------------------------------------------- agents (LangGraph tutorial)


async def test_agent_saves_knowledge_in_one_session_and_recalls_it_in_the_next(open_memory) -> None:
    system_prompt = "You are a helpful assistant with long-term memory."
    memory = open_memory(session_id="session-1")
    save = ToolCallReply(
        "save_knowledge",
        {
            "triples": [
                {"subject": "Alice", "predicate": "has friend", "object": "John"},
                {"subject": "John", "predicate": "likes", "object": "pizza"},
            ]
        },
    )
    llm = ScriptedLLM([save, "Noted: your friend John likes pizza."])
    agent = FunctionAgent(llm=llm, tools=memory.tools(), system_prompt=system_prompt)
    await agent.run(user_msg="My friend John likes pizza", memory=memory)
    assert llm.remaining == 0
    assert llm.calls[0].tool_names == ["save_knowledge", "search_knowledge", "update_instructions"]
    tool_result = next(m for m in llm.calls[1].messages if m.role == MessageRole.TOOL)
    assert "Alice — has friend — John (saved)" in message_plain_text(tool_result)

    later = open_memory(session_id="session-2")
    assert later.get_all() == []
    llm = ScriptedLLM(["Bring pizza: John likes it."])
    agent = FunctionAgent(llm=llm, tools=later.tools(), system_prompt=system_prompt)
    response = await agent.run(user_msg="What food should I bring to John's party?", memory=later)
    assert "pizza" in str(response)
    [call] = llm.calls
    memory_block = next(
        text for text in call.system_texts() if "<memory>" in text
    )
    assert "Alice — has friend — John (since " in memory_block
    # The triples come before the vector source's records in the block.
    assert memory_block.index("Alice — has friend — John") < memory_block.index(
        "My friend John likes pizza"  # in an excerpt: "user: My friend John likes pizza\n..."
    )
    # "John likes pizza" is shown once: the message says more than the
    # triple, so it is kept, with the triple's provenance.
    assert "John — likes — pizza" not in memory_block
    shown = next(r for r in later.last_block.records if r.source == "vector")
    assert [a["text"] for a in shown.metadata["also_in"]] == [
        t.render() for t in later.source("triples").triples(later.scope) if t.predicate == "likes"
    ]
    stored = later.source("triples").triples(later.scope)
    assert {t.session_id for t in stored} == {"session-1"}


# --------------------------------------------------------------------------- graph


def test_graph_export_and_picture(source: TripleSource, tmp_path: Path) -> None:
    source.add_triples(
        [("Alice", "has friend", "John"), ("John", "likes", "pizza"), ("John", "cooks", "pizza"),
         ("Alice", "lives in", "Paris")],
        ALICE,
        event_time="2020-01-01",
    )
    source.add_triples([("Alice", "lives in", "Lisbon")], ALICE, event_time="2023-01-01")

    graph = source.to_networkx(ALICE)
    assert set(graph.nodes) == {"alice", "john", "pizza", "lisbon"}  # Paris is history
    assert graph.nodes["alice"]["label"] == "Alice"
    assert sorted(d["predicate"] for _, _, d in graph.edges("john", data=True)) == ["cooks", "likes"]
    assert graph.number_of_edges() == 4 and graph.graph["name"] == "alice"
    assert source.to_networkx(ALICE, include_history=True).has_node("paris")

    png = source.plot(tmp_path / "out" / "alice.png", ALICE)
    assert png == tmp_path / "out" / "alice.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    empty = source.plot(tmp_path / "bob.svg", BOB)
    assert "no knowledge yet" in empty.read_text()


# --------------------------------------------------------------------------- from_defaults(triples=True)


def test_from_defaults_with_triples_round_trips_and_reindexes(tmp_path: Path, embed_model) -> None:
    from llama_memory import LlamaMemoryError

    memory = ComposableMemory.from_defaults(
        user_id="alice", session_id="s1", path=tmp_path, embed_model=embed_model, triples=True
    )
    assert [s.name for s in memory.sources][0] == "vector"
    assert [s.name for s in memory.sources][-1] == "triples"
    memory.add_triples([("Alice", "lives in", "Paris")], event_time="2020-01-01")
    [rome] = memory.add_triples([("Alice", "lives in", "Rome")], event_time="2021-01-01")
    assert rome.session_id == "s1" and rome.user_id == "alice"
    data = memory.to_dict()
    assert data["triples"] is True
    memory.close()

    restored = ComposableMemory.from_dict(data, embed_model=embed_model)
    assert texts(restored.search("Where does Alice live?", k=1)) == [
        "Alice — lives in — Rome (since 2021-01-01)"
    ]
    assert restored.reindex() == 2  # both triples (current and superseded); no messages yet
    restored.close()

    buffer_and_triples = ComposableMemory.from_defaults(
        user_id="alice", path=tmp_path, embed_model=embed_model, secondary_memory_sources=[],
        triples=True,
    )
    again = ComposableMemory.from_dict(buffer_and_triples.to_dict(), embed_model=embed_model)
    assert [s.name for s in again.sources] == ["triples"]
    assert [t.object for t in again.triple_source.triples(again.scope)] == ["Rome"]
    own = ComposableMemory.from_defaults(
        user_id="alice", path=tmp_path, embed_model=embed_model, triples=True,
        secondary_memory_sources=[again.triple_source],
    )
    assert own.sources == [again.triple_source]  # not a second one
    buffer_and_triples.close()
    again.close()

    plain = ComposableMemory.from_defaults(user_id="alice", secondary_memory_sources=[])
    with pytest.raises(LlamaMemoryError, match="triples=True"):
        plain.add_triples([("Alice", "likes", "tea")])
    with pytest.raises(ScopeError, match="knowledge-triple"):
        ComposableMemory.from_defaults(secondary_memory_sources=[], triples=True)
    in_memory = ComposableMemory.from_defaults(user_id="zoe", embed_model=embed_model, triples=True)
    in_memory.add_triples([("Zoe", "likes", "chess")])
    assert "Zoe — likes — chess" in in_memory.get("What does Zoe like?")[0].content


def test_one_get_embeds_its_query_once_for_both_sources(tmp_path: Path, embed_model) -> None:
    # The vector and triple sources share the model's query vectors: one embedding per
    # new query, none for the user message just embedded as a document (symmetric model).
    from llama_index.core.instrumentation import get_dispatcher
    from llama_index.core.instrumentation.event_handlers import BaseEventHandler
    from llama_index.core.instrumentation.events.embedding import EmbeddingStartEvent

    embedded: list[list[str]] = []

    class Counter(BaseEventHandler):
        def handle(self, event: Any, **kwargs: Any) -> None:
            if isinstance(event, EmbeddingStartEvent):
                embedded.append(list(event.model_dict.get("chunks", [])))

    memory = ComposableMemory.from_defaults(
        user_id="quinn", path=tmp_path, embed_model=embed_model, triples=True
    )
    memory.add_triples([("Quinn", "grows", "purple carrots")])
    memory.put(user("Quinn asks which vegetables grow well in a cold frame in March."))
    memory.get("warm-up: index what waits")
    dispatcher = get_dispatcher()
    counter = Counter()
    dispatcher.add_event_handler(counter)
    try:
        embedded.clear()
        memory.get("What does Quinn grow, and where in the garden exactly?")
        queries = len(embedded)
        memory.put(user("Quinn wonders whether purple carrots taste any different."))
        embedded.clear()
        memory.get()  # the query is that user message: embedded once, as a document
        after_put = len(embedded)
    finally:
        dispatcher.event_handlers.remove(counter)
        memory.close()
    # A question of two parts is searched three times (each part, and whole): each
    # text is embedded once, for both sources.
    assert queries == 3
    assert len({text for chunk in embedded for text in chunk}) == len([t for c in embedded for t in c])
    assert after_put == 1


def test_a_source_takes_a_timeline_and_says_what_to_pass_otherwise(
    tmp_path: Path, embed_model
) -> None:
    from llama_memory.storage.chroma import open_index
    from llama_memory.storage.sqlite.bundle import SQLiteTripleTimeline

    store = SQLiteStore(tmp_path)
    index = open_index("llama_memory_triples", tmp_path, None, None)
    try:
        with pytest.raises(
            TypeError, match=r"not str '/some/dir': pass SQLiteTripleTimeline\(SQLiteStore\(path\)\)"
        ):
            TripleSource("/some/dir", index, embed_model)  # type: ignore[arg-type]
        # A bare store too: before 0.x the source wrapped one itself; config does it now.
        with pytest.raises(TypeError, match=r"not SQLiteStore .*wiring.default_triple_source"):
            TripleSource(store, index, embed_model)  # type: ignore[arg-type]
        default_triple_source(store, tmp_path, embed_model).add_triples(
            [("Alice", "lives in", "Paris")], "alice"
        )
        on_timeline = TripleSource(SQLiteTripleTimeline(store), index, embed_model)
        assert [t.object for t in on_timeline.triples("alice")] == ["Paris"]
    finally:
        store.close()
