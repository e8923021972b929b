"""One step of a framework's GRPO loop as rolloutlab sees it: the controller observes it and
it is appended to rolloutlab's trace (:mod:`sim.trace.schema`) through the project's
:class:`~sim.trace.jsonl.TraceWriter`, so every reader of a ``rolloutlab real sync`` run
(``compare groups``, ``calibrate groups``, the metrics) reads a framework's run the same way.

A step here is one generation round: ``B`` prompts, ``G`` rollouts each, then the
learner's update(s) on them. Policy version = learner version = step (synchronous).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from rolloutlab.sim.control.observation import observe_step, reason_json
from rolloutlab.sim.scenario import provenance
from rolloutlab.sim.trace.jsonl import TraceWriter, truncate_jsonl
from rolloutlab.sim.trace.metrics import straggler_ratio
from rolloutlab.sim.trace.schema import ROLLOUT_SCHEMA, STEP_SCHEMA

ROLLOUT_COLUMNS = (*list(ROLLOUT_SCHEMA)[:14], "reward")
"""The rollout columns a framework's step fills (the others of the schema are nullable)."""
CONFIG_FILE = "config.json"
TRACE_FILES = ("rollouts.jsonl", "steps.jsonl", "rollouts.parquet", "steps.parquet")


class TraceDirError(ValueError):
    """The trace directory cannot be used as asked; nothing in it was changed."""


@dataclass(frozen=True)
class Generation:
    """What a round's generation produced, recorded when it returned (times: s on the run
    clock; lists ``(B x G,)`` in group order)."""

    t_end: float
    """When generation returned (the trace's ``gen_time`` ends here)."""
    prompt_tokens: list[int]
    """Prompt lengths (tokens)."""
    response_tokens: list[int]
    """Response lengths (tokens, EOS included)."""
    t_first_token: list[float]
    """When each rollout's first token was produced."""
    t_finish: list[float]
    """When each rollout's last token was produced."""
    finish_reason: list[str]
    """``"stop"`` (end of sequence) or ``"length"`` (hit the cap)."""


@dataclass
class RoundRecord:
    """One generation round, filled while it runs (times: s on the run clock).

    Rollout ``i`` belongs to prompt ``i // G`` (group order, as TRL and verl repeat prompts).
    """

    step: int
    """Round index from 0 (the trace's ``step``)."""
    G: int
    """Group size of every prompt of the round."""
    prompt_ids: list[int]
    """``(B,)`` ids of the round's prompts (the dataset row index)."""
    t_start: float
    """When the round's generation was requested."""
    generation: Generation | None = None
    """Set when generation returns."""
    rewards: list[float] | None = None
    """``(B x G,)`` the reward the advantages were computed from (weighted sum of reward functions)."""

    @property
    def B(self) -> int:
        return len(self.prompt_ids)

    def grouped(self, values: list) -> list[list]:
        """``values`` ``(B x G,)`` as ``(B, G)`` lists, prompt by prompt."""
        G = self.G
        return [list(values[p * G : (p + 1) * G]) for p in range(self.B)]

    def generated(self) -> Generation:
        """The round's :class:`Generation`. Raises ValueError naming the field when the
        round is not complete (no generation recorded, or a list not of ``B x G`` values)."""
        gen = self.generation
        if gen is None:
            raise ValueError(f"step {self.step}: generation not recorded")
        n = self.B * self.G
        for name in (
            "prompt_tokens",
            "response_tokens",
            "t_first_token",
            "t_finish",
            "finish_reason",
        ):
            got = len(getattr(gen, name))
            if got != n:
                raise ValueError(
                    f"step {self.step}: {name} holds {got} values; expected B x G = {n}"
                )
        return gen


