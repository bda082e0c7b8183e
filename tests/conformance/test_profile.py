"""Conformance of the profile rows port (``llama_memory.storage.sql.profile.ProfileRows``).

Every backend must pass these: current values, history, merge patch, removal,
expiry, forget, isolation, atomic and serialised updates. They drive the port
directly and through a ``ProfileSource`` built on it, on real storage, once per
backend of the one ``backend`` fixture (``conftest.py``).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable

import pytest

from llama_memory import Scope
from llama_memory.core.types import Expiry
from llama_memory.sources.profile import ProfileSource, ProfileUpdateError
from llama_memory.storage.ports import ProfileValue, ProfileWrite
from llama_memory.storage.sql.profile import ProfileRows

if TYPE_CHECKING:
    from .conftest import Backend

ALICE = Scope(user_id="alice", session_id="s1")
BOB = Scope(user_id="bob", session_id="b1")
ALICE_ELSEWHERE = Scope(user_id="alice", session_id="s1", tenant_id="other-app")

class Clock:
    """A settable clock, so expiry is tested without sleeping."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def source(backend: Backend, **kwargs: Any) -> ProfileSource:
    return ProfileSource(backend.profile_rows(), **kwargs)


# --------------------------------------------------------------------------- current values


def test_the_backend_implements_the_port_and_the_source_uses_it(backend: Backend) -> None:
    rows = backend.profile_rows()
    assert isinstance(rows, ProfileRows)
    assert ProfileSource(rows).rows is rows


def test_current_values_are_the_newest_and_other_connections_see_them(backend: Backend) -> None:
    profile = source(backend)
    profile.set_field("diet", "vegan", ALICE)
    profile.set_field("diet", "vegetarian", ALICE)
    profile.update_profile({"travel": {"seat": "aisle"}, "allergies": ["nuts"]}, ALICE)

    current = backend.profile_rows().current(ALICE, at=2_000.0)
    assert {(r.path, r.op) for r in current} == {
        ("diet", "set"), ("travel.seat", "set"), ("allergies", "set")
    }
    assert all(r.current and r.superseded_at is None for r in current)
    expected = {"diet": "vegetarian", "travel": {"seat": "aisle"}, "allergies": ["nuts"]}
    assert source(backend).get_profile(ALICE) == expected


def test_setting_the_value_a_field_has_writes_nothing(backend: Backend) -> None:
    profile = source(backend)
    profile.set_field("diet", "vegan", ALICE)
    assert profile.set_field("diet", "vegan", ALICE) == []
    assert len(profile.history(None, ALICE)) == 1


# --------------------------------------------------------------------------- history


def test_history_keeps_every_value_and_the_removal_oldest_first(backend: Backend) -> None:
    profile = source(backend)
    profile.set_field("diet", "vegan", ALICE, session_id="s0", message_ids=["m1"])
    profile.set_field("diet", "vegetarian", ALICE)
    profile.remove_field("diet", ALICE)

    history = source(backend).history("diet", ALICE)
    assert [(c.op, c.value, c.removed) for c in history] == [
        ("set", "vegan", False), ("set", "vegetarian", False), ("remove", None, True)
    ]
    assert history[0].session_id == "s0" and history[0].message_ids == ["m1"]
    assert history[1].session_id == "s1"  # the scope's session by default
    assert [c.superseded_at is not None for c in history] == [True, True, False]
    assert history[0].superseded_at == history[1].created_at
    assert [c.current for c in history] == [False, False, False]
    assert source(backend).get_profile(ALICE) == {}


def test_history_of_a_path_covers_the_fields_beneath_it_only(backend: Backend) -> None:
    profile = source(backend)
    profile.update_profile({"travel": {"seat": "aisle", "meal": "veg"}, "travel_mode": "rail"}, ALICE)
    assert sorted(c.path for c in profile.history("travel", ALICE)) == ["travel.meal", "travel.seat"]
    assert len(profile.history(None, ALICE)) == 3


