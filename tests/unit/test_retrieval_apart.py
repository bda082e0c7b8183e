"""Retrieval sets apart what is no answer (llama_memory/retrieval/apart.py): the message
an agent has just stored (its own query) and the user's own earlier questions take no
place among the vector source's candidates, scale no other score and seed no second
hop. So a question asked as an agent asks it (put, then get() with no input) finds what
get(question) finds, and earlier questions kept in the store change nothing of the
statements found. Real SQLite and Chroma, the real offline embedding model."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.first_person import hobby_messages
from helpers import hold, memory_factory, message_texts, user
from llama_memory import MemoryAdmin
from llama_memory.retrieval.apart import grown, more_needed, search_beside, take_beside
from llama_memory.retrieval.reads import KnownLines
from llama_memory.retrieval.relevance import asks_only

#: What the user told, one message per session, among 60 hobby messages.
FACTS = (
    "My brother Theo plays the cello in a quartet.",
    "Theo studied music at the conservatory in Lyon.",
    "The Riverside jazz club closed for renovations last spring.",
    "I met Theo's teacher at the Riverside jazz club once.",
    "Theo's quartet rehearses every Thursday evening.",
    "My sister Ana moved to Porto for her new job.",
    "Ana works as a dentist near the harbour.",
)
QUESTIONS = (
    "What instrument does my brother Theo play?",
    "Where did Theo study music?",
    "When does Theo's quartet rehearse?",
    "Where does Ana work?",
    "What happened to the Riverside jazz club?",
)
#: Questions the user asked before, kept in their history: close to the ones above.
EARLIER = (
    "What instrument does Theo play?",
    "Does Theo play in a quartet?",
    "Where does Theo rehearse?",
    "Is Theo good at music?",
    "Did Theo study the cello?",
    "What does Ana do in Porto?",
)


def as_agent(make, session_id: str, question: str, top_k: int) -> list[str]:
    """Ask ``question`` as the first message of a new conversation: the texts shown."""
    memory = make(session_id=session_id, top_k=top_k)
    memory.put(user(question))
    memory.get()
    texts = message_texts(memory.last_block.records)
    memory.close()
    return texts


@pytest.mark.parametrize("top_k", [2, 5])
def test_a_question_asked_as_an_agent_finds_what_get_of_it_finds(tmp_path: Path, embed_model, top_k: int) -> None:
    path = tmp_path / "memory"
    with memory_factory(embed_model, path=path) as make:
        hold(make, [*hobby_messages(60), *FACTS])
        admin = MemoryAdmin(path)
        for n, question in enumerate(QUESTIONS):
            memory = make(session_id=f"get-{n}", top_k=top_k)
            memory.get(question)
            by_get = message_texts(memory.last_block.records)
            memory.close()

            by_agent = as_agent(make, f"ask-{n}", question, top_k)
            # The question just put is stored, but takes no candidate's place: the same
            # records, as many of them.
            assert sorted(by_agent) == sorted(by_get), question
            for record in admin.records(memory.user_id, session_id=f"ask-{n}"):  # taken back
                admin.delete_record(memory.user_id, record.id)
        admin.close()


@pytest.mark.parametrize("top_k", [2, 3])
def test_earlier_questions_take_no_statements_place(tmp_path: Path, embed_model, top_k: int) -> None:
    shown = {}
    for kept in (False, True):
        with memory_factory(embed_model, path=tmp_path / f"kept-{kept}") as make:
            hold(make, [*hobby_messages(60), *FACTS])
            if kept:
                for n, earlier in enumerate(EARLIER):
                    as_agent(make, f"earlier-{n}", earlier, top_k)
            shown[kept] = [as_agent(make, f"ask-{n}", q, top_k) for n, q in enumerate(QUESTIONS)]
    # The earlier questions are close to these, but the statements found are the same,
    # as if they were not stored; none of them is shown while statements fill the places.
    assert shown[True] == shown[False]
    assert not {t for texts in shown[True] for t in texts} & set(EARLIER)


def test_earlier_questions_come_after_every_statement_when_there_is_room(make_memory) -> None:
    hold(make_memory, [FACTS[0], FACTS[4]])
    for n, earlier in enumerate(EARLIER[:3]):
        as_agent(make_memory, f"earlier-{n}", earlier, 10)
    memory = make_memory(session_id="now")
    records = memory.source("vector").retrieve("Which instrument does Theo play in his quartet?", memory.scope, 10)
    kinds = [asks_only(r) for r in records]
    assert kinds == sorted(kinds) and kinds.count(True) == 3  # kept, after the statements


def beside(ranking, aside, pool, first=3):
    return take_beside(iter(ranking), lambda ids: {i for i in ids if i in aside}, pool, first)[0]


def test_a_cut_keeps_pool_others_and_the_ids_set_apart_before_the_last_of_them() -> None:
    ranking = [("q1", 0.9), ("a", 0.8), ("q2", 0.7), ("b", 0.6), ("c", 0.5), ("q3", 0.4)]
    # q3 ranks past the second other: however far the ranking was read, the cut is the same.
    assert beside(ranking, {"q1", "q2", "q3"}, 2) == [("q1", 0.9), ("a", 0.8), ("q2", 0.7), ("b", 0.6)]
    assert beside(ranking[:4], {"q1", "q2", "q3"}, 2) == beside(ranking, {"q1", "q2", "q3"}, 2)
    for first in (1, 2, 6, 10):  # read a few at a time or all at once
        assert beside(ranking, {"q1", "q2", "q3"}, 2, first) == beside(ranking, {"q1", "q2", "q3"}, 2)
    assert beside(ranking, {"q1", "q2", "q3"}, 9) == ranking  # fewer others than the pool: all
    assert beside(ranking, set(), 2) == ranking[:2]
    kept, aside = take_beside(iter(ranking), lambda ids: {i for i in ids if i.startswith("q")}, 2, 2)
    assert aside == {"q1", "q2"}  # q3, past the cut, is not among them


class Apart:
    """Sets apart the questions ``q*``; the searches leave out ``excluded`` themselves."""

    excluded = frozenset({"own"})

    def __call__(self, ids) -> set[str]:
        return {i for i in ids if i.startswith("q")}


def test_a_search_leaves_out_the_window_itself_and_is_read_further_while_questions_leave_it_short() -> None:
    hits = [("own", 1.0), ("q1", 0.95), ("q2", 0.9), ("a", 0.8), ("b", 0.7), ("c", 0.6)]
    searched: list[int] = []

    def ranking(exclude):
        searched.append(1)
        yield from (hit for hit in hits if hit[0] not in exclude)

    # Both first hits are questions: the one search is read further, never asked again.
    assert search_beside(ranking(Apart.excluded), Apart(), 2, 2) == [("a", 0.8), ("b", 0.7)]
    assert search_beside(ranking(Apart.excluded), Apart(), 2, 4) == [("a", 0.8), ("b", 0.7)]
    assert search_beside(ranking(Apart.excluded), Apart(), 9, 9) == [("a", 0.8), ("b", 0.7), ("c", 0.6)]
    assert len(searched) == 3


def test_a_search_that_answers_only_a_count_is_asked_for_four_times_as_many_when_read_past() -> None:
    hits = [("own", 1.0), ("q1", 0.95), ("q2", 0.9), ("a", 0.8), ("b", 0.7), ("c", 0.6)]
    asked: list[int] = []

    def search(n: int, exclude) -> list[tuple[str, float]]:
        asked.append(n)
        return [hit for hit in hits if hit[0] not in exclude][:n]

    assert search_beside(grown(search, Apart.excluded, 2), Apart(), 2, 2) == [("a", 0.8), ("b", 0.7)]
    assert asked == [2, 8]  # both questions: asked for four times as many, once
    asked.clear()
    assert search_beside(grown(search, Apart.excluded, 4), Apart(), 2, 4) == [("a", 0.8), ("b", 0.7)]
    assert asked == [4]  # the spare expected the questions: one search
    asked.clear()
    assert search_beside(grown(search, Apart.excluded, 9), Apart(), 9, 9) == [("a", 0.8), ("b", 0.7), ("c", 0.6)]
    assert asked == [9]  # it gave fewer than asked: nothing more to find


def test_more_is_read_at_the_share_set_apart() -> None:
    assert more_needed(10, 10, 5) == 10  # half set apart: twenty in all
    assert more_needed(10, 20, 15) == 20  # three in four: forty
    assert more_needed(10, 10, 10) == 30  # none found: four times as many
    assert more_needed(10, 10, 9) == 30  # and never more than four times


def test_the_candidates_are_set_apart_from_their_texts_only_whole_records_are_read_for_the_results(
    make_memory,
) -> None:
    hold(make_memory, [*hobby_messages(40), *FACTS])
    memory = make_memory(session_id="now", top_k=3)
    question = "What instrument does my brother Theo play?"
    memory.put(user(question))
    source = memory.source("vector")
    store = source.store
    read_whole: list[str] = []
    read_light: list[str] = []
    get_records, get_texts = store.get_records, store.get_texts

    def spy_records(ids, *args, **kwargs):
        read_whole.extend(ids)
        return get_records(ids, *args, **kwargs)

    def spy_texts(ids, *args, **kwargs):
        read_light.extend(ids)
        return get_texts(ids, *args, **kwargs)

    store.get_records, store.get_texts = spy_records, spy_texts
    try:
        records = source.retrieve_beside(question, memory.scope, 3, frozenset([question.casefold()]))
    finally:
        del store.get_records, store.get_texts
    members = {p.id for r in records for p in (r.parts or [r])}
    assert records and len(set(read_light)) > 3 * len(members)  # every candidate checked...
    assert set(read_whole) <= members  # ...but only what is returned is read whole
    assert len(read_light) == len(set(read_light))  # and each once


def test_the_lines_of_candidates_are_held_by_id_and_their_text_decides_whether_they_ask() -> None:
    known = KnownLines(held=2)
    assert known.line("a", "user", "Where is Theo?") == ("user", "Where is Theo?", True)
    assert known.line("b", "assistant", "Where is Theo?") == ("assistant", "Where is Theo?", False)
    assert known.get(["a", "b", "c"]) == {"a": ("user", "Where is Theo?", True), "b": ("assistant", "Where is Theo?", False)}
    # The same id with another text (deleted, written again otherwise): found again.
    assert known.line("a", "user", "Theo is in Lyon.") == ("user", "Theo is in Lyon.", False)
    known.line("c", "user", "Where is Ana?")
    assert set(known.get(["a", "b", "c"])) == {"a", "c"}  # the oldest went
    known.clear()
    assert known.get(["a", "c"]) == {}


def test_forgetting_a_user_forgets_the_lines_held_of_their_candidates(make_memory) -> None:
    hold(make_memory, FACTS)
    memory = make_memory(session_id="now")
    source = memory.source("vector")
    assert source.retrieve("Where does Ana work?", memory.scope, 3)
    assert source._lines.get([r.id for r in source.store.recent_records(memory.scope, "vector", 50)])
    source.reset(memory.scope)
    assert source._lines._known == {}
