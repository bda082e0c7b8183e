"""The LlamaIndex-facing memory: the facade, ``from_defaults``, settings, wiring and
restore; and the default sizes, importable without LlamaIndex (the command line's help
states them).
"""

#: Default token limit of the primary chat buffer (the same as ``ChatMemoryBuffer``'s).
DEFAULT_TOKEN_LIMIT = 3000
#: Default token budget of the injected memory block.
DEFAULT_MEMORY_TOKEN_LIMIT = 1500
#: Default number of records each source retrieves per query.
DEFAULT_TOP_K = 10