def rollout_frame(run_id: str, rec: RoundRecord) -> pl.DataFrame:
    """The round's rollout rows (trace schema), one per rollout in group order."""
    gen = rec.generated()
    n, G = rec.B * rec.G, rec.G
    return pl.DataFrame(
        {
            "run_id": [run_id] * n,
            "step": [rec.step] * n,
            "prompt_id": [rec.prompt_ids[i // G] for i in range(n)],
            "sample_idx": [i % G for i in range(n)],
            "group_size": [G] * n,
            "policy_version": [rec.step] * n,
            "learner_version": [rec.step] * n,
            "prompt_tokens": gen.prompt_tokens,
            "response_tokens": gen.response_tokens,
            "finish_reason": gen.finish_reason,
            "worker": [0] * n,
            "t_submit": [rec.t_start] * n,
            "t_first_token": gen.t_first_token,
            "t_finish": gen.t_finish,
            "reward": [None] * n if rec.rewards is None else [float(r) for r in rec.rewards],
        },
        schema={k: ROLLOUT_SCHEMA[k] for k in ROLLOUT_COLUMNS},
    )


def step_frame(
    run_id: str,
    rec: RoundRecord,
    t_end: float,
    lr: float | None,
    controller_state: dict,
    reason: str | None,
    kl: float | None = None,
    grad_norm: float | None = None,
) -> pl.DataFrame:
    """The round's step row: generation from ``t_start`` to the generation's end, the
    learner (scoring, log-probs, update) from there to ``t_end``, no weight sync (one model)."""
    t_gen_end = rec.generated().t_end
    row = {
        "run_id": run_id,
        "step": rec.step,
        "t_start": rec.t_start,
        "t_end": t_end,
        "gen_time": t_gen_end - rec.t_start,
        "train_time": t_end - t_gen_end,
        "sync_time": 0.0,
        "lr": lr,
        "reward_mean": None if rec.rewards is None else float(np.nanmean(rec.rewards)),
        "kl": kl,
        "grad_norm": grad_norm,
        "controller_state": json.dumps(controller_state),
        "controller_reason": reason,
    }
    return pl.DataFrame([row], schema=STEP_SCHEMA)


def step_metrics(rec: RoundRecord, tau: float) -> dict[str, float]:
    """What a framework's own log gains per step: ``rolloutlab/group_size`` (G),
    ``rolloutlab/straggler_ratio`` (max/median response length, :func:`sim.trace.metrics.straggler_ratio`),
    ``rolloutlab/straggler_event`` (1 when that ratio exceeds ``tau``), and
    ``rolloutlab/gen_makespan_s`` (first request to last rollout finished)."""
    gen = rec.generated()
    ratio = straggler_ratio(np.asarray(gen.response_tokens, dtype=float))
    return {
        "rolloutlab/group_size": float(rec.G),
        "rolloutlab/straggler_ratio": float(ratio),
        "rolloutlab/straggler_event": float(ratio > tau),
        "rolloutlab/gen_makespan_s": float(max(gen.t_finish) - rec.t_start),
    }


class RoundTrace:
    """A framework run's trace directory: ``config.json``, ``rollouts.jsonl`` and
    ``steps.jsonl`` appended per step, parquet at :meth:`close`.

    Life cycle: :meth:`open` (a fresh run refuses a directory holding a run; a resumed
    one keeps it and cuts its JSONL back to the checkpoint's steps), then :meth:`finish`
    once per step (the controller observes the step, then its rows are appended and
    flushed), then :meth:`close`.
    """

    def __init__(self, out_dir: str | Path, controller: Any, tau: float):
        self.out = Path(out_dir)
        self.controller = controller
        self.tau = tau
        self.run_id: str | None = None
        self.writer: TraceWriter | None = None

    def open(self, config: dict[str, Any], kind: str, resume_steps: int | None) -> None:
        """Claim the directory: ``resume_steps`` None for a fresh run (refused with
        :class:`TraceDirError` when the directory already holds a run's config or trace),
        else the number of steps the checkpoint holds (the run id is kept; rows of later
        steps are cut)."""
        path = self.out / CONFIG_FILE
        if resume_steps is None:
            held = [n for n in (CONFIG_FILE, *TRACE_FILES) if (self.out / n).exists()]
            if held:
                raise TraceDirError(
                    f"{self.out}: already holds a run ({', '.join(held)}); resume from a "
                    "checkpoint or choose another trace directory (nothing was changed)"
                )
            self.out.mkdir(parents=True, exist_ok=True)
            self.run_id = f"{kind}-{uuid.uuid4().hex[:8]}"
            provenance.write_config(path, {"run_id": self.run_id, "kind": kind, "config": config})
        else:
            try:
                self.run_id = json.loads(path.read_text())["run_id"]
            except (OSError, ValueError, KeyError) as exc:
                raise TraceDirError(f"{path}: no run to resume ({exc!r})") from None
            for name in ("rollouts.jsonl", "steps.jsonl"):
                truncate_jsonl(self.out / name, resume_steps)
        self.writer = TraceWriter(self.out)

    def finish(
        self,
        rec: RoundRecord,
        t_end: float,
        lr: float | None = None,
        kl: float | None = None,
        grad_norm: float | None = None,
    ) -> dict[str, float]:
        """The controller observes the finished step (lengths ``(B, G)``, rewards, prompt
        ids, finish reasons, generation/learner/step times), then its rows are appended.
        Returns :func:`step_metrics` for the framework's log."""
        if self.writer is None or self.run_id is None:
            raise RuntimeError("RoundTrace.finish before open")
        gen = rec.generated()
        observe_step(
            self.controller,
            rec.grouped(gen.response_tokens),
            rewards=None if rec.rewards is None else np.asarray(rec.grouped(rec.rewards)),
            prompt_ids=np.asarray(rec.prompt_ids, dtype=np.int64),
            gen_time_s=gen.t_end - rec.t_start,
            step_time_s=t_end - rec.t_start,
            finish_reasons=rec.grouped(gen.finish_reason),
            learner_time_s=t_end - gen.t_end,
            wall_clock_s=t_end,
        )
        self.writer.append_step(
            rollout_frame(self.run_id, rec),
            step_frame(
                self.run_id,
                rec,
                t_end,
                lr,
                self.controller.state_dict(),
                reason_json(self.controller),
                kl,
                grad_norm,
            ),
        )
        return step_metrics(rec, self.tau)

    def close(self) -> tuple[pl.DataFrame, pl.DataFrame] | None:
        """Write the parquet tables (None before :meth:`open`)."""
        return None if self.writer is None else self.writer.close()
