"""Excerpts: fused hits grouped with their session neighbours, on a real SQLite store
and the real offline model."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.utils import get_tokenizer

from helpers import assistant, user
from llama_memory import ComposableMemory, OfflineEmbedding
from llama_memory.core.types import MemoryRecord, Scope
from llama_memory.read.compose import block_from_records, deduplicate
from llama_memory.retrieval import fuse_scores
from llama_memory.retrieval.excerpts import gap_line, hit_of, join_parts, pack_excerpts
from llama_memory.sources.vector import VectorSource
from llama_memory.storage.sqlite import NewRecord, SQLiteStore

ALICE = Scope(user_id="alice", session_id="s1")


def _write(store: SQLiteStore, scope: Scope, texts: list[str], prefix: str) -> list[str]:
    return store.add_records([
        NewRecord(source="vector", scope=scope, text=t, message_ids=(f"{prefix}{n}",),
                  event_time=None, role="user" if n % 2 == 0 else "assistant")
        for n, t in enumerate(texts)
    ])


@pytest.fixture
def store(tmp_path: Path):
    store = SQLiteStore(tmp_path / "memory")
    store.ensure_session_order()
    yield store
    store.close()


@pytest.fixture
def two_sessions(store: SQLiteStore) -> tuple[list[str], list[str]]:
    one = _write(store, ALICE, [f"first session message {n}" for n in range(8)], "a")
    # Another user's records are written between the two sessions: neighbours are per
    # session and user, not per row number.
    _write(store, Scope(user_id="bob", session_id="s1"), ["bob's note", "bob again"], "b")
    two = _write(store, Scope(user_id="alice", session_id="s2"),
                 [f"second session message {n}" for n in range(5)], "c")
    return one, two


def test_fusion_scales_each_retriever_and_gives_lexical_hits_their_cosine() -> None:
    lexical = [("a", 8.0), ("b", 4.0)]
    dense = {"c": 0.9, "b": 0.7, "d": 0.5, "a": 0.5}
    fused = dict(fuse_scores(lexical, dense))
    # a: best words (1.0), worst cosine (0.0): the words count half, as far as it is
    # in meaning; b: half the words, cosine half way (the words count three quarters)
    assert fused["a"] == pytest.approx(0.5 * 0.5)
    assert fused["b"] == pytest.approx(0.5 * 0.5 * 0.75 + 0.5 * 0.5)
    assert fused["c"] == pytest.approx(0.5)  # no word in common, best cosine
    assert fused["d"] == pytest.approx(0.0)
    assert [i for i, _ in fuse_scores(lexical, dense, dense_weight=0)] == ["a", "b"]
    assert [i for i, _ in fuse_scores(lexical, dense, lexical_weight=0)][0] == "c"
    assert fuse_scores([], {}) == []


def test_session_neighbours_stay_in_the_session_and_the_user(store, two_sessions) -> None:
    one, two = two_sessions
    found = store.session_neighbours([one[0], one[7], two[1]], ALICE, "vector", radius=2)
    assert {hit: [i for _, i in around] for hit, around in found.items()} == {
        one[0]: one[0:3], one[7]: one[5:8], two[1]: two[0:4]
    }
    # bob's records are neither neighbours nor reachable through alice's scope
    bob_ids = store.search_text("bob", Scope(user_id="bob"), "vector", 5)
    assert bob_ids and store.session_neighbours([i for i, _ in bob_ids], ALICE, "vector", 2) == {}


def test_packing_joins_near_hits_fills_the_budget_and_respects_k(store, two_sessions) -> None:
    one, two = two_sessions
    asked: list[list[str]] = []

    def around(ids):
        asked.append(list(ids))
        return store.session_neighbours(ids, ALICE, "vector", 2)

    ranked = [(one[3], 0.9), (two[0], 0.8), (one[5], 0.7), (one[6], 0.6), (two[4], 0.5)]
    excerpts = pack_excerpts(ranked, around, k=2, max_messages=5)
    # one[5] is two messages from the first excerpt: it joins with one[4] between;
    # one[6] is adjacent and joins; the budget of 5 messages is then full.
    assert [e.record_ids for e in excerpts] == [one[3:7], two[0:1]]
    assert [e.score for e in excerpts] == [0.9, 0.8]
    # once k excerpts exist, only hits next to one are looked up: two[4] never is
    assert asked == [[one[3], two[0]], [one[5]], [one[6]]]
    # with budget left, each excerpt gains the message after it, then the one before
    roomy = pack_excerpts(ranked[:2], around, k=2, max_messages=8)
    assert [e.record_ids for e in roomy] == [one[2:5], two[0:2]]
    records = store.get_records(one, ALICE, "vector")
    record = roomy[0].as_record(records)
    assert record is not None
    assert record.message_ids == ["a2", "a3", "a4"]
    assert record.text.splitlines() == [
        "user: first session message 2", "assistant: first session message 3",
        "user: first session message 4",
    ]
    assert record.id == one[3] and record.score == 0.9
    # a lone hit stays the record it was; a hit deleted meanwhile gives nothing
    single = pack_excerpts(ranked[:1], around, k=1, max_messages=1)[0]
    lone = single.as_record(records)
    assert lone is not None and lone.text == "first session message 3" and lone.role == "assistant"
    assert single.as_record({}) is None


def test_a_question_comes_back_with_its_answer(tmp_path: Path, embed_model: OfflineEmbedding) -> None:
    memory = ComposableMemory.from_defaults(
        user_id="mel", session_id="s1", path=tmp_path / "m", embed_model=embed_model
    )
    try:
        filler = [user(f"Today I watered the {plant}.") for plant in
                  ("roses", "tulips", "cactus", "ferns", "orchids", "basil")]
        memory.put_messages([
            *filler[:3],
            user("How long have you been married?", message_id="q"),
            assistant("Five years already, time flies!", message_id="a"),
            *filler[3:],
        ])
        top = memory.search("How long has Mel been married?", k=1)[0]
        assert {"q", "a"} <= set(top.message_ids)
        assert "Five years already" in top.text
        single = memory.source("vector")
        single.excerpt_messages = 1  # type: ignore[attr-defined]
        # One message per record: each alone (the question, which states nothing, ranks
        # after the statements).
        assert [r.message_ids for r in memory.search("How long has Mel been married?", k=1)] == [["a"]]
    finally:
        memory.close()


def test_a_standalone_statement_is_found_as_itself_beside_a_conversation(
    tmp_path: Path, embed_model: OfflineEmbedding
) -> None:
    """Statements put with additional_kwargs standalone=True (what the MCP server's
    add_memory writes) come back alone, in a search and in a time-based retrieval, while
    the conversation around them still forms excerpts; a mark that is not a bool is
    refused before anything is stored."""
    memory = ComposableMemory.from_defaults(user_id="mel", session_id="s1", path=tmp_path / "m", embed_model=embed_model)
    try:
        memory.put_messages([
            user("My cat is called Miso.", message_id="cat", standalone=True),
            user("How long have you been married?", message_id="q"),
            assistant("Five years already, time flies!", message_id="a"),
            user("I prefer dark mode in every editor.", message_id="dark", standalone=True),
            user("My sister lives in Berlin.", message_id="sister", standalone=True),
        ])
        found = {tuple(r.message_ids): r for r in memory.search("dark mode editor", k=5)}
        assert set(found) == {("cat",), ("q", "a"), ("dark",), ("sister",)}
        assert found[("dark",)].text == "I prefer dark mode in every editor." and not found[("dark",)].parts
        assert found[("dark",)].metadata["standalone"] is True
        married = memory.search("How long has Mel been married?", k=1)[0]
        assert married.message_ids == ["q", "a"]
        # "Last time", as a later session sees it: each statement alone, the turns together.
        recent = memory.source("vector").recent(replace(memory.scope, session_id="s2"), 5)  # type: ignore[attr-defined]
        assert sorted(r.message_ids for r in recent) == [["cat"], ["dark"], ["q", "a"], ["sister"]]
        with pytest.raises(ValueError, match="standalone.*must be True or False"):
            memory.put(user("Not stored.", standalone="yes"))
        assert "Not stored." not in [m.content for m in memory.get_all()]
    finally:
        memory.close()


def _excerpt(texts: list[str], hit: int) -> MemoryRecord:
    parts = [
        MemoryRecord(text=t, source="vector", role="user" if n % 2 == 0 else "assistant",
                     id=f"r{n}", message_ids=[f"m{n}"])
        for n, t in enumerate(texts)
    ]
    parts[hit].score = 0.7
    return join_parts(parts, parts[hit])


def test_the_block_drops_shown_parts_and_cuts_a_long_excerpt_to_its_hit() -> None:
    tokenizer = get_tokenizer()
    record = _excerpt(["I adopted a cat.", "Her name is Luna.", "She likes tuna."], hit=1)
    assert record.message_ids == ["m0", "m1", "m2"] and record.score == 0.7
    # The window already shows the first message: the excerpt keeps the other two.
    block = block_from_records([record], window=[user("I adopted a cat.")], token_limit=500,
                          tokenizer=tokenizer)
    [shown] = block.records
    assert [p.text for p in shown.parts] == ["Her name is Luna.", "She likes tuna."]
    assert shown.message_ids == ["m1", "m2"] and "I adopted a cat" not in block.text
    # A budget too small for the whole excerpt still gets the message that made it.
    # (+2: the budget counts each line with its newline, so it errs by a token or two)
    small = 2 + block_from_records([hit_of(record)], window=[], token_limit=500,
                              tokenizer=tokenizer).token_count
    assert block_from_records([record], window=[], token_limit=500,
                         tokenizer=tokenizer).token_count > small + 5
    block = block_from_records([record], window=[], token_limit=small, tokenizer=tokenizer)
    assert [r.text for r in block.records] == ["Her name is Luna."]
    assert block.token_count <= small
    assert block.dropped_for_budget == 2  # the two messages cut from the excerpt
    # An excerpt whose every message is shown already is dropped as a duplicate.
    kept, dropped = deduplicate([record], ["I adopted a cat.", "Her name is Luna.", "She likes tuna."])
    assert (kept, dropped) == ([], 1)


def test_an_excerpt_budget_below_one_message_per_record_is_refused(store: SQLiteStore) -> None:
    from llama_memory.storage.chroma import DenseIndex, ephemeral_client

    index = DenseIndex(ephemeral_client(), DenseIndex.unique_prefix("t"))
    with pytest.raises(ValueError, match="excerpt_messages must be 1.*got 0.5"):
        VectorSource(store, index, MockEmbedding(embed_dim=8), excerpt_messages=0.5)


def test_a_part_cut_from_the_middle_of_an_excerpt_leaves_a_gap_marker() -> None:
    # user / assistant / user / assistant: the window shows the second user message.
    record = _excerpt(["Do you cook?", "Mostly pasta.", "What about fish?", "Never, I'm vegetarian."],
                      hit=3)
    [shown], dropped = deduplicate([record], ["What about fish?"])
    assert dropped == 0 and len(shown.parts) == 3
    lines = shown.text.split("\n")
    # Without the marker the LLM would read "assistant: Mostly pasta." answered by
    # "assistant: Never, I'm vegetarian." as if one turn followed the other.
    assert lines == [
        "user: Do you cook?",
        "assistant: Mostly pasta.",
        gap_line(1),
        "assistant: Never, I'm vegetarian.",
    ]
    block = block_from_records([record], window=[user("What about fish?")], token_limit=500,
                          tokenizer=get_tokenizer())
    assert "1 message left out here" in block.text and "What about fish" not in block.text
    # Parts cut at either end need no marker; a second cut keeps the first one's gap,
    # and adds its own to the count when it is next to it.
    [edge], _ = deduplicate([record], ["Do you cook?"])
    assert "left out" not in edge.text and edge.text.startswith("assistant: Mostly pasta.")
    [twice], _ = deduplicate([shown], ["Mostly pasta."])
    assert twice.text.split("\n") == ["user: Do you cook?", gap_line(2), "assistant: Never, I'm vegetarian."]


def test_every_line_of_an_excerpt_names_its_speaker_and_none_prints_none() -> None:
    record = _excerpt(["I adopted a cat.", "Her name is Luna."], hit=0)
    assert record.role is None  # an excerpt has several speakers
    assert record.transcript.split("\n") == ["user: I adopted a cat.", "assistant: Her name is Luna."]
    assert record.parts[1].transcript == "assistant: Her name is Luna."
    assert "None" not in record.transcript
    assert MemoryRecord(text="Alice lives in Lisbon", source="triples").transcript == "Alice lives in Lisbon"


def test_the_block_itemises_what_it_left_out_and_why() -> None:
    from llama_memory.read.compose import CUT_TO_FIT, DUPLICATE, OVER_BUDGET

    tokenizer = get_tokenizer()
    shown = MemoryRecord(text="I adopted a cat.", source="vector", role="user", id="shown")
    long = _excerpt(["Her name is Luna.", "She likes tuna " * 20, "And naps all day " * 20], hit=0)
    other = MemoryRecord(text="Bob lives in Porto " * 30, source="vector", role="user", id="other")
    small = 2 + block_from_records([hit_of(long)], window=[], token_limit=500, tokenizer=tokenizer).token_count
    block = block_from_records([shown, long, other], window=[user("I adopted a cat.")],
                          token_limit=small, tokenizer=tokenizer)
    assert [r.text for r in block.records] == ["Her name is Luna."]
    assert [(item.record.id, item.reason) for item in block.left_out] == [
        ("shown", DUPLICATE), ("other", OVER_BUDGET), (long.id, CUT_TO_FIT)
    ]
    assert block.left_out[2].record is long  # the whole excerpt, as retrieved
    assert block.dropped_duplicates == 1
    assert block.dropped_for_budget == 3  # two messages cut from the excerpt, and "other"


def test_wide_neighbourhoods_give_the_same_excerpts_in_fewer_reads(store) -> None:
    import random

    from llama_memory.retrieval.excerpts import WideNeighbourhoods

    # Three sessions written interleaved (a row of each in turn, and another user's
    # rows between), some short: windows end at session edges and mid-session.
    ids: list[str] = []
    for n in range(30):
        for session in ("s1", "s2", "s3"):
            if session == "s3" and n >= 4:
                continue
            ids += _write(store, Scope(user_id="alice", session_id=session), [f"{session} message {n}"], f"{session}-{n}-")
        _write(store, Scope(user_id="bob", session_id="s1"), [f"bob {n}"], f"b{n}-")
    rng = random.Random(5)
    direct_reads = wide_reads = 0
    for trial in range(200):
        ranked = [(i, 1.0 - n / 100) for n, i in enumerate(rng.sample(ids, rng.randint(1, 40)))]
        k, budget = rng.randint(1, 8), rng.randint(1, 30)

        def direct(asked):
            nonlocal direct_reads
            direct_reads += 1
            return store.session_neighbours(asked, ALICE, "vector", 2)

        def read(asked, radius):
            nonlocal wide_reads
            wide_reads += 1
            return store.session_neighbours(asked, ALICE, "vector", radius)

        expected = pack_excerpts(ranked, direct, k, budget)
        got = pack_excerpts(ranked, WideNeighbourhoods(read, 2), k, budget)
        assert [(e.record_ids, e.hit, e.score) for e in got] == [(e.record_ids, e.hit, e.score) for e in expected], trial
    assert wide_reads < 0.8 * direct_reads, (wide_reads, direct_reads)


def test_a_megabyte_neighbour_is_cut_alike_in_search_the_block_and_explain(
    tmp_path: Path, embed_model: OfflineEmbedding
) -> None:
    from llama_memory import MemoryAdmin
    from llama_memory.retrieval.excerpts import NEIGHBOUR_CHARS

    paste = "Here is the log you asked for: " + "lorem ipsum dolor " * 60_000  # about 1 MB
    memory = ComposableMemory.from_defaults(
        user_id="mel", session_id="s1", path=tmp_path / "m", embed_model=embed_model
    )
    try:
        memory.put_messages([
            user("Please keep my old server log."),
            assistant(paste),
            user("I play the cello every evening."),
            assistant("Lovely, how long have you played?"),
        ])
        [found] = memory.search("cello", k=1)
        # The hit is whole; its neighbours, the megabyte among them, are cut.
        assert "user: I play the cello every evening." in found.text
        assert len(found.text) < 4 * NEIGHBOUR_CHARS
        assert "more characters …]" in found.text and paste[-NEIGHBOUR_CHARS:] in found.text
        assert any(len(p.text) == len(paste) for p in found.parts)  # the stored text stays whole
        later = ComposableMemory.from_defaults(
            user_id="mel", session_id="s2", path=tmp_path / "m", embed_model=embed_model
        )
        try:
            later.get("Which instrument do I play, the cello?")
            [shown] = later.last_block.records
        finally:
            later.close()
        # The block shows the excerpt with the paste cut as the search result shows it
        # (before, the excerpt never fitted and the block cut it to the hit alone).
        [cut_line] = [line for line in found.text.split("\n") if "more characters" in line]
        assert cut_line in shown.text.split("\n") and len(shown.parts) > 1
    finally:
        memory.close()
    with MemoryAdmin(tmp_path / "m", embed_model=embed_model) as admin:
        [explained] = admin.explain("mel", "Which instrument do I play, the cello?").records
        assert explained.text == shown.text
        assert [r.text for r in admin.search("mel", "cello", k=1)] == [found.text]


def test_a_neighbour_standing_in_for_a_dropped_hit_is_cut_too() -> None:
    from llama_memory.retrieval.excerpts import NEIGHBOUR_CHARS, neighbour_text

    long = "word " * 1000
    record = _excerpt(["What did you paste?", long, "Thanks."], hit=0)
    assert record.text.split("\n")[1] == f"assistant: {neighbour_text(long)}"
    assert neighbour_text("short") == "short" and neighbour_text(long).startswith(long[:NEIGHBOUR_CHARS])
    assert neighbour_text(long, keep_end=True).endswith(long[-NEIGHBOUR_CHARS:])
    # The window shows the hit: the long neighbour stands in for it, still cut.
    [left], _ = deduplicate([record], ["What did you paste?"])
    assert hit_of(left).text == neighbour_text(long) and len(left.text) < 2 * NEIGHBOUR_CHARS
