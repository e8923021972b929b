"""The run settings a scenario suggests (its ``defaults`` block), typed, each with the
package's own fallback: the one place that says what a run given no ``--steps``,
``--prompts`` or threshold takes. ``sim``, ``tail-study``, ``sweep`` and
:class:`sim.pipelines.sync.RunConfig` read it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rolloutlab.sim.trace.metrics import DEFAULT_TAU


@dataclass(frozen=True)
class ScenarioDefaults:
    """A scenario's suggested run settings; a key its block lacks takes the default here."""

    steps: int = 300
    """Learner steps T of a run given none."""
    prompts: int = 64
    """Prompt batch B of a run given none."""
    tau: float = DEFAULT_TAU
    """Straggler threshold on max/median length (SAGC's tau; the summaries' straggler rate)."""
    target_reward: float | None = None
    """Reward whose first crossing is the run's time to target (None: no target)."""

    @classmethod
    def of(cls, block: Mapping[str, Any]) -> ScenarioDefaults:
        """From a scenario's ``defaults`` block, already checked by the loader
        (:attr:`sim.scenario.scenario.Scenario.defaults`)."""
        base = cls()
        return cls(
            steps=int(block.get("steps", base.steps)),
            prompts=int(block.get("prompts", base.prompts)),
            tau=float(block.get("tau", base.tau)),
            target_reward=block.get("target_reward"),
        )
