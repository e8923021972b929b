"""A deliberately broken controller (for the kit's own tests): after a step whose
longest rollout is over 10x its median it proposes G = 0."""

from __future__ import annotations


class ZeroAfterStraggler:
    """Proposes 8, or 0 right after a long straggler: breaks "a positive int"."""

    candidates = (4, 8)

    def __init__(self) -> None:
        self.name = "zero_after_straggler"
        self.saw_straggler = False

    def propose(self) -> int:
        return 0 if self.saw_straggler else 8

    def observe(self, lengths) -> None:
        flat = sorted(x for group in lengths for x in group)
        self.saw_straggler = flat[-1] > 10 * flat[len(flat) // 2]

    def state_dict(self) -> dict:
        return {"saw_straggler": self.saw_straggler}

    def load_state_dict(self, state: dict) -> None:
        self.saw_straggler = bool(state["saw_straggler"])
