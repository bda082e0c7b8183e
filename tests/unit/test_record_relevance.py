"""Per-record relevance: once a question is about this user's history, each record still
needs relevance of its own to enter the block; the user's own earlier questions state
nothing, so they never make a question one about the user and come after statements;
a question in the first person is no reason to show unrelated records, while a request
for advice still finds what the user said of themselves. Real SQLite and Chroma, the
real offline embedding model (the calibration is fitted for it), each question asked as
an agent asks it: put, then get() with no input."""

from __future__ import annotations

from bench.first_person import hobby_messages
from helpers import hold, message_texts, user
from llama_memory import ComposableMemory
from llama_memory.core.types import MemoryRecord
from llama_memory.read.compose import IRRELEVANT
from llama_memory.retrieval.relevance import asks_only, is_question, is_request

#: A user's history, each message in a session of its own.
HISTORY = (
    "Draft email to Bob: the quarterly report will be two days late, sorry.",
    "The brake pads for my road bike cost 45 euros at the shop on Main Street.",
    "I booked the Hotel Avenida in Lisbon for the conference, three nights in May.",
    "Remind me to renew the car insurance before the end of March.",
    "I'm vegetarian, and I can't stand spicy food.",
)


def ask(make, session_id: str, question: str) -> ComposableMemory:
    """Ask ``question`` as the first message of a new conversation (kept in the store)."""
    memory = make(session_id=session_id)
    memory.put(user(question))
    memory.get()
    return memory


def shown(memory: ComposableMemory) -> str:
    return "\n".join(message_texts(memory.last_block.records))


def test_a_record_with_no_relevance_of_its_own_stays_out_of_a_question_about_the_user(make_memory) -> None:
    hold(make_memory, HISTORY)

    memory = ask(make_memory, "now", "Which hotel did I book in Lisbon?")

    assert "Hotel Avenida" in shown(memory)  # the question is about this user's history
    # The others were retrieved for it (the store holds five), but say nothing of it.
    assert "Draft email to Bob" not in shown(memory)
    assert "brake pads" not in shown(memory)
    left = {item.record.text: item for item in memory.last_block.left_out if item.reason == IRRELEVANT}
    bob = left[HISTORY[0]]
    # The calibration is made of the record's own evidence: it says so by itself.
    assert "below min_relevance" in bob.detail or "below the record floor" in bob.detail


def test_an_earlier_question_does_not_make_its_neighbours_relevant(make_memory) -> None:
    hold(make_memory, ["I repaint old bicycles on weekends.", *hobby_messages(20)])
    ask(make_memory, "asked-0", "What instrument does my brother Theo play?").close()

    memory = ask(make_memory, "asked-1", "Where did my brother Theo study music?")

    # The earlier question is close to this one, but it states nothing: no statement
    # of the store enters for it.
    beyond = [r for r in memory.last_block.records if not asks_only(r)]
    assert beyond == [], message_texts(beyond)
    assert "repaint old bicycles" not in shown(memory)


def test_earlier_questions_rank_below_statements(make_memory) -> None:
    hold(make_memory, HISTORY)
    for n, earlier in enumerate(["Which hotel did I book in Lisbon?", "Was the Lisbon hotel expensive?",
                                 "How many nights did I book at the hotel in Lisbon?"]):
        ask(make_memory, f"asked-{n}", earlier).close()

    memory = ask(make_memory, "now", "What is the name of the hotel I booked in Lisbon?")

    records = memory.last_block.records
    assert "Hotel Avenida" in records[0].text
    kinds = [asks_only(r) for r in records]
    assert kinds == sorted(kinds)  # every statement before every earlier question


def test_a_first_person_question_never_said_injects_nothing_on_a_hobby_store(make_memory) -> None:
    hold(make_memory, [*hobby_messages(20), "I love pizza."])

    for n, question in enumerate(["which car do I drive?", "what is my wife's name?", "where was I born?"]):
        memory = ask(make_memory, f"q-{n}", question)
        assert memory.last_block.records == [], (question, shown(memory))


def test_a_request_for_advice_still_finds_the_preference_that_serves_it(make_memory) -> None:
    hold(make_memory, [*hobby_messages(20), "I love pizza."])

    memory = ask(make_memory, "eat", "Where should I eat tonight?")

    assert "I love pizza." in shown(memory)
    pizza = next(r for r in memory.last_block.records if r.text == "I love pizza.")
    assert "request for advice" in pizza.metadata["admitted_by"]


def test_what_counts_as_a_question_and_as_a_request() -> None:
    assert is_question("Where did my brother Theo study music?")
    assert is_question("Hi! Where is it? And when?") is False  # "Hi!" is no question
    assert not is_question("I love pizza.")
    assert is_question("Would Tim enjoy reading books by C. S. Lewis or John Greene?")
    assert not is_question("I met Dr. Who. Did you?")
    assert asks_only(MemoryRecord(text="Which car do I drive?", role="user"))
    assert not asks_only(MemoryRecord(text="Which car do I drive?", role="assistant"))
    assert not asks_only(MemoryRecord(text="Which car? The red one.", role="user"))
    for request in ("Where should I eat tonight?", "Plan my weekend for me.",
                    "I need a creative project to unwind, any ideas?", "What kind of job would suit me?",
                    "What present could I make for a friend at my club?", "Recommend a film for tonight."):
        assert is_request(request), request
    for question in ("what is my wife's name?", "which car do I drive?", "How much rent do I pay?",
                     "Where should Bob eat?"):
        assert not is_request(question), question


def test_a_question_with_an_instruction_about_the_answer_is_still_only_a_question() -> None:
    assert is_question("Was the first half of September a good month for Nate? Answer yes or no.")
    assert is_question("Where did Theo study? Be brief.")
    assert not is_question("Answer yes or no.")  # no question at all
    assert not is_question("Can you find a restaurant? Keep in mind I'm vegetarian.")  # states a fact


#: Things a user asks about a Joanna their history never mentions.
JOANNA_TOPICS = (
    "script", "cork board", "laptop", "road trip", "new book", "screenplay", "writing club", "brother",
    "favourite cake", "sunset photo", "old notebooks", "hiking trail", "movie night", "rejection letter",
    "characters", "desk lamp", "coffee shop", "first draft", "agent", "deadline", "award", "garden",
    "bookshelf", "vacation", "dog", "piano", "camera", "festival", "sister", "apartment",
)


def test_a_name_only_the_users_own_questions_hold_stays_unknown_however_many_there_are(make_memory) -> None:
    # What the user said of their own fridge: close to a question about Joanna's.
    hold(make_memory, [*hobby_messages(40), "I put the kids' drawings on the fridge with magnets.",
                       "Our fridge is full of leftovers from the party."])
    for n, topic in enumerate(JOANNA_TOPICS):
        ask(make_memory, f"asked-{n}", f"What did Joanna say about her {topic}?").close()

    # Thirty earlier questions name Joanna, more than a retrieval of two records reads
    # among its candidates: her name is still one the user never stated, so nothing
    # they said is relevant.
    memory = make_memory(session_id="now", top_k=2)
    memory.put(user("What is on Joanna's fridge?"))
    memory.get()

    beyond = [r for r in memory.last_block.records if not asks_only(r)]
    assert beyond == [], message_texts(beyond)
