"""The second hop: what the best hit names leads to other sessions."""

from __future__ import annotations

import pytest

from helpers import hold, message_texts, user
from llama_memory.retrieval.hybrid import HOP_FOUND, link_words, second_hop
from llama_memory.retrieval.relevance import content_stems

QUESTION = "What did Caroline do after the support group?"
#: The first hop: shares the question's words, and names a place.
SEED = "Caroline: I went to the support group at the Rainbow Lighthouse yesterday, so moving."
#: The second hop: a later session about that place, without one word of the question.
LINKED = "The Rainbow Lighthouse asked me to lead their painting workshop next month!"
#: Other sessions, closer to the question's words than LINKED is.
OTHERS = (
    "Caroline: my cousin runs a support group for new parents in Leeds.",
    "I did some yoga to relax, then cooked dinner.",
    "Caroline: the dentist says my teeth are fine.",
    "I bought a new bike helmet, the old one was cracked.",
    "The weather forecast says rain all week, what a shame.",
)


@pytest.fixture
def sessions(make_memory_on):
    """SEED, LINKED and OTHERS, each said in a session of its own, on each backend (the
    hop uses the lexical index port only: word counts and a text search). The memories
    these tests open keep every record (``min_relevance=0``): what the hop finds is
    retrieved; whether the block shows it is the relevance judgement's call, by the
    record's own evidence (LINKED shares no word with the question and scores below the
    default)."""
    make = make_memory_on
    hold(make, [SEED, *OTHERS, LINKED])
    return make


def test_a_second_hop_brings_what_the_best_hit_names_from_another_session(sessions) -> None:
    memory = sessions(session_id="now", top_k=3, min_relevance=0)
    memory.get(QUESTION)
    shown = message_texts(memory.last_block.records)
    assert SEED in shown
    assert LINKED in shown  # it shares no word with the question: only the hop finds it

    memory.source("vector").hop_weight = 0  # the control: without the hop it is not found
    memory.get(QUESTION)
    assert LINKED not in message_texts(memory.last_block.records)


def test_link_words_are_the_seeds_rare_words_that_the_question_lacks() -> None:
    counts = {"caroline": 7, "support": 3, "group": 3, "rainbow": 2, "lighthouse": 2,
              "went": 40, "yesterday": 30, "moving": 1}
    # caroline, support, group: in the question; went, yesterday: too common (over 2% of
    # 1,000 records); moving: only the seed has it, it links to nothing.
    assert link_words(SEED, QUESTION, counts, total=1000) == ["rainbow", "lighthouse"]


def test_a_hop_is_worth_at_most_its_weight_times_its_seed() -> None:
    ranked = [("seed", 0.9), ("other", 0.6)]
    found = {"linked": LINKED, "yoga-fan": "Caroline: more yoga for me."}
    hop = second_hop(
        QUESTION, ranked, {"seed": SEED, "other": "Caroline: I like yoga."},
        lambda words: (1000, {w: 2 for w in words}),
        lambda text: [("linked", 8.0), ("yoga-fan", 2.0)],
        lambda ids: {i: found[i] for i in ids},
        weight=0.5,
    )
    # One search serves both seeds, but each candidate is reckoned by the seed whose
    # links it holds, normalised among that seed's: "yoga-fan" is other's best link
    # (0.5 x 0.6), not a quarter of seed's (0.5 x 0.9 x 2 / 8).
    assert hop == [("seed", 0.9), ("other", 0.6), ("linked", pytest.approx(0.45)),
                   ("yoga-fan", pytest.approx(0.3))]
    assert second_hop(QUESTION, ranked, {}, lambda w: (0, {}), lambda t: [], lambda i: {},
                      weight=0) == ranked


def test_the_hop_searches_once_for_every_seeds_link_words() -> None:
    searched: list[str] = []

    def search(text: str) -> list[tuple[str, float]]:
        searched.append(text)
        return [("linked", 1.0)]

    texts = {"a": SEED, "b": "Caroline: my cousin plays the oboe.", "c": "Caroline: I like yoga."}
    second_hop(QUESTION, [("a", 0.9), ("b", 0.8), ("c", 0.7)], texts,
               lambda words: (1000, {w: 2 for w in words}), search,
               lambda ids: {"linked": LINKED}, weight=0.5)
    assert len(searched) == 1  # one search per seed cost three times as much
    assert all(w in searched[0].split() for w in ("rainbow", "oboe", "yoga"))


