"""Procedural memory: the standing instructions the assistant follows for one user.

"Answer in French", "no bullet points": a user's instructions are their own document,
kept with its history (who set each one, when, why, and what replaced or removed it),
in the store beside the profile (the profile rows port, document ``"instructions"``).
The memory block shows them first, worded as instructions for the assistant, on
every ``get`` whatever the query; retrieved records stay quoted data below them.

Only three writers exist: the API (``memory.instructions.add/remove/replace``), the
``update_instructions`` agent tool, and a formation pass (the pass part methods of
:class:`Instructions`). Text stored in the conversation never becomes an instruction
by being retrieved.

The package, one concern a module: ``model`` (an instruction, an operation, the
checks and the rule that turns operations into rows), ``document`` (the
:class:`Instructions` object: API and pass part), ``tools`` (the agent tool).
"""

from __future__ import annotations

from .document import Instructions
from .model import MAX_INSTRUCTIONS, MAX_TEXT, Instruction, InstructionOp
from .tools import UpdateInstructionsArgs

__all__ = [
    "MAX_INSTRUCTIONS",
    "MAX_TEXT",
    "Instruction",
    "InstructionOp",
    "Instructions",
    "UpdateInstructionsArgs",
]
