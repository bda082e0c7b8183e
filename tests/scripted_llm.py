"""The tests' import name for :mod:`llama_memory.testing` (the scripted LLM moved there so
that the notebooks can use it too)."""

from llama_memory.testing import (
    LLMCall,
    ScriptedLLM,
    ScriptExhausted,
    ScriptItem,
    ToolCallReply,
    message_plain_text,
)

__all__ = [
    "LLMCall",
    "ScriptExhausted",
    "ScriptItem",
    "ScriptedLLM",
    "ToolCallReply",
    "message_plain_text",
]
