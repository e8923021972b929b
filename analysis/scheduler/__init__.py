"""``compare scheduler``: the simulator's paged engine against vLLM's own scheduler
(:mod:`.compare`)."""