# --------------------------------------------------------------------------- merge patch and removal


def test_merge_patch_merges_objects_field_by_field_and_null_removes(backend: Backend) -> None:
    profile = source(backend)
    profile.update_profile({"travel": {"seat": "aisle", "meal": "veg"}, "city": "Lyon"}, ALICE)
    changes = profile.update_profile({"travel": {"seat": None, "class": "economy"}}, ALICE)

    assert {(c.path, c.op, c.removed) for c in changes} == {
        ("travel.class", "set", False), ("travel.seat", "remove", True)
    }
    assert source(backend).get_profile(ALICE) == {
        "travel": {"meal": "veg", "class": "economy"}, "city": "Lyon"
    }


def test_list_items_are_appended_once_and_removed(backend: Backend) -> None:
    profile = source(backend)
    profile.append("allergies", "nuts", ALICE)
    profile.append("allergies", "shellfish", ALICE)
    profile.append("allergies", "nuts", ALICE)
    profile.remove_item("allergies", "nuts", ALICE)
    assert source(backend).get_profile(ALICE) == {"allergies": ["shellfish"]}
    assert [c.op for c in profile.history("allergies", ALICE)] == ["append", "append", "remove"]


def test_a_rejected_update_writes_nothing(backend: Backend) -> None:
    profile = source(backend)
    profile.set_field("diet", "vegan", ALICE)
    with pytest.raises(ProfileUpdateError, match="bad path"):
        profile.update_profile(
            [{"op": "set", "path": "city", "value": "Lyon"},
             {"op": "set", "path": "bad path", "value": 1}],
            ALICE,
        )  # fmt: skip
    assert source(backend).get_profile(ALICE) == {"diet": "vegan"}
    assert len(profile.history(None, ALICE)) == 1


def test_the_port_writes_nothing_when_the_decision_raises(backend: Backend) -> None:
    rows = backend.profile_rows()
    rows.update(ALICE, 1_000.0, lambda current: ProfileWrite(
        insert=(ProfileValue("diet", "set", "vegan"),), written_at=1_000.0
    ))  # fmt: skip
    [diet] = rows.current(ALICE, 1_000.0)

    def supersede_then_fail(current: list) -> ProfileWrite:
        raise RuntimeError("changed my mind")

    with pytest.raises(RuntimeError, match="changed my mind"):
        rows.update(ALICE, 1_001.0, supersede_then_fail)
    assert backend.profile_rows().current(ALICE, 1_001.0) == [diet]


def test_removing_a_field_with_its_history_erases_every_trace(backend: Backend) -> None:
    profile = source(backend)
    profile.update_profile({"travel": {"seat": "aisle"}, "diet": "vegan"}, ALICE)
    profile.set_field("travel.seat", "window", ALICE)
    profile.remove_field("travel", ALICE, with_history=True)

    assert [c.path for c in source(backend).history(None, ALICE)] == ["diet"]
    assert backend.profile_rows().erase(ALICE, "diet") == 1


# --------------------------------------------------------------------------- expiry


def test_an_expired_value_reads_as_absent_and_purge_deletes_it(backend: Backend) -> None:
    clock = Clock()
    profile = source(backend, expiry=Expiry(clock=clock))
    profile.set_field("diet", "vegan", ALICE, ttl=10)
    profile.set_field("name", "Alice", ALICE)  # kept until forgotten
    profile.set_field("diet", "vegan", BOB, ttl=100)

    clock.now += 11
    assert profile.get_profile(ALICE) == {"name": "Alice"}
    assert [c.path for c in profile.history(None, ALICE)] == ["name"]
    # An expired value is absent for an update too: setting it again writes it.
    assert [c.value for c in profile.set_field("diet", "vegan", ALICE)] == ["vegan"]

    clock.now += 100
    assert profile.purge_expired() == 2  # alice's first diet, bob's diet
    assert profile.get_profile(ALICE) == {"name": "Alice", "diet": "vegan"}
    assert source(backend).get_profile(BOB) == {}
    assert backend.profile_rows().purge_expired(clock.now) == 0