def test_a_get_with_the_hop_makes_one_text_search_more(sessions) -> None:
    memory = sessions(session_id="now", top_k=3, min_relevance=0)
    store = memory.source("vector").store
    calls: list[int] = []
    rank_text = store.rank_text

    def counted(text, scope, source, exclude=(), first=30):
        calls.append(first)  # how many hits it expects to read
        return rank_text(text, scope, source, exclude, first)

    store.rank_text = counted
    memory.get(QUESTION)
    with_hop = len(calls)
    assert LINKED in message_texts(memory.last_block.records)
    # the first search ranks k x candidate_factor messages; the hop's, k x HOP_FOUND
    first, hop = calls[-2:]
    assert hop * memory.source("vector").candidate_factor == first * HOP_FOUND
    calls.clear()
    memory.source("vector").hop_weight = 0
    memory.get(QUESTION)
    assert with_hop - len(calls) == 1


def test_a_get_reads_each_record_from_the_store_once(sessions) -> None:
    memory = sessions(session_id="now", top_k=3, min_relevance=0)
    store = memory.source("vector").store
    read: list[str] = []
    get_records = store.get_records

    def spy(ids, scope, source, alive_at=None):
        read.extend(ids)
        return get_records(ids, scope, source, alive_at)

    store.get_records = spy
    # The agent flow: the user's message is stored first, and left out as the window's own;
    # the hop, that check and the excerpts each want records of the same candidates.
    memory.put(user(QUESTION))
    memory.get()
    assert LINKED in message_texts(memory.last_block.records)  # the hop ran
    assert read and sorted(read) == sorted(set(read))  # none read twice


def test_the_hop_stems_a_found_text_once_and_forgets_it_with_the_user(sessions) -> None:
    memory = sessions(session_id="now", top_k=3, min_relevance=0)
    content_stems.cache_clear()
    memory.get(QUESTION)
    assert LINKED in message_texts(memory.last_block.records)
    stemmed = content_stems.cache_info()
    memory.get(QUESTION)  # the same messages found again: their stems are not computed again
    again = content_stems.cache_info()
    assert again.hits > stemmed.hits and again.misses == stemmed.misses
    memory.forget()
    assert content_stems.cache_info().currsize == 0  # no text of a forgotten user stays held


@pytest.mark.parametrize("weight", [-0.1, 1.5])
def test_a_hop_weight_outside_zero_to_one_is_refused(make_memory, weight) -> None:
    from llama_memory.sources.vector import VectorSource

    memory = make_memory()
    source = memory.source("vector")
    with pytest.raises(ValueError, match="hop_weight"):
        VectorSource(source.store, source.index, source.embed_model, hop_weight=weight)


def test_the_bench_chooses_each_folds_weight_without_the_held_out_conversation() -> None:
    from bench.multihop import leave_one_out

    def row(conversation: str, weight: float, recall: float) -> dict:
        return {"conversation": conversation, "weight": weight, "category": "multi-hop",
                "block_recall": recall, "tokens": 1000, "get_ms": 1.0}

    # a and b gain with the hop, c loses: c's fold is chosen on a and b only (the hop,
    # whatever it costs c); a's on b and c, where c's loss outweighs b's gain (no hop).
    rows = [row("a", 0.0, 0.5), row("a", 0.5, 0.7), row("b", 0.0, 0.5), row("b", 0.5, 0.6),
            row("c", 0.0, 0.9), row("c", 0.5, 0.1)]
    folds = {f["held_out"]: f for f in leave_one_out(rows)["folds"]}
    assert folds["c"]["weight"] == 0.5 and folds["c"]["after"]["recall"]["overall"] == 0.1
    assert folds["a"]["weight"] == 0.0
    assert leave_one_out(rows, max_tokens=900)["folds"][0]["weight"] == 0.0  # every block too large


@pytest.mark.parametrize("flow", [[], ["--agent-flow"]], ids=["get(question)", "agent flow"])
def test_the_hop_cost_bench_times_get_with_and_without_the_hop(flow) -> None:
    from bench import hop_cost

    report = hop_cost.main(["--smoke", "--questions", "4", *flow])
    assert report["agent_flow"] == bool(flow)

    asks = {f"{label}, {ask}" for label in ("with", "without") for ask in ("first (embeds)", "again")}
    assert set(report["get_ms_median"]) == set(report["get_cpu_ms_median"]) == asks
    assert report["hop_ms_median"] > 0  # the hop ran (and was timed) when on
    assert report["hop_cpu_ms_median"] > 0  # in CPU time too (steadier on a shared machine)
