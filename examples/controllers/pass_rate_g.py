"""G from a running pass-rate estimate: about ``hits / p`` rollouts per prompt, so a group
holds ``hits`` correct answers on average (fewer than one and the group has no signal)."""

import math


class PassRateG:
    """Propose the smallest candidate >= ``hits / p``, ``p`` an EMA of the step's mean reward."""

    observes = ("rewards",)  # rolloutlab passes the step's (n_prompts, G) rewards

    def __init__(self, candidates=(4, 8, 16, 32), hits: float = 2.0, decay: float = 0.9):
        if not (hits > 0 and 0 < decay < 1):
            raise ValueError(f"need hits > 0 and 0 < decay < 1, got {hits}, {decay}")
        self.candidates = tuple(sorted(int(g) for g in candidates))
        self.hits, self.decay, self.p = hits, decay, 0.5  # 0.5: no rewards seen yet

    def propose(self) -> int:
        want = self.hits / max(self.p, 1e-3)
        return next((g for g in self.candidates if g >= want), self.candidates[-1])

    def observe(self, lengths, rewards=None) -> None:
        if rewards is not None:  # a run without rewards: keep the estimate
            rate = sum(map(sum, rewards)) / sum(map(len, rewards))
            if math.isfinite(rate):
                self.p = self.decay * self.p + (1 - self.decay) * rate

    def state_dict(self) -> dict:
        return {"p": self.p}

    def load_state_dict(self, state: dict) -> None:
        self.p = float(state["p"])
