"""Framework integrations: rolloutlab's group-size controllers inside other RL trainers,
writing rolloutlab's trace. Each module imports its framework only when it is imported
itself (:func:`.frameworks.require` checks that it is installed, at the version the
module was written for): :mod:`.trl` (TRL's ``GRPOTrainer``), :mod:`.verl` (verl's
per-step ``rollout.n``), and the pure rules they share (:mod:`.group_rules`).
"""
