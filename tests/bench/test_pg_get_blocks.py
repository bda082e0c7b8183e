"""``bench.pg_get_blocks`` records what ``get()`` and ``search()`` give on a copy of a
loaded database, with each get()'s statements, and compares two such runs."""

from __future__ import annotations

import json
from pathlib import Path

from bench import pg_get_blocks, speed
from bench.pg_speed import open_memory


def test_two_runs_on_copies_of_one_database_give_the_same_blocks(postgres_url: str, tmp_path: Path) -> None:
    memory = open_memory("postgres", postgres_url)
    memory.put_messages(speed.make_workload(30, 0, 7)[0])
    memory.flush()
    memory.close()
    paths = [tmp_path / "a.json", tmp_path / "b.json"]
    for path in paths:
        assert pg_get_blocks.main(["run", "--url", postgres_url, "--out", str(path), "--gets", "2", "--own", "2"]) == 0

    first = json.loads(paths[0].read_text())
    assert len(first["gets"]) == 2 * 2 + 2 * 2  # bench.speed's, the user's own, two-part
    assert first["statements_per_get"] > 0 and any("records" in kind for kind in first["statements_by_kind"])
    assert pg_get_blocks.main(["compare", *map(str, paths)]) == 0
    first["gets"][0]["search"] = [["another record", "vector", 1.0, ""]]
    paths[1].write_text(json.dumps(first))
    assert pg_get_blocks.main(["compare", *map(str, paths)]) == 1
