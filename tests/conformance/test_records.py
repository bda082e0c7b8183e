"""Records: persistence, dedup, expiry, isolation, forgetting, through the ports."""

from __future__ import annotations

from llama_memory.core.types import Scope
from llama_memory.storage.ports import NewRecord
from llama_memory.storage.sql.store import Storage

ALICE = Scope(user_id="alice", session_id="s1")
BOB = Scope(user_id="bob", session_id="s1")


def note(text: str, scope: Scope = ALICE, mid: str = "m1", **kwargs) -> NewRecord:
    return NewRecord(source="vector", scope=scope, text=text, message_ids=(mid,), event_time=1.0, **kwargs)


def test_a_record_written_is_read_back_by_another_store_object(backend) -> None:
    first: Storage = backend.open()
    [record_id] = first.add_records([note("I keep bees on the roof", role="user")])
    first.close()
    again = backend.open()
    record = again.get_records([record_id], ALICE, "vector")[record_id]
    assert (record.text, record.role, record.user_id, record.message_ids) == (
        "I keep bees on the roof", "user", "alice", ["m1"]
    )
    assert again.count_records("vector", ALICE) == 1


def test_the_same_text_is_stored_once_and_collects_its_message_ids(backend) -> None:
    store = backend.open()
    first = store.add_records([note("Bees  ON the roof", mid="m1")])
    second = store.add_records([note("bees on the roof", mid="m2")])
    assert first == second
    assert store.get_records(first, ALICE, "vector")[first[0]].message_ids == ["m1", "m2"]
    assert store.count_records("vector") == 1
    # Another user's identical text is theirs: a record of its own.
    assert store.add_records([note("bees on the roof", BOB)]) != first


def test_reads_never_cross_users_or_sources(backend) -> None:
    store = backend.open()
    [mine] = store.add_records([note("my locker code is 4471")])
    store.add_records([note("my locker code is 9902", BOB)])
    assert store.get_records([mine], BOB, "vector") == {}
    assert store.get_records([mine], ALICE, "triples") == {}
    assert [i for i, _ in store.search_text("locker code", ALICE, "vector", 10)] == [mine]
    assert store.search_text("locker", Scope(user_id="carol"), "vector", 10) == []


def test_texts_are_read_as_records_are_without_a_time(backend) -> None:
    store = backend.open()
    [asked] = store.add_records([note("Where is my locker?", role="user")])
    [short] = store.add_records([note("parking spot 12", ttl=10.0, expires_at=110.0)])
    [other] = store.add_records([note("my locker code is 9902", BOB)])
    both = [asked, short, other, "no-such-id"]
    assert store.get_texts(both, ALICE, "vector") == {asked: ("user", "Where is my locker?"), short: (None, "parking spot 12")}
    assert set(store.get_texts(both, ALICE, "vector")) == set(store.get_records(both, ALICE, "vector"))
    assert store.get_texts([asked], ALICE, "triples") == {}
    assert store.get_texts([], ALICE, "vector") == {}
    store.purge_expired(111.0)
    assert set(store.get_texts(both, ALICE, "vector")) == {asked}


def test_expired_records_are_not_read_and_purge_deletes_them(backend) -> None:
    store = backend.open()
    [short] = store.add_records([note("parking spot 12", ttl=10.0, expires_at=110.0)])
    [lasting] = store.add_records([note("born in Lyon")])
    assert set(store.get_records([short, lasting], ALICE, "vector", alive_at=100.0)) == {short, lasting}
    assert set(store.get_records([short, lasting], ALICE, "vector", alive_at=111.0)) == {lasting}
    gone = store.purge_expired(111.0)
    assert [g.id for g in gone] == [short]
    assert store.get_records([short], ALICE, "vector") == {}


def test_stating_a_record_again_renews_it_and_forever_wins(backend) -> None:
    store = backend.open()
    [record_id] = store.add_records([note("parking spot 12", ttl=10.0, expires_at=110.0)])
    store.add_records([note("parking spot 12", ttl=10.0, expires_at=150.0)])
    assert store.get_records([record_id], ALICE, "vector")[record_id].expires_at == 150.0
    store.add_records([note("parking spot 12", ttl=10.0, expires_at=120.0)])  # earlier: kept
    assert store.get_records([record_id], ALICE, "vector")[record_id].expires_at == 150.0
    store.add_records([note("parking spot 12")])  # kept forever now
    assert store.get_records([record_id], ALICE, "vector")[record_id].expires_at is None


