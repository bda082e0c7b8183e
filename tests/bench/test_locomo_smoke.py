"""The LoCoMo benchmark runs end to end on the synthetic fixture, and its helpers
(evidence repair, session dates, FTS5 queries) behave as documented."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest

from bench import locomo  # importable: pyproject sets pytest's pythonpath to the repo root

KNOWN = {f"D1:{t}" for t in range(1, 9)} | {f"D2:{t}" for t in range(1, 9)} | {f"D11:{t}" for t in range(1, 30)}


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict, str]:
    out = tmp_path_factory.mktemp("locomo") / "locomo.json"
    report = locomo.main(["--smoke", "--json", str(out)])
    return report, json.loads(out.read_text()), str(out)


def test_smoke_writes_the_whole_report(smoke, capsys: pytest.CaptureFixture[str]) -> None:
    report, written, _ = smoke
    assert written == json.loads(json.dumps(report))
    assert report["meta"]["retrievers"] == list(locomo.DEFAULT_RETRIEVERS)
    assert report["meta"]["ks"] == [5, 10]


def test_smoke_recall_figures_are_fractions_for_every_retriever_and_category(smoke) -> None:
    report, _, _ = smoke
    # The fixture has scored questions in all four categories: 2 multi-hop, 1 temporal,
    # 1 open-domain, 2 single-hop; category 5 and the question without evidence are skipped.
    expected_n = {"multi-hop": 2, "temporal": 1, "open-domain": 1, "single-hop": 2, "overall": 6}
    assert report["meta"]["questions_scored"] == 6
    assert report["meta"]["questions_skipped"] == {"category 5": 1, "no evidence": 1}
    for name in locomo.DEFAULT_RETRIEVERS:
        for k in ("5", "10"):
            groups = report["results"][name][k]
            assert {g: v["n"] for g, v in groups.items()} == expected_n, (name, k)
            for group, values in groups.items():
                for metric in locomo.METRICS:
                    assert 0.0 <= values[metric] <= 1.0, (name, k, group, metric, values[metric])
                # all found implies any found; recall lies between them
                assert values["all"] <= values["turn_recall"] <= values["any"], (name, k, group)
        # more records can only find more
        for group in expected_n:
            assert (report["results"][name]["10"][group]["turn_recall"]
                    >= report["results"][name]["5"][group]["turn_recall"])


def test_smoke_repairs_each_kind_of_evidence_glitch_once(smoke) -> None:
    report, _, _ = smoke
    assert report["evidence_repairs"] == {
        "split": 1,        # "D1:7; D3:3"
        "colon": 1,        # "D:2:1"
        "zero_padded": 1,  # "D1:01"
        "bare": 1,         # "D"
        "malformed": 0,
        "past_end": 1,     # "D1:40" (session 1 has 8 turns)
        "unknown": 1,      # "D9:2" (no session 9)
        "duplicate": 0,
    }
    evidence = {q["qa_index"]: q["evidence"] for q in report["questions"]}
    assert evidence == {
        0: ["D1:1"],
        1: ["D1:7", "D3:3"],
        2: ["D2:1"],
        3: ["D1:4", "D1:6"],
        4: ["D2:6"],
        5: ["D2:7", "D3:4"],
    }  # 6 has no evidence, 7 is category 5


def test_report_holds_no_question_text(smoke) -> None:
    _, _, path = smoke
    assert "adopted" not in Path(path).read_text()


def test_smoke_counts_the_turns_of_a_session_with_an_unreadable_date(smoke) -> None:
    report, _, _ = smoke
    assert report["dates"]["sessions"] == 3
    assert report["dates"]["turns_without_timestamp"] == 5
    assert len(report["dates"]["unparsable_sessions"]) == 1


def test_smoke_ours_finds_evidence_and_reports_performance(smoke) -> None:
    report, _, _ = smoke
    ours = report["results"]["ours"]["10"]["overall"]
    assert ours["any"] > 0, ours
    hits = [q for q in report["questions"] if q["scores"]["ours"]["10"]["any"] == 1.0]
    assert hits, "ours found no evidence turn for any question"
    block = report["block"]
    assert block["tokens"]["n"] == 6 and block["tokens"]["mean"] > 0
    assert 0 < block["records"]["max"] <= locomo.BLOCK_TOP_K
    assert report["latency_ms"]["ours"]["n"] == 6 and report["latency_ms"]["ours"]["median"] > 0
    ingest = report["ingest"]["ours"]["per_conversation"][0]
    assert ingest["turns"] == 21 and ingest["sessions"] == 3 and ingest["ingest_s"] > 0
    # What the block shows is scored too, and an excerpt carries more than one turn.
    assert set(block["turn_recall"]) == {"multi-hop", "temporal", "open-domain", "single-hop", "overall"}
    assert all(0.0 <= v <= 1.0 for v in block["turn_recall"].values())
    per_search = report["messages_per_search"]
    assert per_search["bm25"]["10"] <= 10 and per_search["ours"]["10"] >= per_search["ours"]["5"] > 0


def test_conversations_are_selected_by_position() -> None:
    assert [c.sample_id for c in locomo.load_dataset(locomo.SMOKE_DATA, select=[0]).conversations] == ["tiny-1"]
    with pytest.raises(ValueError, match=r"positions \[3\].*holds 1"):
        locomo.load_dataset(locomo.SMOKE_DATA, select=[3])
    assert locomo.parse_args(["--smoke", "--conversations", "0"]).conversations == [0]
    with pytest.raises(SystemExit):
        locomo.parse_args(["--smoke", "--conversations", "first"])


def test_ours_messages_ablation_returns_single_turns() -> None:
    conversation = locomo.load_dataset(locomo.SMOKE_DATA).conversations[0]
    retriever = locomo.make_retriever("ours-messages")
    try:
        retriever.build(conversation)
        ranked = retriever.search(conversation.questions[0].question, 10)
    finally:
        retriever.close()
    assert ranked and all(len(ids) == 1 for ids in ranked)
    assert "D1:1" in [ids[0] for ids in ranked[:5]]


def test_smoke_dog_question_is_answered_by_the_adoption_turn(smoke) -> None:
    report, _, _ = smoke
    (row,) = [q for q in report["questions"] if q["qa_index"] == 0]  # "What is the name of the dog..."
    top_ids = [i for record in row["ranked"]["ours"][:5] for i in record]
    assert "D1:1" in top_ids, row["ranked"]["ours"]


# -- evidence repair ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected", "glitches"),
    [
        (["D1:3"], ["D1:3"], {}),
        (["D1:6; D2:7"], ["D1:6", "D2:7"], {"split": 1}),
        (["D1:6 D2:7"], ["D1:6", "D2:7"], {"split": 1}),
        (["D:11:26"], ["D11:26"], {"colon": 1}),
        (["D11:05"], ["D11:5"], {"zero_padded": 1}),
        (["D01:5"], ["D1:5"], {"zero_padded": 1}),
        (["D", "D2:1"], ["D2:1"], {"bare": 1}),
        ([""], [], {"bare": 1}),
        (["D1:9"], [], {"past_end": 1}),
        (["D7:1"], [], {"unknown": 1}),
        (["evidence?"], [], {"malformed": 1}),
        (["D2:1", "D2:01"], ["D2:1"], {"zero_padded": 1, "duplicate": 1}),
        (["D:11:026; D1:8"], ["D11:26", "D1:8"], {"split": 1, "colon": 1, "zero_padded": 1}),
        ([], [], {}),
    ],
)
def test_repair_evidence(raw: list[str], expected: list[str], glitches: dict[str, int]) -> None:
    counts: Counter = Counter()
    assert locomo.repair_evidence(raw, KNOWN, counts) == expected
    assert {k: v for k, v in counts.items() if v} == glitches


# -- session dates -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1:56 pm on 8 May, 2023", datetime(2023, 5, 8, 13, 56)),
        ("10:37 am on 27 June, 2023", datetime(2023, 6, 27, 10, 37)),
        ("12:09 am on 13 September, 2023", datetime(2023, 9, 13, 0, 9)),
        ("12:30 pm on 1 January, 2024", datetime(2024, 1, 1, 12, 30)),
        ("  7:05 PM on 3 Sept 2022 ", datetime(2022, 9, 3, 19, 5)),
        ("9:15 a.m. on 21st March, 2021", datetime(2021, 3, 21, 9, 15)),
        ("18:45 on 2 Feb, 2024", datetime(2024, 2, 2, 18, 45)),
        ("8 May, 2023", datetime(2023, 5, 8)),
        ("May 8, 2023", datetime(2023, 5, 8)),
        ("sometime in late spring", None),
        ("1:56 pm on 8 May", None),  # no year
        ("1:56 pm on 31 February, 2023", None),  # no such day
        ("13:10 pm on 8 May, 2023", None),  # not a 12-hour time
        ("1:56 pm on 8 Maytember, 2023", None),
        ("", None),
        (None, None),
    ],
)
def test_parse_session_date(text, expected) -> None:
    assert locomo.parse_session_date(text) == expected


def test_date_prefix() -> None:
    assert locomo.date_prefix(datetime(2023, 5, 8, 13, 56), "1:56 pm on 8 May, 2023") == "8 May 2023"
    assert locomo.date_prefix(None, " late spring ") == "late spring"


# -- FTS5 queries ------------------------------------------------------------------------


def test_fts_query_escapes_and_ors_the_words() -> None:
    assert locomo.fts_query("What did Caroline's NEAR-friend do?") == (
        '"what" OR "did" OR "caroline" OR "s" OR "near" OR "friend" OR "do"'
    )
    assert locomo.fts_query("?!") == ""
    assert locomo.fts_query("When did she go", stopwords={"when", "did", "she"}) == '"go"'
    # every query the function makes is valid FTS5 syntax, even with FTS5 operators in it
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE t USING fts5(body)")
    db.execute("INSERT INTO t VALUES ('or and not near')")
    for text in ('AND OR NOT', 'a "quoted" * ^start col:umn (x) {y} -z +w', "NEAR(a b)"):
        db.execute("SELECT * FROM t WHERE t MATCH ?", (locomo.fts_query(text),)).fetchall()
    assert db.execute("SELECT count(*) FROM t WHERE t MATCH ?", (locomo.fts_query("NOT"),)).fetchone()[0] == 1


def test_a_summary_is_credited_only_with_the_turns_it_quotes() -> None:
    from llama_memory.core.types import SUMMARY_KIND, MemoryRecord

    ours = locomo.Ours()
    ours.turn_texts = {"D1:1": "Hi! I adopted a puppy named Rex last week.", "D1:2": "Nice to hear that you are well today."}
    summary = MemoryRecord(
        "user: I adopted a puppy named Rex last week.", message_ids=["D1:1", "D1:2"],
        metadata={"kind": SUMMARY_KIND},
    )
    assert ours.credited(summary) == ["D1:1"]
    assert ours.credited(MemoryRecord("x", message_ids=["D1:2"])) == ["D1:2"]
    assert "ours-summaries" in locomo.RETRIEVERS and "ours-no-salience" in locomo.RETRIEVERS


def test_reopen_fresh_starts_from_the_store_as_built_without_what_gets_showed() -> None:
    # bench.multihop runs every setting on one built store: a get() marks the records
    # it showed as used (salience ranks them higher), so each setting reopens a copy.
    dataset = locomo.load_dataset(locomo.SMOKE_DATA, None, None)
    conversation = dataset.conversations[0]
    retriever = locomo.Ours()
    try:
        retriever.build(conversation)
        for q in conversation.questions:
            retriever.memory.get(q.question)
        retriever.memory.flush()  # writes the last_used marks
        shown = [i for r in retriever.memory.search(conversation.questions[0].question, k=10) for i in [r.id]]

        def used() -> int:
            records = retriever.memory.runtime.store.get_records(shown, retriever.memory.scope, "vector")
            return sum(r.last_used is not None for r in records.values())

        assert used() > 0
        retriever.reopen_fresh()
        assert used() == 0
        assert retriever.memory.get(conversation.questions[0].question)  # and it answers
    finally:
        retriever.close()


def test_smoke_flows_ask_as_an_agent_with_the_questions_taken_back_or_kept() -> None:
    report = locomo.main(["--smoke", "--retrievers", "ours", "--flows", "get,agent,kept"])

    flows = report["flows"]
    assert list(flows) == ["get", "agent", "kept"]
    assert flows["get"]["overall"]["recall"] == report["block"]["turn_recall"]
    for flow, figures in flows.items():
        assert list(figures["per_conversation"]) == ["tiny-1"]
        assert figures["overall"]["n"] == 6 and 0 < figures["overall"]["recall"]["overall"] <= 1, flow
    # Taken back, no block shows an earlier question; kept, the later questions' blocks do,
    # and they are counted apart from what the block spends on the store's own turns.
    assert flows["agent"]["overall"]["question_records"] == 0
    kept = flows["kept"]["overall"]
    assert kept["question_records"] > 0 and kept["beyond_questions"] < kept["tokens"]
    rows = report["questions"]
    assert rows[0]["flows"]["kept"]["question_records"] == 0  # the first question has none before it
