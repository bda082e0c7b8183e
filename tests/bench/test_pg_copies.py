"""``bench.speed --backend postgres``'s bulk load with the records' vector copies (as the
library writes a store): a user of 1,000 records is then searched in memory, not by
pgvector, as in a store the library wrote."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from bench import locomo, pg_speed


@pytest.mark.parametrize("copies", [False, True])
def test_the_bulk_load_times_the_path_its_copies_choose(
    postgres_url: str, copies: bool, postgres_statements: Counter[str]
) -> None:
    row = pg_speed.bulk(postgres_url, 2, 200, gets=3, seed=7, data=locomo.SMOKE_DATA, copies=copies)

    assert row["vector_copies"] is copies and row["records"] == 400 and row["search_found"] == 10
    held = pg_speed.PostgresStore(postgres_url).query("count copies",
                 "SELECT count(*) AS n FROM records WHERE vector IS NOT NULL AND id LIKE 'user1-%%'")  # fmt: skip
    assert held[0]["n"] == (200 if copies else 0)
    # With copies the user's vectors are read once and searched in memory; without, some
    # lack a copy, and each retrieval asks pgvector.
    assert (postgres_statements["search vectors"] == 0) is copies


def test_vector_copies_modes_say_what_they_take() -> None:
    assert pg_speed.vector_copies_modes("without,with") == [False, True]
    with pytest.raises(ValueError, match="--pg-vector-copies takes"):
        pg_speed.vector_copies_modes("yes")


def test_each_load_embeds_its_questions_itself(postgres_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both loads of ``--pg-vector-copies without,with`` ask the same questions in one
    process: the second must not find their vectors kept from the first (it was timed
    without its embeddings)."""
    from llama_memory import OfflineEmbedding

    embedded: list[str] = []
    embed = OfflineEmbedding._get_query_embedding

    def counted(self: OfflineEmbedding, query: str) -> list[float]:
        embedded.append(query)
        return embed(self, query)

    monkeypatch.setattr(OfflineEmbedding, "_get_query_embedding", counted)
    for n, copies in enumerate((False, True)):
        before = len(embedded)
        pg_speed.bulk(postgres_server.create_database(f"bulk_twice_{n}"), 1, 100, gets=3, seed=7,
                      data=locomo.SMOKE_DATA, copies=copies)  # fmt: skip
        assert len(embedded) - before >= 6  # 3 get(input=...) and 3 search(), each a new question
