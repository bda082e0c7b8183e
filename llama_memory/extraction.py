"""Kept for imports written before :mod:`llama_memory.formation`: ``from
llama_memory.extraction import ExtractionError, structured_output`` still works.

:class:`~llama_memory.errors.ExtractionError` lives with the library's other errors
(and is exported as ``llama_memory.ExtractionError``);
:func:`~llama_memory.formation.answer.structured_output` with the answer of a
formation pass. Nothing in the package imports this module.
"""

from .errors import ExtractionError
from .formation.answer import structured_output

__all__ = ["ExtractionError", "structured_output"]