def test_refresh_on_read_moves_the_expiry_of_records_with_a_ttl_only(backend) -> None:
    store = backend.open()
    [short] = store.add_records([note("parking spot 12", ttl=10.0, expires_at=110.0)])
    [lasting] = store.add_records([note("born in Lyon")])
    store.refresh_expiry([short, lasting], 200.0)
    rows = store.get_records([short, lasting], ALICE, "vector")
    assert (rows[short].expires_at, rows[lasting].expires_at) == (210.0, None)


def test_forgetting_a_user_deletes_their_rows_of_every_kind_and_no_one_elses(backend) -> None:
    from llama_index.core.base.llms.types import ChatMessage

    store = backend.open()
    [mine] = store.add_records([note("my locker code is 4471")])
    [theirs] = store.add_records([note("my locker code is 9902", BOB)])
    store.chat_log(ALICE).append([ChatMessage(role="user", content="hello")])
    store.chat_log(BOB).append([ChatMessage(role="user", content="hi")])
    store.enqueue("extract", {"n": 1}, tenant_id="default", user_id="alice")
    assert store.delete_user(ALICE) == [mine]
    assert store.get_records([mine], ALICE, "vector") == {}
    assert store.search_text("locker", ALICE, "vector", 10) == []
    assert store.chat_log(ALICE).load() == []
    assert store.claim("w") is None  # their queued job went with them
    assert set(store.get_records([theirs], BOB, "vector")) == {theirs}
    assert [m.content for m in store.chat_log(BOB).load()] == ["hi"]


def test_index_flags_follow_the_writes_and_reindexing(backend) -> None:
    store = backend.open()
    ids = store.add_records([note("one"), note("two")])
    assert [p.id for p in store.pending_records("vector", 10)] == ids
    store.mark_indexed(ids[:1], vectors=[b"\x00\x3c" * 4])
    assert [p.id for p in store.pending_records("vector", 10)] == ids[1:]
    assert store.stored_vectors(ids) == {ids[0]: b"\x00\x3c" * 4}
    assert store.index_flags("vector") == {("default", "alice"): {ids[0]: True, ids[1]: False}}
    assert store.mark_all_unindexed("vector") == 2
    assert store.stored_vectors(ids) == {}


def test_session_neighbours_are_in_write_order(backend) -> None:
    store = backend.open()
    store.ensure_session_order()
    ids = store.add_records([note(f"turn {n}", mid=f"m{n}") for n in range(5)])
    around = store.session_neighbours([ids[2]], ALICE, "vector", 1)[ids[2]]
    assert [record_id for _, record_id in around] == ids[1:4]
    assert [p for p, _ in around] == sorted(p for p, _ in around)


def test_a_standalone_record_has_no_session_neighbours_and_is_none(backend) -> None:
    """A statement stored on its own (metadata "standalone") is found as itself: it
    never joins the messages around it in its session, nor they it."""
    store = backend.open()
    store.ensure_session_order()
    alone = {"standalone": True}
    ids = store.add_records([
        note("turn 0", mid="m0"), note("kept alone", mid="m1", metadata=alone), note("turn 2", mid="m2"),
        note("also alone", mid="m3", metadata=alone), note("turn 4", mid="m4"),
        note("not marked", mid="m5", metadata={"standalone": False}),
    ])
    around = store.session_neighbours(ids, ALICE, "vector", 2)
    assert [i for _, i in around[ids[1]]] == [ids[1]]
    assert [i for _, i in around[ids[3]]] == [ids[3]]
    assert [i for _, i in around[ids[2]]] == [ids[0], ids[2], ids[4], ids[5]]
    assert [i for _, i in around[ids[4]]] == [ids[0], ids[2], ids[4], ids[5]]


