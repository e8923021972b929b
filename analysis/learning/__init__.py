"""``compare learning`` and ``compare learning-budget``: predicted against measured time
to a target reward or held-out accuracy (:mod:`.compare`), with the per-step cost
(:mod:`.step_cost`), seed groups (:mod:`.seeds`), held-out targets (:mod:`.heldout`),
re-simulated controllers (:mod:`.resim`), directions in G and B (:mod:`.directions`), real
runs' progress (:mod:`.progress`) and the rollout-budget study (:mod:`.budget`)."""