def test_refresh_on_read_makes_a_value_live_its_ttl_again(backend: Backend) -> None:
    clock = Clock()
    profile = source(backend, expiry=Expiry(ttl=10, refresh_on_read=True, clock=clock))
    profile.set_field("diet", "vegan", ALICE)
    profile.set_field("name", "Alice", ALICE, ttl=1_000)

    clock.now += 8
    assert [r.metadata["path"] for r in profile.retrieve("anything", ALICE, k=5)] == [
        "name", "diet"
    ]
    clock.now += 8  # 16 s after the write, 8 s after the read
    assert profile.get_profile(ALICE) == {"diet": "vegan", "name": "Alice"}
    clock.now += 3  # 11 s after the read: get_profile does not refresh
    assert profile.get_profile(ALICE) == {"name": "Alice"}


# --------------------------------------------------------------------------- forget


def test_forget_deletes_the_users_rows_history_included(backend: Backend) -> None:
    profile = source(backend)
    profile.set_field("diet", "vegan", ALICE)
    profile.set_field("diet", "vegetarian", ALICE)
    profile.set_field("diet", "vegan", BOB)

    profile.forget(ALICE)
    assert source(backend).history(None, ALICE) == []
    assert source(backend).get_profile(BOB) == {"diet": "vegan"}


def test_forget_keeping_history_records_the_removals(backend: Backend) -> None:
    profile = source(backend)
    profile.update_profile({"diet": "vegan", "travel": {"seat": "aisle", "meal": "veg"}}, ALICE)
    profile.forget(ALICE, with_history=False)

    assert source(backend).get_profile(ALICE) == {}
    history = source(backend).history(None, ALICE)
    assert sorted(c.path for c in history if c.removed) == ["diet", "travel"]
    assert sorted(c.value for c in history if not c.removed) == ["aisle", "veg", "vegan"]


# --------------------------------------------------------------------------- isolation


def test_users_and_tenants_are_isolated(backend: Backend) -> None:
    profile = source(backend)
    for scope, diet in ((ALICE, "vegan"), (BOB, "omnivore"), (ALICE_ELSEWHERE, "keto")):
        profile.set_field("diet", diet, scope)
        profile.set_field("city", "Lyon", scope)

    profile.remove_field("city", BOB, with_history=True)
    profile.forget(ALICE_ELSEWHERE, with_history=False)

    fresh = source(backend)
    assert fresh.get_profile(ALICE) == {"diet": "vegan", "city": "Lyon"}
    assert fresh.get_profile(BOB) == {"diet": "omnivore"}
    assert fresh.get_profile(ALICE_ELSEWHERE) == {}
    assert [c.value for c in fresh.history("diet", ALICE)] == ["vegan"]
    assert len(fresh.history(None, ALICE_ELSEWHERE)) == 4  # two values, two removals


# --------------------------------------------------------------------------- concurrency


def test_concurrent_updates_from_two_connections_apply_one_after_the_other(
    backend: Backend,
) -> None:
    sources = [source(backend), source(backend)]
    errors: list[BaseException] = []

    def append_many(profile: ProfileSource, prefix: str) -> Callable[[], None]:
        def run() -> None:
            try:
                for i in range(15):
                    profile.append("items", f"{prefix}{i}", ALICE)
            except BaseException as exc:  # reported below, not lost in the thread
                errors.append(exc)

        return run

    threads = [threading.Thread(target=append_many(s, p)) for s, p in zip(sources, "ab")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    # Each append read the list inside its write: no item of the other writer is lost.
    assert sorted(source(backend).get_profile(ALICE)["items"]) == sorted(
        f"{p}{i}" for p in "ab" for i in range(15)
    )
