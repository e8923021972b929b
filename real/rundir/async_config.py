"""The resolved configuration of an asynchronous real run (``<run>/config.json``, kind ``real-async``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from rolloutlab.real.rundir.config import ConfigError, SyncConfig
from rolloutlab.real.runners.collapse import CollapseConfig
from rolloutlab.sim.pipelines.spec import PipelineConfig, parse_pipeline

ASYNC_KINDS = ("one-step-off", "interval", "bounded")
"""Pipelines of :mod:`sim.pipelines.spec` the real asynchronous loop runs (``partial`` and
``oversample`` are simulator-only; ``interval:0|1`` and ``bounded:0`` are synchronous)."""


@dataclass(frozen=True)
class AsyncConfig:
    """Everything that determines a ``rolloutlab real async`` run."""

    sync: SyncConfig = field(default_factory=SyncConfig)
    """Model, task, learner, controller, budgets: the same settings as ``real sync``."""
    pipeline: str = "one-step-off"
    """``one-step-off | interval:S | bounded:S`` (docs/pipelines.md semantics)."""
    collapse: CollapseConfig = field(default_factory=CollapseConfig)
    """Collapse criteria (:mod:`real.runners.collapse`)."""
    stop_on_collapse: bool = False
    """End the run at the first collapse (stability grids); a NaN always ends it."""
    poll_s: float = 0.2
    """How often (s) a process waiting on the other checks that it is still alive."""

    def __post_init__(self) -> None:
        try:
            pc = parse_pipeline(self.pipeline)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if pc.kind not in ASYNC_KINDS:
            raise ConfigError(
                f"pipeline {self.pipeline!r}: the real asynchronous loop runs "
                f"{', '.join(ASYNC_KINDS)} (use `real sync` for sync)"
            )
        if pc != PipelineConfig(kind=pc.kind, S=pc.S, ratio=pc.ratio):
            raise ConfigError(
                f"pipeline {self.pipeline!r}: options after the kind (sync mode, chunk, "
                "queue, ...) are simulator-only; the real loop runs the plain pipeline"
            )
        if self.sync.refill:
            raise ConfigError(
                "--dynamic-sampling (refill) runs in `real sync` only; the asynchronous loop "
                "drops homogeneous groups without refill"
            )
        if not self.poll_s > 0:
            raise ConfigError(f"poll_s must be > 0, got {self.poll_s}")

    @property
    def pipeline_config(self) -> PipelineConfig:
        """The parsed pipeline (lead, sync cadence, staleness bound)."""
        return parse_pipeline(self.pipeline)

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict (JSON-serialisable)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AsyncConfig:
        """Inverse of :meth:`to_dict`. Raises ConfigError naming an unknown key."""
        unknown = sorted(set(d) - {f.name for f in fields(cls)})
        if unknown:
            raise ConfigError(f"unknown config key(s) {unknown}")
        kw = dict(d)
        if "sync" in kw:
            kw["sync"] = SyncConfig.from_dict(kw["sync"])
        if "collapse" in kw:
            kw["collapse"] = CollapseConfig(**kw["collapse"])
        return cls(**kw)
