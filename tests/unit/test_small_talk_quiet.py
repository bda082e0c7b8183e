"""Small talk injects nothing: a query of small talk or function words retrieves nothing,
and stored small talk (a greeting and the assistant's reply to it) is never shown, not
even as the match that brings a real fact along in its excerpt."""

from __future__ import annotations

import pytest

from helpers import assistant, hold, user
from llama_memory.read.query_plan import choose_query, is_small_talk

REPLY = "Sure, I'm here whenever you need me."
#: Each session: small talk and the reply, then a fact and its reply (one excerpt).
SESSIONS = (
    ("got it", "Our dog Biscuit is a beagle and he hates the vacuum cleaner.", "Beagles are loud about it!"),
    ("one sec", "I work as a hydrologist at a small water-engineering startup.", "That sounds like fun work."),
    ("bye for now!", "My favourite tea is a smoky lapsang souchong every afternoon.", "A bold choice."),
    ("makes sense", "We moved to Porto last spring and love the light over the river.", "Porto is lovely."),
)


@pytest.fixture
def store(make_memory):
    for n, (talk, fact, reply) in enumerate(SESSIONS):
        memory = make_memory(session_id=f"old-{n}")
        memory.put_messages([user(talk), assistant(REPLY), user(fact), assistant(reply)])
        memory.close()
    return make_memory(session_id="now")


@pytest.mark.parametrize("line", ["got it", "one sec", "bye for now!", "makes sense", "how about you?"])
def test_small_talk_said_before_injects_nothing(store, line: str) -> None:
    # Before, the earlier "got it" matched "got it" (cosine 1, every word) and its
    # excerpt brought the beagle along; "one sec" and "bye for now!" too.
    store.get(line)

    assert store.last_block.text == ""
    assert store.last_block.token_count == 0


def test_in_the_agent_flow_too(make_memory, store) -> None:
    memory = make_memory(session_id="new")
    memory.put(user("one sec"))

    memory.get()

    assert memory.last_block.text == ""


def test_a_fact_is_shown_without_the_small_talk_beside_it(store) -> None:
    store.get("What breed is my dog?")

    text = store.last_block.text
    assert "beagle" in text
    assert REPLY not in text and "got it" not in text


def test_a_record_matched_by_small_talk_is_left_out_with_its_rule(store) -> None:
    # Not small talk itself (it is searched), but its best match is the stored "got it".
    store.get("I got it")

    rules = {left.rule for left in store.last_block.left_out}
    assert any("small talk" in rule for rule in rules), rules
    assert "got it" not in store.last_block.text


@pytest.mark.parametrize("text", ["got it", "Got it!", "makes sense", "will do", "take care", "see you"])
def test_acknowledgements_without_a_greeting_word_are_small_talk(text: str) -> None:
    assert is_small_talk(text)
    assert choose_query(text).kind == "none"


@pytest.mark.parametrize("text", ["how about you?", "are you there?", "and you?"])
def test_function_words_only_not_about_the_user_retrieve_nothing(text: str) -> None:
    assert choose_query(text).kind == "none"


@pytest.mark.parametrize("text", ["what do I do?", "who am I?", "got it, where do I live?"])
def test_a_question_about_the_user_is_searched(text: str) -> None:
    assert choose_query(text).kind == "as_is"


#: Facts said with a word of when they were said: a greeting with the same word matched
#: them by it ("how are you tonight?" -> "...tonight").
SAID_WITH_A_TIME = (
    "We're having my sister's famous lasagne tonight, she drove two hours to bring it.",
    "These days I cycle to the office, the bus got far too crowded.",
    "This morning the plumber finally fixed the leaking kitchen tap.",
    "My knee is much better now, the physio exercises are working.",
)


@pytest.mark.parametrize(
    "line", ["how are you tonight?", "hey, how's it going these days?", "good morning, how are you this morning?",
             "how are you doing now?"],
)
def test_a_greeting_with_a_word_of_when_injects_nothing(make_memory, line: str) -> None:
    # Before, the word of when ("tonight", "these days", "this morning", "now") made the
    # greeting a query: it matched the facts said with the same word.
    hold(make_memory, SAID_WITH_A_TIME)
    memory = make_memory(session_id="now")

    assert is_small_talk(line)
    memory.get(line)

    assert memory.last_block.text == ""


@pytest.mark.parametrize("text", ["what am I eating tonight?", "how is my knee these days?",
                                  "what did the plumber fix this morning?"])
def test_a_question_with_a_word_of_when_is_searched(make_memory, text: str) -> None:
    assert not is_small_talk(text)
    assert choose_query(text).kind == "as_is"


def test_a_time_alone_follows_up_the_previous_message() -> None:
    assert choose_query("what about today?").kind == "none"
    plan = choose_query("what about today?", ["What's on my calendar tomorrow?"])

    assert plan.kind == "context" and plan.text.startswith("What's on my calendar tomorrow?")


@pytest.mark.parametrize("text", ["hello there", "hi there!", "very useful, thanks", "that was helpful, thank you"])
def test_a_greeting_to_someone_there_and_praise_of_a_reply_are_small_talk(text: str) -> None:
    # Before, "there" and "helpful" made these queries: they matched records by "hello".
    assert is_small_talk(text)
    assert choose_query(text).kind == "none"


@pytest.mark.parametrize("text", ["is there a dentist near me?", "is the bakery there open on sundays?", "helpful?"])
def test_there_and_helpful_in_a_question_are_searched(text: str) -> None:
    assert choose_query(text).kind == "as_is"
