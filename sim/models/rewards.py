"""Rewards of a simulated run: which pass-rate model, and how training moves it.

:class:`RewardConfig` is the frozen per-run choice (``RunConfig.rewards``; ``None`` = no
rewards: no reward draw, no reward columns, timing unchanged). :class:`RewardTracker` is its
run-time state, one per run, shared by every pipeline: it draws a step's correctness
(:func:`sim.models.passrate.draw_correct`) at the pass rates of the policy that generates, and
hands the trained groups' rewards to the learning-progress model
(:class:`rolloutlab.sim.models.learning.LearningModel`) when the run has one.

When pass rates move (docs/dynamic_sampling.md): only when the run has learning
parameters (the scenario's ``learning`` block) *and* the pass-rate spec is not
``fixed:P``. ``fixed:P`` means a frozen pass rate -- the closed-form check of
``informative_frac`` against ``1 - p^G - (1 - p)^G`` relies on it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from rolloutlab.sim.models.passrate import (
    FixedPassRate,
    PassRateModel,
    draw_correct,
    parse_pass_rate,
)
from rolloutlab.sim.models.update_log import UpdateLog


@dataclass(frozen=True)
class RewardConfig:
    """Pass-rate model, length-correctness coupling and learning parameters of one run."""

    pass_rate: PassRateModel
    coupling: float = 0.0
    """Logit tilt per unit standardised log length (:func:`sim.models.passrate.coupled_probs`)."""
    learning: Any = None
    """A :class:`rolloutlab.sim.models.learning.LearningParams`, or ``None``: pass rates stay at
    their initial values."""

    @property
    def learns(self) -> bool:
        """Pass rates move with training (learning params given, spec not ``fixed:``)."""
        return self.learning is not None and not isinstance(self.pass_rate, FixedPassRate)

    def describe(self) -> dict[str, Any]:
        """JSON-able description for ``config.json``."""
        learning = self.learning
        if dataclasses.is_dataclass(learning) and not isinstance(learning, type):
            learning = {f.name: getattr(learning, f.name) for f in fields(learning)}
        return {
            "pass_rate": self.pass_rate.spec,
            "coupling": self.coupling,
            "learning": learning,
            "learns": self.learns,
        }


def check_updates(updates: int, batch_size: int) -> None:
    """Raises ValueError unless ``updates`` (optimizer updates per rollout batch, K) is an
    int with ``1 <= K <= B`` that divides the prompt batch ``B`` (verl: ``train_batch_size``
    a multiple of ``ppo_mini_batch_size``)."""
    if isinstance(updates, bool) or not isinstance(updates, int) or updates < 1:
        raise ValueError(f"--updates-per-batch: expected an int >= 1, got {updates!r}")
    if updates > batch_size or batch_size % updates:
        raise ValueError(
            f"--updates-per-batch {updates}: must divide the prompt batch B = {batch_size} "
            "(mini-batches of B / K prompts)"
        )


def learning_params(block: dict | None, where: str = "learning") -> Any:
    """:class:`rolloutlab.sim.models.learning.LearningParams` from a scenario ``learning`` block
    (unknown keys such as ``provenance`` ignored); ``None`` for ``None``.

    Raises ValueError naming ``where`` and the field for a bad value."""
    if block is None:
        return None
    from rolloutlab.sim.models.learning import LearningParams  # (why: owned by sim.models.learning)

    known = {f.name for f in fields(LearningParams)}
    build = getattr(LearningParams, "from_dict", None)
    try:
        if build is not None:
            return build(block)
        return LearningParams(**{k: v for k, v in block.items() if k in known})
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}") from None


def reward_config(
    spec: str | None, pass_rate: PassRateModel | None, learning: Any = None
) -> RewardConfig | None:
    """The run's :class:`RewardConfig`: ``spec`` (``--pass-rate``) if given, else the
    scenario's pass-rate model ``pass_rate`` (:attr:`sim.scenario.scenario.Scenario.pass_rate`),
    else ``None`` (no rewards); ``learning``: the scenario's
    :class:`~sim.models.learning.LearningParams`, or None. The length coupling belongs to
    the pass-rate model it was fitted with: the scenario's for the scenario's model, a
    file's own ``coupling`` for a file, 0 for a ``fixed:P`` or ``beta:A,B`` given on the
    command line (so ``fixed:P`` keeps the closed form ``1 - p^G - (1 - p)^G``). Raises
    ValueError naming the option."""
    if spec is None:
        if pass_rate is None:
            return None
        model = pass_rate
    else:
        model = parse_pass_rate(spec, 0.0)
    return RewardConfig(
        pass_rate=model, coupling=float(getattr(model, "coupling", 0.0)), learning=learning
    )


class RewardTracker:
    """Run-time rewards of one run: initial pass rates, the learning model, the draws.

    ``cfg`` ``None`` makes a disabled tracker (:attr:`enabled` False) that pipelines
    skip. ``seed`` keys every draw; ``lr`` and ``batch_size`` (B) go to
    ``LearningModel.update``; ``updates`` (K) optimizer updates per rollout batch split the
    trained groups into K mini-batches (:meth:`learn`); ``log`` (an
    :class:`~sim.models.update_log.UpdateLog`, or None) gets one row per update. Raises
    ValueError unless K >= 1 divides B.
    """

    def __init__(
        self,
        cfg: RewardConfig | None,
        seed: int,
        lr: float,
        batch_size: int,
        updates: int = 1,
        log: UpdateLog | None = None,
    ):
        check_updates(updates, batch_size)
        self.cfg, self.seed, self.lr, self.B, self.K = cfg, seed, lr, batch_size, updates
        self.log = log
        self.model = None
        if cfg is not None and cfg.learns:
            from rolloutlab.sim.models.learning import (
                LearningModel,  # (why: owned by sim.models.learning)
            )

            self.model = LearningModel(cfg.learning, seed=seed)

    @property
    def enabled(self) -> bool:
        """The run has rewards."""
        return self.cfg is not None

    def _cfg(self) -> RewardConfig:
        """The config; RuntimeError on a disabled tracker (callers check :attr:`enabled`)."""
        if self.cfg is None:
            raise RuntimeError("RewardTracker: the run has no pass-rate model")
        return self.cfg

    def pass_rates(self, prompt_ids: np.ndarray, model: Any = None) -> np.ndarray:
        """Pass rates of ``prompt_ids`` (any shape) under ``model`` (default: the
        learner's current model; the asynchronous pipeline passes the generators' copy)."""
        p0 = self._cfg().pass_rate.initial(self.seed, prompt_ids)
        model = model if model is not None else self.model
        return p0 if model is None else np.asarray(model.current(p0), dtype=np.float64)

    def draw(
        self, step, prompt_ids: np.ndarray, G: int, lengths: np.ndarray | None, model: Any = None
    ) -> np.ndarray:
        """``(n, G)`` bool correctness of a generation round at ``step`` (keyed draws,
        :func:`sim.models.passrate.draw_correct`); ``lengths`` (n, G) for the coupling."""
        p = self.pass_rates(prompt_ids, model)
        return draw_correct(self.seed, step, prompt_ids, G, p, lengths, self._cfg().coupling)

    def behaviour_copy(self) -> Any:
        """A copy of the learning model as it is now (the weights a sync sends to the
        generators), or ``None`` without a model."""
        if self.model is None:
            return None
        from rolloutlab.sim.models.learning import LearningModel

        copy = LearningModel(self._cfg().learning, seed=self.seed)
        copy.load_state_dict(self.model.state_dict())
        return copy

    def learn(
        self, rewards: list[np.ndarray], step: int, staleness: np.ndarray | None = None
    ) -> float:
        """``LearningModel.update`` with the trained groups' rewards (one list entry per
        group, ``staleness`` (n,) versions or None = on-policy); returns the logit shift,
        0 without a model.

        With K updates per batch (verl's ``ppo_mini_batch_size = B / K``) the groups are
        split in order into K mini-batches of ``B / K`` prompts, each one update; mini-batch
        ``j`` is ``j`` updates staler than its rollouts (the policy moved ``j`` times since
        they were generated), which the progress factor and the collapse rule
        (:func:`sim.models.staleness.safe_span_eta`, span ``s + j + 1``) both see."""
        if self.model is None:
            return 0.0
        s = np.zeros(len(rewards)) if staleness is None else np.asarray(staleness, float)
        if self.K == 1:
            d = float(self.model.update(rewards, self.lr, staleness, step, self.B))
            if self.log is not None:
                self.log.record(step, 0, s, d, self.model)
            return d
        shift = 0.0
        for j, idx in enumerate(np.array_split(np.arange(len(rewards)), self.K)):
            if idx.size:
                part = [rewards[i] for i in idx]
                d = self.model.update(part, self.lr, s[idx] + j, step, self.B // self.K)
                shift += d
                if self.log is not None:
                    self.log.record(step, j, s[idx], d, self.model)
        return float(shift)
