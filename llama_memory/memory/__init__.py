"""The LlamaIndex-facing memory: the ``ComposableMemory`` facade, ``from_defaults``, its
settings, the wiring that builds a runtime from them, and restoring a serialised memory.
"""
