"""``get()``: the read pipeline (query -> retrieve -> relevance -> dedup -> budget -> insert)
and the composition of the memory block.
"""
