"""Growth of response lengths over training steps (:class:`Drift`) and the named drifts
that ``--drift`` offers (:data:`DRIFTS`); :class:`sim.models.dynamics.GroupLengths`
applies one. Importing this module imports no numpy, so a command's ``--help`` can list
the names."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class Drift:
    """Growth of response lengths over training steps (mean and spread)."""

    mean_growth_per_step: float = 0.0
    """``g``: the mean length is multiplied by ``1 + g min(t, T)`` at step ``t``."""
    spread_growth_per_step: float = 0.0
    """``h``: the spread of log lengths is multiplied by ``1 + h min(t, T)``."""
    saturate_step: int = 10**9
    """``T``: growth stops after this step."""

    def at(self, step) -> tuple[np.ndarray, np.ndarray]:
        """``(log-mean shift, spread factor)`` at ``step`` (int or array)."""
        import numpy as np  # why: DRIFTS names --drift's choices; --help imports no numpy

        t = np.minimum(np.asarray(step, dtype=np.float64), self.saturate_step)
        return np.log1p(self.mean_growth_per_step * t), 1.0 + self.spread_growth_per_step * t


DRIFTS: dict[str, Drift] = {
    "flat": Drift(),
    # DeepSeek-R1-Zero (DeepSeek-AI 2025, arXiv 2501.12948, Fig. 3): the average response
    # length grows roughly linearly, about tenfold over ~8k RL steps; the spread growth is
    # our assumption (+50 % of the log spread over the same horizon).
    "r1zero": Drift(
        mean_growth_per_step=9.0 / 8000, spread_growth_per_step=0.5 / 8000, saturate_step=8000
    ),
}
