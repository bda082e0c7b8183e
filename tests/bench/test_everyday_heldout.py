"""The held-out everyday set (bench/data/everyday_heldout/) passes its checks, and
``bench.everyday`` builds its stores by the recipe and writes them as the set's own user."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

# importable: pyproject sets pytest's pythonpath to the repo root
from bench import everyday

VALIDATOR = everyday.HELDOUT_DATA.parent / "validate.py"


def heldout() -> dict:
    return json.loads(everyday.HELDOUT_DATA.read_text(encoding="utf-8"))


def test_the_heldout_set_passes_its_checks() -> None:
    # The LoCoMo check runs when the shared data is beside the checkout, as on the bench machine.
    locomo = ["--locomo", str(everyday.LOCOMO_DATA)] if everyday.LOCOMO_DATA.exists() else ["--no-locomo"]

    done = subprocess.run([sys.executable, str(VALIDATOR), *locomo], capture_output=True, text=True)

    assert done.returncode == 0, done.stdout + done.stderr
    assert "OK: all checks passed" in done.stdout
    assert "facts: 60 (home 5, work 5," in done.stdout


def test_the_validator_fails_a_set_whose_keyword_leaks_into_another_fact(tmp_path: Path) -> None:
    data = heldout()
    data["facts"][1]["message"] += " " + data["facts"][0]["answers"][0]
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(data), encoding="utf-8")

    done = subprocess.run([sys.executable, str(VALIDATOR), str(broken), "--no-locomo"], capture_output=True, text=True)

    assert done.returncode == 1
    assert f"also occurs in {data['facts'][1]['id']}'s message" in done.stdout


def test_the_heldout_stores_follow_the_recipe_for_60_facts() -> None:
    data = heldout()
    small = everyday.small_store(data)
    # ceil(60 / 10) = 6 sessions, each of 10 fact and 2 small-talk exchanges.
    assert len(small) == 2 * (60 + 2 * 6)
    assert [m.session for m in small][::24] == [f"session_{s}" for s in range(1, 7)]
    assert [m.text for m in small if m.id.startswith("talk-") and m.role == "user"] == (data["small_talk"] + data["small_talk"])[:12]
    if everyday.LOCOMO_DATA.exists():
        large = everyday.large_store(data, everyday.LOCOMO_DATA)
        turns = [m for m in large if m.id.startswith("locomo/")]
        facts = [m for m in large if not m.id.startswith("locomo/")]
        # The development set's 1,500 distractors, a fact exchange after every 16th.
        assert len(turns) == everyday.DISTRACTORS
        assert [m.id for m in facts][::2] == [f["id"] for f in everyday.round_robin(data["facts"])]
        assert large.index(facts[-2]) == 16 * 60 + 2 * 59


def test_large_store_takes_as_many_turns_as_its_facts_need() -> None:
    # The tiny LoCoMo file holds 21 turns: 2 asked for, 7 facts at one per 3 turns need all 21.
    data = {"facts": heldout()["facts"][:7]}

    large = everyday.large_store(data, everyday.LOCOMO_SMOKE, n=2, every=3)

    assert sum(1 for m in large if m.id.startswith("locomo/")) == 21
    assert sum(1 for m in large if not m.id.startswith("locomo/")) == 2 * 7


def test_the_stores_are_written_as_the_sets_own_user(tmp_path: Path) -> None:
    from llama_memory import MemoryAdmin

    data = heldout()
    messages = everyday.small_store(data)[:4]

    everyday.write_store(tmp_path / "store", messages, everyday.user_of(data))

    admin = MemoryAdmin(tmp_path / "store")
    try:
        assert everyday.user_of(data) == "heldout-user"
        assert [u.user_id for u in admin.users()] == ["heldout-user"]
        assert len(admin.records("heldout-user")) > 0
    finally:
        admin.close()
