"""Choose the rollout engine of a real run: ``torch`` (CPU, :class:`real.engines.torch_engine.TorchEngine`)
or ``vllm`` (GPU, :class:`real.engines.vllm_engine.VllmEngine`).

:func:`check_engine` runs before a run directory is touched, so ``--engine vllm`` on a
machine without vllm fails at once with one clear line; vllm itself is imported only
when the vLLM engine is built.
"""

from __future__ import annotations

from collections.abc import Callable

ENGINES = ("torch", "vllm")


class EngineUnavailable(RuntimeError):
    """The chosen engine cannot run on this machine; the message says what to install."""


def check_engine(engine: str, engine_mode: str = "continuous") -> None:
    """Raise if ``engine`` cannot run here or with ``engine_mode``.

    Raises: ValueError for an unknown engine, or vllm with ``engine_mode="static"``
    (vLLM batches continuously); :class:`EngineUnavailable` when vllm is not installed.
    """
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    if engine == "vllm":
        if engine_mode != "continuous":
            raise ValueError(
                f"engine 'vllm' batches continuously; engine_mode {engine_mode!r} "
                "is only available with the torch engine"
            )
        from rolloutlab.real.engines.vllm_engine import VLLM_VERSION, vllm_available

        if not vllm_available():
            raise EngineUnavailable(
                "--engine vllm: the 'vllm' package is not installed. It needs a CUDA GPU: "
                f"pip install 'rolloutlab[gpu]' (vllm=={VLLM_VERSION}); see docs/gpu.md. "
                "Use --engine torch on this machine."
            )


def engine_factory(engine: str, engine_mode: str = "continuous", vllm_config=None) -> Callable:
    """A ``factory(model, capacity, clock) -> RolloutEngine`` for :class:`real.runners.sync.SyncRun`.

    Raises: as :func:`check_engine`.
    """
    check_engine(engine, engine_mode)
    if engine == "torch":
        from rolloutlab.real.engines.torch_engine import TorchEngine

        return lambda model, capacity, clock: TorchEngine(model, capacity, clock, engine_mode)
    from rolloutlab.real.engines.vllm_engine import VllmConfig, VllmEngine

    cfg = vllm_config or VllmConfig()
    return lambda model, capacity, clock: VllmEngine(model, capacity, clock, cfg)
