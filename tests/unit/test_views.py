"""Notebook views: the memory block, search results, the profile with its history and
knowledge triples render as HTML tables in Jupyter (escaped) and as short text in a
terminal; built from a real store and the offline model."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from helpers import assistant, user
from llama_memory import ComposableMemory, OfflineEmbedding
from llama_memory.sources.views import RecordList


@pytest.fixture
def memory(tmp_path: Path, embed_model: OfflineEmbedding):
    monday = ComposableMemory.from_defaults(
        user_id="alice", session_id="monday", path=tmp_path, embed_model=embed_model, triples=True
    )
    monday.put_messages([
        user("I'm allergic to penicillin."),
        assistant("Noted: no penicillin."),
        user("My cat is called <b>Luna</b>."),
        assistant("What a nice name."),
    ])
    monday.close()
    friday = ComposableMemory.from_defaults(
        user_id="alice", session_id="friday", path=tmp_path, embed_model=embed_model, triples=True
    )
    yield friday
    friday.close()


def _cells(html_text: str) -> list[str]:
    return re.findall(r"<td>(.*?)</td>", html_text, re.S)


def test_the_block_shows_what_was_injected_per_source_and_what_was_left_out(memory) -> None:
    memory.get("What is my cat called?")
    block = memory.last_block
    assert block.records
    page = block._repr_html_()
    sources = {r.source for r in block.records}
    assert f"Injected: {len(block.records)} records" in page
    for record in block.records:
        assert f"{record.score:.3f}" in page
    assert all(source in _cells(page) for source in sources)
    assert f"{block.dropped_duplicates} already shown" in page
    assert f"{block.dropped_for_budget} over the token budget" in page
    # Stored text is escaped: a message cannot inject markup into the notebook.
    assert "<b>Luna</b>" not in page and "&lt;b&gt;Luna&lt;/b&gt;" in page
    # In a terminal: one line, not the whole text and every record's fields.
    text = repr(block)
    assert re.match(rf"MemoryBlock\({len(block.records)} records?: vector", text) and "\n" not in text
    assert f"{block.token_count} tokens" in text


def test_an_empty_block_says_so() -> None:
    from llama_memory import MemoryBlock

    assert "Nothing injected" in MemoryBlock()._repr_html_()
    assert repr(MemoryBlock()) == "MemoryBlock(empty; left out: 0 duplicates, 0 for the budget)"


def test_search_results_are_a_list_with_a_table(memory) -> None:
    found = memory.search("penicillin allergy", k=3)
    assert isinstance(found, RecordList) and isinstance(found, list) and found
    assert found == list(found)
    page = found._repr_html_()
    assert page.count("<tr>") == len(found) + 1  # the header and one row per record
    assert "penicillin" in page and "monday" in page
    lines = repr(found).splitlines()
    assert lines[0] == "RecordList(" and len(lines) == len(found) + 2
    assert f"{found[0].score:.3f} [vector" in lines[1]


def test_the_profile_view_shows_current_values_and_history(memory) -> None:
    profile = memory.source("profile")
    profile.update_profile([{"op": "set", "path": "city", "value": "Porto"}], memory.scope)
    profile.update_profile([{"op": "set", "path": "city", "value": "Lisbon"}], memory.scope)
    view = profile.view(memory.scope)
    assert view.profile == {"city": "Lisbon"}
    page = view._repr_html_()
    assert ["city", "Lisbon"] == _cells(page)[:2]
    assert page.count('class="old"') == 1 and "Porto" in page  # the old value, greyed
    assert "city = &quot;Lisbon&quot;" not in page
    assert repr(view).splitlines() == ["ProfileView(2 changes in history)", '  city = "Lisbon"']


def test_triples_show_as_a_table_and_a_graph(memory) -> None:
    memory.add_triples([("Alice", "lives in", "Porto")])
    memory.add_triples([("Alice", "lives in", "Lisbon"), ("Alice", "has cat", "Luna")])
    view = memory.triple_source.view(memory.scope)
    assert [t.object for t in view.triples if t.current] == ["Lisbon", "Luna"]
    page = view._repr_html_()
    assert "2 current, 1 superseded" in page and page.count('class="old"') == 1
    assert '<img alt="knowledge graph" src="data:image/png;base64,' in page
    text = repr(view)
    assert text.startswith("TripleTable(3 triples)") and "[superseded]" in text
    assert "<img" not in memory.triple_source.view(memory.scope, draw=False)._repr_html_()
