"""The LlamaIndex-facing memory: the ``ComposableMemory`` facade, ``from_defaults``, its
settings, the wiring that builds a runtime from them, and restoring a serialised memory.

The default sizes of a memory are here, where importing them imports nothing: the
settings, the buffer and the command line (which states them in its help without
loading LlamaIndex) share them.
"""

#: Default token limit of the primary chat buffer (the same as ``ChatMemoryBuffer``'s).
DEFAULT_TOKEN_LIMIT = 3000
#: Default token budget of the injected memory block.
DEFAULT_MEMORY_TOKEN_LIMIT = 1500
#: Default number of records each source retrieves per query.
DEFAULT_TOP_K = 10
