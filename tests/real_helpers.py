"""Shared tiny settings for the real-run tests (kept small: the whole real suite runs in ~1 min)."""

from __future__ import annotations

import dataclasses

from rolloutlab.real.rundir.config import SyncConfig, WarmStartConfig
from rolloutlab.real.tasks.digit_chain import TaskConfig


def tiny_config(**kw) -> SyncConfig:
    """A run of a few seconds: 2 prompts, G=2, 2 warm-start steps, 4 held-out problems."""
    base = SyncConfig(
        controller="static:2",
        steps=3,
        prompts=2,
        capacity=8,
        eval_every=2,
        eval_size=4,
        checkpoint_every=2,
        max_response_length=24,
        task=TaskConfig(n_median=3.0, n_max=5),
        warm_start=WarmStartConfig(steps=2, batch_size=8),
    )
    return dataclasses.replace(base, **kw)
