"""The default sizes of a memory, in a module that imports nothing: the memory, its
buffer and the admin (which the command line opens without LlamaIndex) share them."""

#: Default token limit of the primary chat buffer (the same as ``ChatMemoryBuffer``'s).
DEFAULT_TOKEN_LIMIT = 3000
#: Default token budget of the injected memory block.
DEFAULT_MEMORY_TOKEN_LIMIT = 1500
#: Default number of records each source retrieves per query.
DEFAULT_TOP_K = 10
