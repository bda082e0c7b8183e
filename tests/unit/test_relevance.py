"""Relevance: absolute scores, small talk, refers-back queries, each fact once."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from helpers import hold, message_texts, user
from llama_memory import ComposableMemory, Scope
from llama_memory.read.compose import IRRELEVANT
from llama_memory.read.query_plan import QueryPlan, choose_query, is_small_talk

#: A user's unrelated history, each message in a session of its own (so no excerpt
#: joins them): the kind of store that filled the block for "hi" before.
UNRELATED = (
    "Draft email to Bob: the quarterly report will be two days late, sorry.",
    "The brake pads for my road bike cost 45 euros at the shop on Main Street.",
    "I booked the Hotel Avenida in Lisbon for the conference, three nights in May.",
    "My sister Anna works as a nurse at the children's hospital in Berlin.",
    "Remind me to renew the car insurance before the end of March.",
)


@pytest.fixture
def history(make_memory):
    """A memory directory holding UNRELATED, one session per message."""
    hold(make_memory, UNRELATED)
    return make_memory


@pytest.mark.parametrize("message", ["hi", "thanks", "ok", "great!", "Thank you so much!"])
def test_small_talk_on_unrelated_history_injects_no_retrieved_records(history, message) -> None:
    memory = history(session_id="now")
    memory.put(user(message))

    messages = memory.get()

    assert memory.last_block.records == []
    assert memory.last_block.text == ""
    assert all("<memory>" not in (m.content or "") for m in messages)


def test_question_about_something_never_said_injects_nothing(history) -> None:
    memory = history(session_id="now")

    memory.get("What's the capital of Australia?")

    assert memory.last_block.records == []


def test_related_question_still_retrieves(history) -> None:
    memory = history(session_id="now")

    memory.get("Which hotel did I book in Lisbon?")

    first = memory.last_block.records[0]
    assert "Hotel Avenida" in first.text
    assert first.relevance is not None and first.relevance >= memory.min_relevance


def test_search_scores_are_absolute_across_queries(history) -> None:
    memory = history(session_id="now")

    related = memory.search("How much were the brake pads for my bike?", k=3)
    unrelated = memory.search("What's the capital of Australia?", k=3)

    # The best hit of an unrelated query is not relevant, whatever its rank; the
    # related one is, and both are on one scale.
    assert related[0].relevance is not None and unrelated[0].relevance is not None
    assert "brake pads" in related[0].text
    assert related[0].relevance >= memory.min_relevance > unrelated[0].relevance
    assert all(0.0 <= r.relevance <= 1.0 for r in [*related, *unrelated])
    assert {"cosine", "lexical", "best_cosine", "unknown_name"} <= set(related[0].metadata["evidence"])


def test_min_relevance_zero_keeps_every_retrieved_record(history) -> None:
    memory = history(session_id="now", min_relevance=0.0)

    memory.get("What's the capital of Australia?")

    assert len(memory.last_block.records) == len(UNRELATED)
    assert memory.last_block.dropped_irrelevant == 0
    assert all(r.relevance is not None and r.relevance < 0.4 for r in memory.last_block.records)


def test_min_relevance_outside_zero_to_one_is_refused(make_memory) -> None:
    with pytest.raises(ValueError, match="min_relevance is a calibrated relevance between 0 and 1"):
        make_memory(min_relevance=1.5)


def test_min_relevance_survives_to_dict(make_memory) -> None:
    memory = make_memory(min_relevance=0.35)
    data = memory.to_dict()
    memory.close()

    assert ComposableMemory.from_dict(data).min_relevance == 0.35


def test_last_time_retrieves_the_latest_earlier_session(history) -> None:
    memory = history(session_id="now")

    memory.get("What did we talk about last time?")

    texts = message_texts(memory.last_block.records)
    assert texts == [UNRELATED[-1]]  # the latest earlier session, nothing else
    assert memory.last_block.records[0].metadata["retrieved_by"] == "time"


def test_yesterday_retrieves_what_was_said_that_day(make_memory) -> None:
    today = datetime.now(timezone.utc).replace(hour=12, minute=0, second=0, microsecond=0)
    said = {
        "yesterday": "We compared three tents for the camping trip to Norway.",
        "last month": "I asked about tax deductions for my home office.",
    }
    old = make_memory(session_id="old")
    old.put(user(said["last month"], timestamp=(today - timedelta(days=30)).isoformat()))
    old.put(user(said["yesterday"], timestamp=(today - timedelta(days=1)).isoformat()))
    old.close()
    memory = make_memory(session_id="now")

    memory.get("what did I say yesterday?")

    assert message_texts(memory.last_block.records) == [said["yesterday"]]


def test_same_fact_from_three_sources_shows_once(make_memory) -> None:
    old = make_memory(session_id="old", triples=True)
    old.put(user("I have a dog named Rex, he is a beagle."))
    old.add_triples([("user", "has a dog named", "Rex")])
    old.source("profile").set_field("dog", "a beagle named Rex", old.scope)
    old.close()
    memory = make_memory(session_id="now", triples=True)

    memory.get("Tell me about my dog Rex")

    records = memory.last_block.records
    assert len(records) == 1, [r.text for r in records]
    kept = records[0]
    assert "beagle" in kept.text and "Rex" in kept.text
    also = {entry["source"] for entry in kept.metadata["also_in"]}
    assert also == {"profile", "triples", "vector"} - {kept.source}
    assert memory.last_block.dropped_duplicates == 2


def test_different_facts_of_three_sources_all_show(make_memory) -> None:
    old = make_memory(session_id="old", triples=True)
    old.put(user("I have a dog named Rex, he is a beagle."))
    old.add_triples([("user", "works at", "Airbus Toulouse")])
    old.source("profile").set_field("city", "Toulouse", old.scope)
    old.close()
    memory = make_memory(session_id="now", triples=True, min_relevance=0.0)

    memory.get("Tell me about my dog Rex and my job at Airbus")

    # Different facts are not merged, and min_relevance=0 filters nothing.
    assert {r.source for r in memory.last_block.records} == {"vector", "triples", "profile"}
    assert memory.last_block.dropped_irrelevant == 0
    assert not any("also_in" in r.metadata for r in memory.last_block.records)


# --------------------------------------------------------------------------- the query


@pytest.mark.parametrize(
    "text", ["hi", "Hello!", "thanks", "thank you!", "ok", "OK.", "great!", "cool, thanks",
             "good morning", "how are you?", "bye", "👍"],
)
def test_small_talk_is_recognised(text: str) -> None:
    assert is_small_talk(text)
    assert choose_query(text).kind == "none"


@pytest.mark.parametrize(
    "text", ["What did Caroline research?", "ok, and where is the hotel?", "Thanks! When is my flight?",
             "no sugar in my coffee, remember?", "great book recommendations?", "how are the kids doing?"],
)
def test_questions_are_not_small_talk(text: str) -> None:
    assert not is_small_talk(text)


def test_a_message_that_refers_back_is_searched_with_the_previous_one() -> None:
    plan = choose_query("and the other one?", ["Which laptops did I compare in March?", "and the other one?"])

    assert plan == QueryPlan("context", "Which laptops did I compare in March?\nand the other one?")


@pytest.mark.parametrize(
    ("text", "kind", "rest", "days"),
    [
        ("what did we talk about last time?", "time", "", None),
        ("what did I say yesterday?", "time", "", (1, 1)),
        ("what did I say yesterday about the hotel?", "time", "hotel", (1, 1)),
        ("When did Melanie paint a sunrise?", "as_is", "When did Melanie paint a sunrise?", None),
    ],
)
def test_refers_back_in_time(text: str, kind: str, rest: str, days) -> None:
    plan = choose_query(text)

    assert (plan.kind, plan.text, plan.days) == (kind, rest, days)


def test_a_message_that_refers_back_retrieves_by_the_conversation(history) -> None:
    old = history(session_id="laptops")
    old.put(user("I compared the ThinkPad X1 and the MacBook Air for work."))
    old.close()
    memory = history(session_id="now")
    memory.put(user("Which laptops did I compare?"))
    memory.put(user("and the other one?"))

    memory.get()

    assert "ThinkPad X1" in memory.last_block.records[0].text


def test_a_name_known_only_to_the_users_triples_or_profile_is_known(make_memory) -> None:
    memory = make_memory(triples=True)
    memory.put(user("I moved to Berlin last spring."))
    memory.add_triples([("Alice", "lives in", "Berlin")])
    memory.source("profile").set_field("employer", "Zalando", memory.scope)
    store = memory.source("vector").store
    bob = Scope(user_id="bob")

    _, counts = store.word_counts(["alice", "zalando", "berlin", "tokyo"], memory.scope)
    _, counts_of_bob = store.word_counts(["alice", "zalando"], bob)

    assert counts == {"alice": 1, "zalando": 1, "berlin": 1, "tokyo": 0}
    assert counts_of_bob == {"alice": 0, "zalando": 0}  # another user's triples say nothing


@pytest.mark.parametrize("message", ["hi", "What's the capital of Australia?"])
def test_when_nothing_is_relevant_the_profile_still_shows(history, message) -> None:
    memory = history(session_id="now")
    memory.source("profile").set_field("name", "Alice", memory.scope)

    memory.get(message)

    assert [r.source for r in memory.last_block.records] == ["profile"]
    assert "name: Alice" in memory.last_block.text


def test_records_left_out_as_irrelevant_are_listed_with_their_reason(history) -> None:
    memory = history(session_id="now")

    memory.get("What's the capital of Australia?")

    block = memory.last_block
    assert block.dropped_irrelevant > 0
    reasons = [item.reason for item in block.left_out]
    assert reasons.count("not relevant") == block.dropped_irrelevant
    assert all(item.record.relevance < memory.min_relevance for item in block.left_out
               if item.reason == "not relevant")


def test_a_fact_holding_every_word_of_the_question_answers_it(tmp_path, embed_model) -> None:
    # "where do I live?" has a low cosine with "user lives in Porto" (0.28): the calibration,
    # fitted on messages, would leave the fact out; holding the question's words, it stays.
    from llama_memory import ComposableMemory

    memory = ComposableMemory.from_defaults(
        user_id="alice", path=tmp_path, embed_model=embed_model, triples=True
    )
    try:
        memory.add_triples([("user", "lives in", "Porto"), ("user", "likes", "sailing")])
        memory.get("where do I live?")
        shown = [r.text for r in memory.last_block.records]
        assert any("Porto" in t for t in shown) and not any("sailing" in t for t in shown)
        memory.get("What did Caroline paint last summer?")  # never said: still nothing
        assert memory.last_block.records == []
    finally:
        memory.close()


def test_facts_come_with_a_question_about_the_users_history(tmp_path, embed_model) -> None:
    # Notebook 02's second conversation: a fact is a few words with a low cosine with any
    # question ("John likes pizza" / "Where should I go for dinner tonight?"); when past
    # messages of the question are relevant, the user's facts found for it show too.
    from llama_index.core.llms import ChatMessage

    from llama_memory import ComposableMemory

    first = ComposableMemory.from_defaults(
        user_id="john", session_id="c1", path=tmp_path, embed_model=embed_model, triples=True
    )
    first.put_messages([ChatMessage(role="user", content="I love pizza."),
                        ChatMessage(role="assistant", content="Pizza is great.")])
    first.add_triples([("John", "likes", "pizza")])
    first.close()
    later = ComposableMemory.from_defaults(
        user_id="john", session_id="c2", path=tmp_path, embed_model=embed_model, triples=True
    )
    try:
        later.put(ChatMessage(role="user", content="Where should I go for dinner tonight?"))
        later.get()
        assert "John — likes — pizza" in later.last_block.text
    finally:
        later.close()


@pytest.fixture
def shared_store(make_memory_on):
    """Memories of several users on one store (one agent serving many users)."""
    return make_memory_on


#: What another user of the same store said: a name Alice never mentioned.
BOBS_DINNER = "My dragon Zorblax ate three pizzas at the conference dinner in Lisbon."


def test_another_users_history_does_not_make_a_question_answerable(shared_store) -> None:
    shared_store(session_id="old").put(user("At the conference dinner in Lisbon I ate a huge seafood platter."))
    shared_store(user_id="bob", session_id="b1").put(user(BOBS_DINNER))
    alice = shared_store(session_id="now")

    alice.get("What did Zorblax eat at the conference dinner?")

    # Alice never spoke of Zorblax: her block stays empty though the store knows the
    # name from Bob. Counted store-wide (before), Bob's word made her own dinner
    # "relevant" (0.98 against 0.10) and it was injected.
    assert alice.last_block.records == []
    # Once Alice has said it herself, the question finds it.
    shared_store(session_id="later").put(user(BOBS_DINNER))
    alice.get("What did Zorblax eat at the conference dinner?")
    assert any("Zorblax" in r.text for r in alice.last_block.records)


def test_a_rule_names_its_threshold_unrounded(history) -> None:
    # A min_relevance of 0.025 was written "0.03" (two decimals): the rule named another
    # threshold than the one that left the records out.
    memory = history(session_id="now", min_relevance=0.025)

    memory.get("Which hotel did I book in Lisbon?")

    irrelevant = [o for o in memory.last_block.left_out if o.reason == IRRELEVANT]
    assert irrelevant
    assert all(o.detail.endswith("below min_relevance 0.025") for o in irrelevant), [o.detail for o in irrelevant]
    named = [rule for rule in memory.last_block.admitted if "min_relevance" in rule]
    assert all("min_relevance 0.025" in rule for rule in named), named


def test_the_words_of_a_text_are_kept_and_a_caller_may_change_its_copy() -> None:
    from llama_memory.retrieval.relevance import stem, word_stems, words

    text = "What's my mum's job? She hikes in Porto."
    first = words(text)
    first.append("changed")  # a caller's own list: the cache keeps its own tuple
    assert words(text) == ["what", "my", "mum", "job", "she", "hikes", "in", "porto"]
    assert word_stems(text) == frozenset(stem(w) for w in words(text))
