"""``put()``: the write pipeline, the token-limited buffer of this conversation, and the
background formation passes.
"""
