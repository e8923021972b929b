"""Any rolloutlab group-size controller sets verl's ``rollout.n`` per step (verl 0.9.1).

Read in verl 0.9.1's ``verl/trainer/ppo/ray_trainer.py``: ``RayPPOTrainer.fit`` reads
``config.actor_rollout_ref.rollout.n`` afresh every step (the prompt repeat
``gen_batch.repeat(rollout_n, interleave=True)``, the batch repeat, and the actor's
mini-batch ``ppo_mini_batch_size x rollout.n`` in ``_update_actor``), and GRPO groups
by ``uid`` (``core_algos.compute_grpo_outcome_advantage``: mean and std per uid, so groups
of any size are normalised within themselves). Two hooks suffice:

- ``_get_gen_batch`` (called once per step, before ``rollout.n`` is read): the
  controller proposes G for the step's ``B`` prompts, the rules are checked
  (:mod:`.group_rules`: ``B x G`` divisible by the data-parallel size and the actor's
  mini-batch arithmetic, within the budget), and ``rollout.n = G`` is written;
- ``_update_actor`` (called once per step with the scored batch): the step's response
  lengths, grouped by ``uid``, and rewards go to the controller and to rolloutlab's
  trace (:func:`round_from_batch`). The trace's ``gen_time`` runs from the step's start
  to the actor update (generation, rewards, log-probs), ``train_time`` is the update.

verl's batch carries no per-rollout finish time, so the trace's ``t_first_token`` and
``t_finish`` are the step's generation end for every rollout (``config.json`` says
``"rollout_times": "step"``): readers of lengths (``compare groups``, ``calibrate
groups``) read it fully; per-rollout idle (``compare idle``) does not apply.

verl is imported only inside the functions that need it (the mixin is built by
:func:`group_size_trainer` on verl's class). Tested on CPU against verl's ``DataProto`` and
GRPO advantage function (tests/test_verl_integration.py, in the environment of
``bench/verl_cpu_env.sh``); the end-to-end run is in ``bench/gpu_validation.sh``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from rolloutlab.real.integrations.frameworks import require
from rolloutlab.real.integrations.group_rules import check_group_size
from rolloutlab.real.integrations.round_trace import Generation, RoundRecord
from rolloutlab.sim.control.observation import propose_step


def group_order(uids: np.ndarray) -> tuple[list[Any], list[np.ndarray]]:
    """Groups of a verl batch by ``uid``: ``(uids in first-seen order, row indices of
    each)``. verl's repeat is interleaved (``uid`` ``a a b b``), but ``balance_batch``
    may reorder rows, so rows are grouped by value, never by position."""
    order: dict[Any, list[int]] = {}
    for i, u in enumerate(uids):
        order.setdefault(u, []).append(i)
    return list(order), [np.asarray(v) for v in order.values()]


def round_from_batch(
    batch: Any, step: int, prompt_ids: list[int] | None, t_start: float, t_gen_end: float
) -> RoundRecord:
    """A :class:`~.round_trace.RoundRecord` of a scored verl ``DataProto``: response lengths
    ``response_mask.sum(-1)`` (tokens), prompt lengths ``attention_mask.sum(-1)`` minus
    them, rewards ``token_level_scores.sum(-1)`` (verl's outcome score, before any KL
    penalty), finish ``"length"`` when a response fills the response width, grouped by
    ``uid`` (:func:`group_order`). ``prompt_ids``: one id per group (default: 0..B-1).

    Raises ValueError naming the step when the groups differ in size (one G per step is
    what a controller observes) or a needed field is missing.
    """
    for key in ("response_mask", "attention_mask"):
        if key not in batch.batch.keys():
            raise ValueError(f"step {step}: verl batch has no '{key}'")
    uids, rows = group_order(batch.non_tensor_batch["uid"])
    sizes = sorted({len(r) for r in rows})
    if len(sizes) != 1:
        raise ValueError(f"step {step}: verl batch holds groups of sizes {sizes}; expected one G")
    G = sizes[0]
    flat = np.concatenate(rows)  # (B x G,) rows in group order
    resp = batch.batch["response_mask"].sum(-1).cpu().numpy()[flat].astype(int)
    total = batch.batch["attention_mask"].sum(-1).cpu().numpy()[flat].astype(int)
    width = int(batch.batch["response_mask"].shape[-1])
    scores = (
        batch.batch["token_level_scores"].sum(-1).cpu().numpy()[flat].tolist()
        if "token_level_scores" in batch.batch.keys()
        else None
    )
    n = len(flat)
    return RoundRecord(
        step=step,
        G=G,
        prompt_ids=list(prompt_ids) if prompt_ids is not None else list(range(len(uids))),
        t_start=t_start,
        generation=Generation(
            t_end=t_gen_end,
            prompt_tokens=(total - resp).tolist(),
            response_tokens=resp.tolist(),
            t_first_token=[t_gen_end] * n,
            t_finish=[t_gen_end] * n,
            finish_reason=["length" if r >= width else "stop" for r in resp],
        ),
        rewards=scores,
    )


def divisors_for(config: Any) -> dict[str, int]:
    """What ``B x G`` must be a multiple of in a verl run (read from its config): the
    data-parallel size (``trainer.n_gpus_per_node x trainer.nnodes``, the batch is chunked
    across ranks) and ``actor.ppo_micro_batch_size_per_gpu x dp`` (a PPO mini-batch of
    ``ppo_mini_batch_size x G`` rollouts is cut into micro-batches on every rank)."""
    dp = int(config.trainer.n_gpus_per_node) * int(config.trainer.nnodes)
    actor = config.actor_rollout_ref.actor
    micro = actor.get("ppo_micro_batch_size_per_gpu") or 1
    return {
        "data-parallel size": dp,
        "ppo_micro_batch_size_per_gpu x data-parallel size": int(micro) * dp,
    }


def propose_rollout_n(
    controller: Any, config: Any, prompts: int, budget: int | None, step: int
) -> int:
    """The controller's G for the step, checked (:func:`divisors_for`, ``budget``) and
    written to ``config.actor_rollout_ref.rollout.n``. Raises
    :class:`~.group_rules.GroupSizeError` before anything is generated."""
    G = propose_step(controller)
    who = getattr(controller, "name", None) or type(controller).__name__
    check_group_size(G, prompts, budget, divisors_for(config), f"controller {who}, step {step}")
    omegaconf = require_omegaconf()
    with omegaconf.open_dict(config):
        config.actor_rollout_ref.rollout.n = G
    return G


def require_omegaconf():
    """omegaconf (verl's config library), imported when a verl config is written."""
    import omegaconf

    return omegaconf


def group_size_trainer(base: type | None = None) -> type:
    """verl's ``RayPPOTrainer`` (or ``base``) with G per step from a rolloutlab controller.

    The returned class takes the trainer's own arguments plus ``controller`` (a
    controller object), ``trace`` (a :class:`~.round_trace.RoundTrace`, opened by the
    caller) and ``budget`` (most rollouts per step, or None). Raises
    :class:`.frameworks.FrameworkError` when verl is missing or not 0.9.1.
    """
    import time

    if base is None:
        require("verl")
        from verl.trainer.ppo.ray_trainer import RayPPOTrainer

        base = RayPPOTrainer

    class GroupSizeRayPPOTrainer(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, controller: Any, trace: Any, budget=None, **kw: Any):
            super().__init__(*args, **kw)
            self.rl_controller, self.rl_trace, self.rl_budget = controller, trace, budget
            self.rl_step, self.rl_t0 = 0, time.perf_counter()
            self.rl_clock: Callable[[], float] = lambda: time.perf_counter() - self.rl_t0
            self.rl_t_start = 0.0

        def _get_gen_batch(self, batch):
            self.rl_t_start = self.rl_clock()
            propose_rollout_n(
                self.rl_controller, self.config, len(batch), self.rl_budget, self.rl_step
            )
            return super()._get_gen_batch(batch)

        def _update_actor(self, batch):
            t_gen_end = self.rl_clock()
            rec = round_from_batch(batch, self.rl_step, None, self.rl_t_start, t_gen_end)
            out = super()._update_actor(batch)
            self.rl_trace.finish(rec, self.rl_clock())
            self.rl_step += 1
            return out

    return GroupSizeRayPPOTrainer
