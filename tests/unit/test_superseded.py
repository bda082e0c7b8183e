"""A later message about the same thing supersedes an older one: the block shows both,
the older marked as possibly superseded by the later (never the older unmarked beside
the newer), and leaves two messages about different things unmarked."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from helpers import assistant, user
from llama_memory.read.compose import render_item
from llama_memory.read.superseded import SUPERSEDED_BY

JANUARY = datetime(2025, 1, 6, 19, 0, tzinfo=timezone.utc)
MARCH = datetime(2025, 3, 10, 19, 0, tzinfo=timezone.utc)

OLD_JOB = "I work at Quillbyte, a tiny mapping startup with six people and a very loud kettle."
NEW_JOB = "Last day at the startup was Friday! On Monday I start as an analyst at Ferrovane, a big consultancy."
OTHER = "My sister Marta plays the cello in a youth orchestra and practises every evening."


def said(make_memory, session: str, when: datetime, *pairs: tuple[str, str]) -> None:
    memory = make_memory(session_id=session)
    messages = []
    for n, (text, reply) in enumerate(pairs):
        stamp = when.replace(minute=2 * n).isoformat()
        messages += [user(text, timestamp=stamp), assistant(reply, timestamp=stamp)]
    memory.put_messages(messages)
    memory.close()


@pytest.fixture
def memory(make_memory):
    said(make_memory, "january", JANUARY, (OLD_JOB, "Small teams move fast!"), (OTHER, "How lovely."))
    said(make_memory, "march", MARCH, (NEW_JOB, "Congratulations on the new role!"))
    return make_memory(session_id="now")


def lines_with(text: str, word: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("- [") and word in line]


def test_the_older_value_is_marked_as_superseded_by_the_later(memory) -> None:
    memory.get("Which company am I working for these days?")

    text = memory.last_block.text
    old, new = lines_with(text, "Quillbyte"), lines_with(text, "Ferrovane")
    assert old and new, text
    # Before, both lines stood unmarked: the LLM read two employers with two dates.
    assert all("possibly superseded by [vector, 2025-03-10" in line for line in old), old
    assert not any("superseded" in line for line in new), new


def test_the_mark_is_on_the_message_and_survives_a_cut_to_it(memory) -> None:
    memory.get("Which company am I working for these days?")

    marked = [p for r in memory.last_block.records for p in (r.parts or [r]) if p.metadata.get(SUPERSEDED_BY)]
    assert [p.text for p in marked] == [OLD_JOB]
    # Rendered alone (an excerpt cut to this message for the budget), it keeps its mark.
    assert "possibly superseded" in render_item(marked[0])


def test_messages_about_different_things_are_not_marked(memory) -> None:
    memory.get("What instrument does my sister play?")

    assert "cello" in memory.last_block.text
    assert "superseded" not in memory.last_block.text


def test_no_mark_within_one_conversation(make_memory) -> None:
    said(make_memory, "one", JANUARY, (OLD_JOB, "Small teams move fast!"), (NEW_JOB, "Congratulations!"))
    memory = make_memory(session_id="now")

    memory.get("Which company am I working for these days?")

    assert "superseded" not in memory.last_block.text


def test_a_mark_never_costs_a_record_of_a_full_block(make_memory, memory) -> None:
    question = "Which company am I working for these days?"
    memory.get(question)
    whole = memory.last_block
    assert "possibly superseded" in whole.text
    # One token short of the marked block: without the marks it still fits whole.
    tight = make_memory(session_id="tight", memory_token_limit=whole.token_count - 1)

    tight.get(question)

    assert len(tight.last_block.records) == len(whole.records)
    assert "Quillbyte" in tight.last_block.text and "Ferrovane" in tight.last_block.text
    assert "possibly superseded" not in tight.last_block.text


def test_a_mark_naming_a_record_the_block_does_not_show_is_taken_off() -> None:
    from llama_memory.core.types import MemoryRecord
    from llama_memory.read.superseded import marks_of_shown

    def mark(later_id: str) -> dict[str, str]:
        return {"source": "vector", "time": "2025-03-10 19:00", "id": later_id, "text": NEW_JOB}

    old = MemoryRecord(text=OLD_JOB, source="vector", id="old", metadata={SUPERSEDED_BY: [mark("new")]})
    excerpt = MemoryRecord(text=OTHER, source="vector", id="x", parts=[
        MemoryRecord(text=OTHER, source="vector", id="other", metadata={SUPERSEDED_BY: [mark("gone"), mark("new")]}),
    ])
    plain = MemoryRecord(text=NEW_JOB, source="vector", id="new")

    # The later record "new" is shown; "gone" was left out for the budget.
    out = marks_of_shown([old, excerpt, plain], {"old", "other", "new"})

    assert out[0] is old and out[2] is plain
    assert [m["id"] for m in out[1].parts[0].metadata[SUPERSEDED_BY]] == ["new"]
    # Nothing shown to point at: the mark goes, and so does its key.
    alone = marks_of_shown([old], {"old"})
    assert SUPERSEDED_BY not in alone[0].metadata
    assert "superseded" not in render_item(alone[0])


OLD_BIKE = "My trusty steel Peugeot touring bike is older than me and the gears still click like a clock."
NEW_BIKE = "Retired the old touring bike and bought a secondhand Gazelle e-bike, hills are suddenly easy."
#: Closer to the question than either (cosine 0.45 against 0.41 and 0.32), said before both.
BIKE_PRICES = "Bicycles are so expensive now, a new road bike costs more than a used car."


def test_the_pair_is_marked_when_a_distractor_is_the_closest_statement(make_memory) -> None:
    said(make_memory, "december", JANUARY.replace(year=2024, month=12), (BIKE_PRICES, "Prices went wild."))
    said(make_memory, "january", JANUARY, (OLD_BIKE, "A bike with character!"))
    said(make_memory, "march", MARCH, (NEW_BIKE, "Hills are no longer a problem then!"))
    memory = make_memory(session_id="now")

    memory.get("Which bike do I ride these days?")

    text = memory.last_block.text
    old = lines_with(text, "Peugeot")
    assert old and lines_with(text, "Gazelle"), text
    # Before, only a pair with the closest statement was compared: the prices (closest)
    # against each bike, never the old bike against the new.
    assert all("possibly superseded by [vector, 2025-03-10" in line for line in old), old


OLD_TEST = "Finally booked my driving test: March 3rd, at the centre across town. Already nervous."
NEW_TEST = "Ugh, my instructor says the exam is off until March 17th because the examiner is ill."
#: Other records that say "March": in this store the month is no rare word.
IN_MARCH = (
    "My sister's birthday is in March, she wants a cake shaped like a cat.",
    "The garden centre opens again in March, I want to plant tomatoes.",
    "We went skiing in March last year and I broke my wrist.",
    "Our landlord raises the rent every March.",
    "In March the days finally get longer here.",
)


def test_a_common_word_only_the_pair_holds_among_what_is_asked_names_one_thing(make_memory) -> None:
    for n, text in enumerate(IN_MARCH):
        said(make_memory, f"chat-{n}", JANUARY.replace(day=1 + n), (text, "Nice."))
    said(make_memory, "january", JANUARY, (OLD_TEST, "Good luck!"))
    said(make_memory, "march", MARCH, (NEW_TEST, "More time to practise, then."))
    memory = make_memory(session_id="now")

    memory.get("When is my driving test?")

    text = memory.last_block.text
    old = lines_with(text, "March 3rd")
    assert old and lines_with(text, "March 17th"), text
    # Before, "March" (held by seven records) was no rare word, and the two (cosine
    # 0.41) were not close enough to be about one thing: both dates stood unmarked.
    assert all("possibly superseded by [vector, 2025-03-10" in line for line in old), old