def test_recent_records_are_the_latest_earlier_session_or_a_span_of_time(backend) -> None:
    store = backend.open()
    earlier = Scope(user_id="alice", session_id="monday")
    store.add_records([
        NewRecord(source="vector", scope=earlier, text=f"monday {n}", message_ids=(f"a{n}",), event_time=100.0 + n)
        for n in range(3)
    ])
    store.add_records([
        NewRecord(source="vector", scope=ALICE, text="today", message_ids=("t",), event_time=500.0),
        NewRecord(source="vector", scope=BOB, text="bob later", message_ids=("b",), event_time=900.0),
    ])
    # "Last time": the latest session other than the scope's own, oldest first, at most limit.
    assert [r.text for r in store.recent_records(ALICE, "vector", 2)] == ["monday 1", "monday 2"]
    # A span of event time, whatever the session; another user's records never.
    assert [r.text for r in store.recent_records(ALICE, "vector", 10, (101.0, 501.0))] == [
        "monday 1", "monday 2", "today"
    ]
    # Expired records are not recent (given alive_at).
    store.add_records([NewRecord(source="vector", scope=earlier, text="monday gone", message_ids=("g",),
                                 event_time=103.0, ttl=10.0, expires_at=150.0)])
    assert [r.text for r in store.recent_records(ALICE, "vector", 1)] == ["monday gone"]
    assert [r.text for r in store.recent_records(ALICE, "vector", 1, alive_at=200.0)] == ["monday 2"]


def test_word_counts_give_what_an_idf_needs(backend) -> None:
    store = backend.open()
    store.add_records([note("bees on the roof"), note("bees in the garden", mid="m2"), note("a red car", mid="m3")])
    total, counts = store.word_counts(["bees", "roof", "zeppelin"], ALICE)
    assert total == 3
    assert counts == {"bees": 2, "roof": 1, "zeppelin": 0}


def test_word_counts_are_the_users_own(backend) -> None:
    """Another user's records (or the same user's in another tenant) count for nothing:
    what Bob said must not make Alice's question look answerable."""
    store = backend.open()
    store.add_records([note("bees on the roof"), note("a red car", mid="m2")])
    store.add_records([note(f"zeppelin and bees {i}", BOB, mid=f"b{i}") for i in range(4)])
    elsewhere = Scope(user_id="alice", session_id="s1", tenant_id="other-app")
    store.add_records([note("zeppelin over the roof", elsewhere, mid="e1")])

    assert store.word_counts(["bees", "zeppelin"], ALICE) == (2, {"bees": 1, "zeppelin": 0})
    assert store.word_counts(["bees", "zeppelin"], BOB) == (4, {"bees": 4, "zeppelin": 4})
    assert store.word_counts(["zeppelin", "bees"], elsewhere) == (1, {"zeppelin": 1, "bees": 0})


def test_forgetting_a_user_deletes_their_meta_keys_and_no_one_elses(backend) -> None:
    from llama_memory.storage.ports.base import user_meta_key

    store = backend.open()
    tricky = Scope(user_id='alice", "x', session_id="s1")  # quoting keeps users apart
    for scope in (ALICE, Scope(user_id="alice", session_id="s2"), BOB, tricky):
        store.set_meta(user_meta_key("cursor", scope), "state")
    store.set_meta("store-wide", "kept")
    store.delete_user(ALICE)
    again = backend.open()
    assert again.get_meta(user_meta_key("cursor", ALICE)) is None
    assert again.get_meta(user_meta_key("cursor", Scope(user_id="alice", session_id="s2"))) is None
    assert again.get_meta(user_meta_key("cursor", BOB)) == "state"
    assert again.get_meta(user_meta_key("cursor", tricky)) == "state"
    assert again.get_meta("store-wide") == "kept"


def test_importance_is_kept_and_the_higher_wins_when_stated_again(backend) -> None:
    store = backend.open()
    [plain] = store.add_records([note("I water the plants on Sundays")])
    [judged] = store.add_records([note("I am allergic to peanuts", importance=0.6)])
    store.add_records([note("i am allergic to peanuts", mid="m2", importance=0.9)])
    store.add_records([note("I am allergic to peanuts", mid="m3", importance=0.2)])
    read = backend.open().get_records([plain, judged], ALICE, "vector")
    assert (read[plain].importance, read[judged].importance) == (None, 0.9)


def test_last_used_only_moves_forward_and_is_read_by_another_store_object(backend) -> None:
    store = backend.open()
    [shown, unseen] = store.add_records([note("I keep bees"), note("I like jazz")])
    store.mark_used([shown, "no-such-id"], 200.0)
    store.mark_used([shown], 150.0)  # an older batch written late: ignored
    read = backend.open().get_records([shown, unseen], ALICE, "vector")
    assert (read[shown].last_used, read[unseen].last_used) == (200.0, None)


