"""``bench.admin_open`` runs end to end, and shows what it measures: an admin opened
beside one already open on an encrypted store does not open the store again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import admin_open

pytest.importorskip("sqlcipher3")


def test_an_admin_beside_an_open_one_costs_less_than_an_open(tmp_path: Path) -> None:
    out = tmp_path / "open.json"
    admin_open.main(["--opens", "3", "--json", str(out)])
    figures = json.loads(out.read_text())
    # A real open checks the file (and derives an encrypted store's key); sharing the
    # open store is a lookup.
    for kind in ("plain", "encrypted"):
        assert 0 < figures[kind]["beside_an_open_one_ms"] < figures[kind]["alone_ms"], figures
