"""Reward and dynamic-sampling options shared by ``rolloutlab sim`` and ``rolloutlab sweep``
(docs/dynamic_sampling.md): parse and validate, call nothing else."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import click

from rolloutlab.commands.options.types import NON_NEGATIVE_INT, PROBABILITY, finite
from rolloutlab.sim.pipelines.spec import DEFAULT_MAX_GEN_BATCHES, MAX_ROUNDS, REFILLS

if TYPE_CHECKING:
    from rolloutlab.sim.models.rewards import RewardConfig
    from rolloutlab.sim.pipelines.dynamic_sampling import DynamicSampling
    from rolloutlab.sim.scenario.scenario import Scenario

_OPTIONS = (
    click.option(
        "--pass-rate",
        "pass_rate",
        metavar="fixed:P|beta:A,B|FILE",
        help="Per-prompt pass-rate model: rollouts get Bernoulli rewards (default: the "
        "scenario's pass_rate block, else no rewards). fixed:P is frozen (no learning).",
    ),
    click.option(
        "--dynamic-sampling",
        is_flag=True,
        help="DAPO dynamic sampling: keep only groups whose rewards differ, generating "
        "more rounds until B are kept (synchronous pipeline).",
    ),
    click.option(
        "--gen-batch-factor",
        type=finite(1.0),
        metavar="F",
        help="Prompts generated per round, as a multiple of B (default 1; needs "
        "--dynamic-sampling).",
    ),
    click.option(
        "--max-gen-batches",
        type=NON_NEGATIVE_INT,
        metavar="N",
        help="Generation rounds allowed per step (default "
        f"{DEFAULT_MAX_GEN_BATCHES}, verl's DAPO recipe; 0 = unlimited, up to {MAX_ROUNDS} "
        "then an error); a step that falls short is recorded as aborted and trains on what "
        "it kept.",
    ),
    click.option(
        "--refill",
        type=click.Choice(REFILLS),
        help="Later rounds: a whole generation batch, or only the missing prompts (default batch).",
    ),
    click.option(
        "--target-reward",
        "target_reward",
        type=PROBABILITY,
        metavar="R",
        help="Reward in [0, 1]: the summary reports time_to_target_s (empty if never "
        "reached); default: the scenario's defaults.target_reward when the run has rewards.",
    ),
)


def learning_options(command):
    """Add ``--pass-rate --dynamic-sampling --gen-batch-factor --max-gen-batches --refill
    --target-reward`` to a click command."""
    for option in reversed(_OPTIONS):
        command = option(command)
    return command


def rewards_from_options(
    sc: Scenario,
    pass_rate: str | None,
    dynamic_sampling: bool,
    gen_batch_factor: float | None,
    max_gen_batches: int | None,
    refill: str | None,
    target_reward: float | None,
) -> tuple[RewardConfig | None, DynamicSampling | None, float | None]:
    """The run's reward, dynamic-sampling settings and target reward from the options
    (the target defaults to the scenario's ``defaults.target_reward`` when the run has
    rewards).

    Raises click.UsageError (exit 2, nothing written) naming the option: a bad
    ``--pass-rate`` (P outside [0, 1] or NaN, beta parameters <= 0, missing file or
    field), a dynamic-sampling setting without ``--dynamic-sampling``, dynamic sampling
    or a target without any pass-rate model, a target outside [0, 1] or NaN.
    """
    # why here: the reward models import numpy, which --help does not need
    from rolloutlab.sim.models.rewards import reward_config
    from rolloutlab.sim.pipelines.dynamic_sampling import DynamicSampling
    from rolloutlab.sim.studies.compare import check_target

    try:
        rewards = reward_config(pass_rate, sc.pass_rate, sc.learning)
        check_target(target_reward)
        given = {
            "--gen-batch-factor": gen_batch_factor,
            "--max-gen-batches": max_gen_batches,
            "--refill": refill,
        }
        if not dynamic_sampling and any(v is not None for v in given.values()):
            names = [k for k, v in given.items() if v is not None]
            raise ValueError(f"{', '.join(names)}: needs --dynamic-sampling")
        if gen_batch_factor is not None and math.isnan(gen_batch_factor):
            raise ValueError("--gen-batch-factor: must be a number >= 1, got nan")
        if rewards is None and (dynamic_sampling or target_reward is not None):
            what = "--dynamic-sampling" if dynamic_sampling else "--target-reward"
            raise ValueError(
                f"{what}: needs rewards; give --pass-rate (the scenario has no pass_rate block)"
            )
        dynamic = (
            DynamicSampling(
                gen_batch_factor=1.0 if gen_batch_factor is None else gen_batch_factor,
                max_gen_batches=(
                    DEFAULT_MAX_GEN_BATCHES if max_gen_batches is None else max_gen_batches
                ),
                refill=refill or "batch",
            )
            if dynamic_sampling
            else None
        )
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    if target_reward is None and rewards is not None:
        target_reward = sc.run_defaults.target_reward
    return rewards, dynamic, target_reward
