"""An instruction, an operation on the instructions, and the rule that turns
operations into the rows of the instructions document (checked whole before
anything is written)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional

from ...core.text import normalize_text
from ...storage.ports.profile import ProfileChange, ProfileValue

#: The longest instruction, in characters: an instruction is a sentence, not a document.
MAX_TEXT = 500
#: How many instructions a user may have at once: every one is shown on every get(),
#: outside the retrieval budget, so their number is bounded here.
MAX_INSTRUCTIONS = 50
#: The operations on the instructions.
OPS = ("add", "remove", "replace")
#: Who wrote an instruction: the API, the agent tool, a formation pass.
ORIGINS = ("api", "tool", "pass")
# Characters that break a line: an instruction is one line of the block.
_LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


@dataclass(frozen=True)
class Instruction:
    """One row of the instructions' history: an instruction as set, or its removal.

    Attributes:
        id: the instruction's id (kept when it is reworded by ``replace``).
        text: what the assistant should do ("" for a removal).
        reason: why it was set, as its writer said (None when not said, and for a
            removal: a removal row keeps when and where only).
        origin: who wrote the row: ``"api"``, ``"tool"`` or ``"pass"`` (``""`` for a
            removal).
        op: ``"add"``, ``"replace"`` or ``"remove"``.
        created_at: when (seconds since the epoch, UTC).
        session_id, message_ids: the conversation (and its messages) it came from.
        superseded_at: when a later row replaced or removed it; None while current.
        removed: True for the row that records the removal.
    """

    id: str
    text: str
    reason: Optional[str]
    origin: str
    op: str
    created_at: float
    session_id: Optional[str]
    message_ids: tuple[str, ...]
    superseded_at: Optional[float]
    removed: bool

    @property
    def current(self) -> bool:
        """Whether the assistant follows this instruction now."""
        return self.superseded_at is None and not self.removed


@dataclass(frozen=True)
class InstructionOp:
    """One change of the instructions.

    Attributes:
        op: ``"add"`` (``text``), ``"remove"`` (``target``) or ``"replace"``
            (``target`` by ``text``).
        text: the new instruction's wording.
        target: the current instruction meant, by its id or its text.
        reason: why, in a few words (kept in the history of an add or a replace).
    """

    op: str
    text: Optional[str] = None
    target: Optional[str] = None
    reason: Optional[str] = None

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"an instruction operation is one of {list(OPS)}, not {self.op!r}")
        if self.op in ("add", "replace"):
            object.__setattr__(self, "text", check_text(self.text, f"{self.op}'s text"))
        elif self.text is not None:
            raise ValueError(f"remove takes the instruction to remove (its id or text), not a new text {self.text!r}")
        if self.op in ("remove", "replace"):
            if not isinstance(self.target, str) or not self.target.strip():
                raise ValueError(
                    f"{self.op} needs the current instruction it changes, by its id or its "
                    f"text, got {self.target!r}"
                )
        elif self.target is not None:
            raise ValueError(f"add takes the new instruction's text only, not a target {self.target!r}")
        if self.reason is not None and (not isinstance(self.reason, str) or len(self.reason) > MAX_TEXT):
            raise ValueError(
                f"an instruction's reason is a short text (at most {MAX_TEXT} characters), "
                f"got {type(self.reason).__name__} {str(self.reason)[:80]!r}"
            )


def check_text(text: Any, what: str = "an instruction") -> str:
    """``text`` without its outer spaces; ValueError unless it is one line of text of
    1 to :data:`MAX_TEXT` characters."""
    if not isinstance(text, str):
        raise ValueError(f"{what} must be a text, not {type(text).__name__} {text!r}")
    text = text.strip()
    if not text:
        raise ValueError(f"{what} is empty: say what the assistant should do, e.g. 'Answer in French.'")
    if len(text) > MAX_TEXT:
        raise ValueError(f"{what} is {len(text)} characters long; at most {MAX_TEXT}: keep it to a sentence")
    if any(c in _LINE_BREAKS for c in text):
        raise ValueError(f"{what} must be one line, without line breaks: {text[:80]!r}")
    return text


def to_instruction(change: ProfileChange) -> Instruction:
    """The instruction a row of the instructions document holds."""
    value = change.value if isinstance(change.value, dict) else {}
    return Instruction(
        id=change.path,
        text=str(value.get("text", "")),
        reason=value.get("reason"),
        origin=str(value.get("origin", "")),
        op=change.op,
        created_at=change.created_at,
        session_id=change.session_id,
        message_ids=tuple(change.message_ids),
        superseded_at=change.superseded_at,
        removed=change.removed,
    )


@dataclass
class _Entry:
    """An instruction while operations are applied: its current row (None when added
    by these operations) and its value."""

    row_id: Optional[int]
    value: dict[str, Any]
    written: Optional[ProfileValue] = None  # what these operations insert for it


def plan_rows(
    current: Sequence[ProfileChange], ops: Sequence[InstructionOp], origin: str, *, missing_ok: bool = False
) -> tuple[tuple[int, ...], tuple[ProfileValue, ...]]:
    """The rows to supersede and to insert to apply ``ops`` in order to the current rows.

    Adding an instruction the user has already (same text, case and spacing aside)
    changes nothing, as does rewording one to its own text, or rewording one that is
    gone to a text the user has (the replace was made already). Rewording one to the
    text of another current instruction removes it: one instruction, not two. ValueError (nothing
    written) for a target no current instruction matches (unless ``missing_ok``: a
    removal of what is gone already is then skipped), or beyond
    :data:`MAX_INSTRUCTIONS`."""
    if origin not in ORIGINS:
        raise ValueError(f"origin is one of {list(ORIGINS)}, not {origin!r}")
    entries: dict[str, _Entry] = {c.path: _Entry(c.id, dict(c.value)) for c in current}
    supersede: list[int] = []
    inserts: list[ProfileValue] = []

    def value_of(op: InstructionOp) -> dict[str, Any]:
        # Keys in sorted order, as an export writes them: an import of the export into
        # this store finds the same value_json, so it knows the row is held already.
        return {"origin": origin, "reason": op.reason, "text": op.text}

    def unwrite(entry: _Entry) -> None:
        if entry.written is not None:
            inserts.remove(entry.written)  # changed again by the same operations
            entry.written = None
        elif entry.row_id is not None:
            supersede.append(entry.row_id)

    def remove(key: str, entry: _Entry) -> None:
        added_now = entry.row_id is None
        unwrite(entry)
        del entries[key]
        if not added_now:  # a removal is recorded only of what was stored
            inserts.append(ProfileValue(key, "remove", None, removed=True))

    for op in ops:
        if op.op == "add":
            if find_id(_texts(entries), str(op.text)) is not None:
                continue
            if len(entries) >= MAX_INSTRUCTIONS:
                raise ValueError(
                    f"a user has at most {MAX_INSTRUCTIONS} instructions (each is shown on "
                    "every turn): remove or merge some before adding another"
                )
            key = "i" + uuid.uuid4().hex[:8]
            entry = entries[key] = _Entry(None, value_of(op))
            entry.written = ProfileValue(key, "add", entry.value)
            inserts.append(entry.written)
            continue
        found = find_id(_texts(entries), str(op.target))
        held = find_id(_texts(entries), str(op.text)) if op.op == "replace" else None
        if found is None:
            if (missing_ok and op.op == "remove") or held is not None:
                continue  # a replace already made (e.g. a script run again) changes nothing
            raise ValueError(missing_target(str(op.target), _texts(entries)))
        key, entry = found, entries[found]
        if op.op == "replace":
            if held == key:
                continue
            if held is not None:  # worded as another one already: one instruction, not two
                remove(key, entry)
                continue
            unwrite(entry)
            entry.value = value_of(op)
            entry.written = ProfileValue(key, "replace", entry.value)
            inserts.append(entry.written)
        else:
            remove(key, entry)
    return tuple(supersede), tuple(inserts)


def _texts(entries: dict[str, _Entry]) -> dict[str, str]:
    return {k: str(e.value.get("text", "")) for k, e in entries.items()}


def find_id(texts: Mapping[str, str], target: str) -> Optional[str]:
    """The id of the instruction ``target`` names among ``texts`` (id -> text), by id
    or by text (case and spacing aside); None when none."""
    target = target.strip()
    if target in texts:
        return target
    wanted = normalize_text(target)
    return next((k for k, text in texts.items() if normalize_text(text) == wanted), None)


def missing_target(target: str, texts: Mapping[str, str]) -> str:
    """The error saying that no current instruction is ``target``, listing them."""
    known = "; ".join(f"[{k}] {text}" for k, text in texts.items()) or "none"
    return f"no current instruction has the id or text {target!r}; the current ones: {known}"
