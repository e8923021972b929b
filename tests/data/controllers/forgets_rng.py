"""A deliberately broken controller (for the kit's own tests): a random G whose RNG is
not part of its state, so a restored controller diverges from the uninterrupted one."""

from __future__ import annotations

import numpy as np


class ForgetsRng:
    """Draws G uniformly from its candidates; ``state_dict`` keeps only a step count."""

    candidates = (4, 8, 16)

    def __init__(self, seed: int = 0) -> None:
        self.name = "forgets_rng"
        self.rng = np.random.default_rng(seed)
        self.steps = 0

    def propose(self) -> int:
        return int(self.rng.choice(self.candidates))

    def observe(self, lengths) -> None:
        self.steps += 1

    def state_dict(self) -> dict:
        return {"steps": self.steps}

    def load_state_dict(self, state: dict) -> None:
        self.steps = int(state["steps"])