def test_delete_records_deletes_only_the_scopes_user_and_source(backend) -> None:
    store = backend.open()
    [mine, kept] = store.add_records([note("summary one"), note("summary two")])
    [bobs] = store.add_records([note("summary one", BOB)])
    with store.transaction("replace a summary"):
        gone = store.delete_records([mine, bobs], ALICE, "vector")
    assert [(g.id, g.user_id) for g in gone] == [(mine, "alice")]
    assert store.delete_records([kept], ALICE, "episodic") == []
    assert set(store.get_records([mine, kept], ALICE, "vector")) == {kept}
    assert set(store.get_records([bobs], BOB, "vector")) == {bobs}
    assert [i for i, _ in store.search_text("summary", ALICE, "vector", 10)] == [kept]


def test_session_records_are_the_sessions_own_in_write_order(backend) -> None:
    store = backend.open()
    other = Scope(user_id="alice", session_id="s2")
    first = store.add_records([note("first of s1", mid="a"), note("in s2", other, mid="b")])
    second = store.add_records([note("second of s1", mid="c"), note("bob's s1", BOB, mid="d")])
    assert [r.id for r in store.session_records(ALICE, "vector", 10)] == [first[0], second[0]]
    assert [r.text for r in store.session_records(ALICE, "vector", 1)] == ["first of s1"]
    assert store.session_records(ALICE, "episodic", 10) == []


def test_the_ids_of_texts_are_those_their_records_get(backend) -> None:
    store = backend.open()
    [kept] = store.add_records([note("Bees on the  Roof", role="user")])
    ids = store.record_ids(["bees on the roof"], ["user", "assistant"], ALICE, "vector")
    assert ids[0] == kept and len(ids) == 2 and ids[1] != kept  # one per role, nothing read
    assert store.record_ids(["bees on the roof"], ["user"], BOB, "vector") != [kept]


def test_a_text_search_leaves_out_the_ids_it_is_told_in_the_query_itself(backend) -> None:
    store = backend.open()
    ids = store.add_records([note(f"the bees on the roof swarmed {n} times", mid=f"m{n}") for n in range(6)])
    everything = [i for i, _ in store.search_text("bees roof swarmed", ALICE, "vector", 10)]
    assert sorted(everything) == sorted(ids)
    left_out = set(everything[:3])
    # The 3 best of the others, as if the left-out records were not stored: not fewer.
    found = [i for i, _ in store.search_text("bees roof swarmed", ALICE, "vector", 3, left_out)]
    assert found == [i for i in everything if i not in left_out][:3]
    assert store.search_text("bees", ALICE, "vector", 10, set(ids)) == []


def test_the_ranked_text_search_is_the_search_read_as_far_as_wanted(backend) -> None:
    store = backend.open()
    texts = [f"bees {'honey ' * (n % 5)}note {n}" for n in range(60)]
    ids = store.add_records([note(text, mid=f"m{n}") for n, text in enumerate(texts)])
    store.add_records([note("bees of bob", BOB)])
    left_out = set(ids[:5])
    ranked = list(store.rank_text("bees honey", ALICE, "vector", left_out, first=4))
    # Every match of the user's, none left out, none of another user's or source, in
    # the search's order: each head of it is what the search gives for that many.
    assert len(ranked) == 55 and not {i for i, _ in ranked} & left_out
    for n in (1, 10, 30, 55):
        assert [i for i, _ in ranked[:n]] == [i for i, _ in store.search_text("bees honey", ALICE, "vector", n, left_out)]
    assert [s for _, s in ranked] == sorted((s for _, s in ranked), reverse=True)
    assert list(store.rank_text("the", ALICE, "vector")) == []  # no word to search for
    assert list(store.rank_text("bees", Scope(user_id="carol"), "vector")) == []
    if hasattr(store, "rank_candidates"):  # a backend that ranks a few candidates at a time
        store.rank_candidates = 8
        wider = [i for i, _ in store.rank_text("bees honey", ALICE, "vector", left_out, first=4)]
        assert sorted(wider) == sorted(i for i, _ in ranked) and wider[:8] == [
            i for i, _ in store.search_text("bees honey", ALICE, "vector", 8, left_out)
        ]
