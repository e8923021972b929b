"""The real runs' tasks behind one interface, chosen by name (:mod:`.registry`, ``--task``):
digit-chain (:mod:`.digit_chain`, its tokenizer and length law) and graph-walk
(:mod:`.graph_walk`); held-out accuracy (:mod:`.evaluate`) and the within-group spread
of a task's lengths (:mod:`.spread`).
"""
