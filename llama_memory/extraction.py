"""Structured output from an LLM: ask for a pydantic object, get one or a clear error.

Sources that derive structured memories from a conversation (a user profile,
knowledge triples) need the same thing from an LLM: an instance of a pydantic
model, or a refusal that says what went wrong. :func:`structured_output` wraps
LlamaIndex's ``LLM.structured_predict``, which picks the right route for the
model:

- a function-calling LLM (``metadata.is_function_calling_model``) is asked to
  call a tool named after the output class, whose arguments are the object;
- any other LLM is asked for JSON text that is parsed against the class.

Whatever the route, malformed output (no tool call, the wrong tool, text that is
not JSON, JSON that does not validate) is rejected whole with an
:class:`ExtractionError`; a partial object is never returned.
"""

from __future__ import annotations

from typing import Any, TypeVar, Union

from llama_index.core.prompts import PromptTemplate
from pydantic import BaseModel

from .errors import LlamaMemoryError

Model = TypeVar("Model", bound=BaseModel)

#: How much of the LLM's own error text an ExtractionError quotes.
_MAX_DETAIL = 800


class ExtractionError(LlamaMemoryError, ValueError):
    """An LLM's structured output was malformed, or was rejected on validation.

    Nothing derived from that output was written.
    """


def structured_output(
    llm: Any,
    output_cls: type[Model],
    prompt: Union[str, PromptTemplate],
    **prompt_args: Any,
) -> Model:
    """Ask ``llm`` for an instance of ``output_cls``.

    Args:
        llm: a LlamaIndex LLM (function-calling or not).
        output_cls: the pydantic model wanted; its name and docstring are what a
            function-calling LLM sees as the tool to call.
        prompt: a template (``str`` or ``PromptTemplate``) with ``{placeholders}``
            filled from ``prompt_args``. Values are substituted as they are, so
            texts with braces (JSON, code) belong in ``prompt_args``, not in the
            template.
        **prompt_args: the values of the template's placeholders.

    Raises:
        ExtractionError: the output was missing or malformed; the message names
            the class, the LLM and what was wrong.
    """
    template = prompt if isinstance(prompt, PromptTemplate) else PromptTemplate(prompt)
    try:
        result = llm.structured_predict(output_cls, template, **prompt_args)
    # What LlamaIndex raises for malformed output: ValueError for no tool call, a
    # failed parse or validation (pydantic's ValidationError is one); KeyError for a
    # call to a tool that was not offered; TypeError for a non-model result.
    # Transport errors (timeouts, HTTP) are none of these and propagate unchanged.
    except (ValueError, KeyError, TypeError) as exc:
        detail = str(exc)
        if len(detail) > _MAX_DETAIL:
            detail = detail[:_MAX_DETAIL] + "..."
        raise ExtractionError(
            f"{_llm_name(llm)} did not produce a valid {output_cls.__name__}: "
            f"{type(exc).__name__}: {detail}"
        ) from exc
    if not isinstance(result, output_cls):
        raise ExtractionError(
            f"{_llm_name(llm)} returned {type(result).__name__}, not {output_cls.__name__}"
        )
    return result


def _llm_name(llm: Any) -> str:
    try:
        return f"the LLM {llm.metadata.model_name or type(llm).__name__!r}"
    except Exception:  # metadata is a property that some test doubles do not implement
        return f"the LLM {type(llm).__name__!r}"
