"""Asynchronous GRPO with bounded staleness: the learner's loop (the generator is :mod:`real.runners.async_workers`).

The pipelines are the simulator's (docs/pipelines.md, :mod:`sim.pipelines.spec`): prompt
batch ``j`` is dispatched once ``j - v_push <= lead`` (``v_push``: the newest weights
version pushed to the generator), weights are pushed every ``sync_every`` learner steps,
and a rollout with ``learner_version - policy_version > S_max`` is never trained on.

| ``--pipeline`` | lead | push every | ``S_max`` |
|---|---|---|---|
| ``one-step-off`` | 1 | 1 | 1 |
| ``interval:S`` | S-1 | S | S-1 |
| ``bounded:S`` | S | 1 | S |

Learner step ``t`` (version ``t``): dispatch every admissible batch (``G =
controller.propose()`` per batch, at dispatch) -> receive batch ``t`` -> check staleness
(stale groups are dropped: counted, written with finish reason ``abort``) -> rewards,
advantages, update (the same code as ``real sync``) -> push weights (timed) when due ->
``observe_step(controller, lengths, ...)`` (rewards, prompt ids, the batch's generation
time and the learner's step time since the previous step ended) -> collapse check
(:mod:`real.runners.collapse`) -> append and flush the step's rows. ``policy_version`` of a rollout is the version the generator held
when it started the batch; ``learner_version`` is ``t``. With ``bounded:0`` (or
``interval:0|1``) the loop runs exactly the synchronous loop's rollouts and updates.

The generator is one process running one batch at a time, so ``bounded:S`` differs from
``interval:S+1`` in the push cadence (every step: fresher weights), not in concurrency.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import torch
from rolloutlab.real.engines.factory import run_and_close
from rolloutlab.real.rundir import folder as rundir
from rolloutlab.real.rundir.async_config import AsyncConfig
from rolloutlab.real.rundir.config import ConfigError
from rolloutlab.real.rundir.resume_check import resume_point
from rolloutlab.real.rundir.trace_rows import (
    append_engine_requests,
    finish_reason_rows,
    rollout_rows,
    step_row,
)
from rolloutlab.real.rundir.turn_rows import append_turns, write_turns_parquet
from rolloutlab.real.runners.async_workers import GeneratorHandle, GeneratorSpec, SharedWeights
from rolloutlab.real.runners.collapse import CollapseDetector, outcome
from rolloutlab.real.runners.refill import sampling_record
from rolloutlab.real.runners.sync import SyncRun, check_before_writing
from rolloutlab.sim.control.observation import observe_step, propose_step
from rolloutlab.sim.trace import strict_json
from rolloutlab.sim.trace.progress import progress_bar


def fresh_enough(
    policy_versions: Sequence[int], learner_version: int, max_staleness: int
) -> np.ndarray:
    """Bool ``(n,)``: which groups (one policy version each) may be trained on at
    ``learner_version``: ``0 <= learner_version - policy_version <= max_staleness``.

    Raises: ValueError if a group comes from a version newer than the learner's (a bug).
    """
    s = learner_version - np.asarray(policy_versions, dtype=np.int64)
    if (s < 0).any():
        raise ValueError(
            f"a rollout of policy version {int(np.max(policy_versions))} reached learner "
            f"version {learner_version}: versions must not run ahead of the learner"
        )
    return s <= max_staleness


class AsyncRun(SyncRun):
    """One asynchronous run in ``out_dir``; :meth:`run` executes the remaining steps.

    Reuses :class:`real.runners.sync.SyncRun` for set-up (warm start, controller, learner,
    resume, traces); its engine stays in the learner process for held-out evaluation only.
    """

    WHOLE_ROUNDS = False  # stale groups may be dropped: only whole groups are checked on resume

    def __init__(
        self,
        acfg: AsyncConfig,
        out_dir: Path,
        run_id: str,
        resume: bool,
        cache_dir: Path | None = None,
    ):
        super().__init__(acfg.sync, out_dir, run_id, resume, cache_dir=cache_dir)
        self.acfg, self.pc = acfg, acfg.pipeline_config
        self.detector = CollapseDetector(acfg.collapse)
        self.pending_G: list[int] = []
        if self.resumed_from is not None:  # (checkpoints are written after step 1 on)
            state = json.loads((self.resumed_from / "state.json").read_text())
            self.detector.load_state_dict(state["collapse"])
            self.pending_G = list(state["pending_G"])  # G of batches in flight at the checkpoint
        self.v_push = self.next_batch = self.start_step
        self.inflight: dict[int, tuple[int, list, list]] = {}
        self._t_prev_end: float | None = None
        self.weights = SharedWeights(self.learner.model.state_dict(), self.start_step)
        t0 = time.perf_counter() - self.clock()
        spec = GeneratorSpec(
            self.learner.model.cfg,
            self.cfg.capacity,
            self.cfg.engine_mode,
            t0,
            acfg.poll_s,
            self.cfg.torch_threads,
            self.cfg.engine,
            self.cfg.vllm_memory_share,
            self.cfg.vllm_dtype,
        )
        self.generator = GeneratorHandle(spec, self.weights, self.pc.lead + 1)

    def run(self, progress: bool = True) -> tuple[pl.DataFrame, pl.DataFrame]:
        """Run steps ``start_step..steps-1`` (fewer if a collapse ends the run); returns the
        closed trace. Raises GeneratorDied (after writing every step trained so far)."""
        self.generator.start()
        try:
            if self.start_step == 0:
                self._evaluate(-1)
            bar = progress_bar(
                range(self.start_step, self.cfg.steps),
                initial=self.start_step,
                total=self.cfg.steps,
                enabled=progress,  # a bar on a terminal, plain lines otherwise
                desc=f"real async {self.pc.spec}",
                unit="step",
            )
            for t in bar:
                info = self.step(t)
                bar.set_postfix(
                    G=info["G"], reward=f"{info['reward_mean']:.2f}", staleness=info["staleness"]
                )
                if self.detector.failure == "nan" or (
                    self.acfg.stop_on_collapse and self.detector.collapsed
                ):
                    break
        finally:
            self.generator.stop()
            self._write_outcome()
            traces = self.writer.close()
        return traces

    def _dispatch(self) -> None:
        last = min(self.v_push + self.pc.lead, self.cfg.steps - 1)
        while self.next_batch <= last:
            j = self.next_batch
            G = self.pending_G.pop(0) if self.pending_G else propose_step(self.controller)
            if G > self.cfg.capacity:
                raise ConfigError(
                    f"batch {j}: controller proposed G={G} > engine capacity {self.cfg.capacity}"
                )
            problems, reqs = self._requests(j, G)
            self.inflight[j] = (G, problems, reqs)
            self.generator.dispatch(j, reqs, self.params)
            self.next_batch += 1

    def step(self, step: int) -> dict[str, Any]:
        """Learner step ``step`` (module docstring); returns the learner.jsonl row."""
        probe = self.probe.record(self.learner.model)  # the learner process's speed (probe.py)
        self._dispatch()
        results, version, pull_s = self.generator.receive(step)
        t_recv = self.clock()
        G, problems, reqs = self.inflight.pop(step)
        t_start, t_gen = min(r.t_submit_s for r in results), max(r.t_finish_s for r in results)
        fresh = bool(fresh_enough([version], step, self.pc.max_staleness)[0])
        if fresh:
            rewards, lengths, keep, stats = self._learn(step, G, problems, reqs, results)
        else:  # never trained on: only its rewards are logged
            rewards, lengths = self._score(problems, results, G)  # (B, G)
            keep, stats = torch.zeros(len(problems), dtype=torch.bool), None
        t_train = self.clock()
        if (step + 1) % self.pc.sync_every == 0:
            self.weights.push(self.learner.model.state_dict(), step + 1)
            self.v_push = step + 1
        t_sync = self.clock()
        observe_step(
            self.controller,
            lengths,
            rewards=rewards.detach().cpu().numpy(),  # (B, G)
            prompt_ids=self._prompt_ids(step * self.cfg.prompts, len(problems)),
            gen_time_s=t_gen - t_start,
            step_time_s=t_sync - (t_start if self._t_prev_end is None else self._t_prev_end),
            finish_reasons=finish_reason_rows(results, G),
            learner_time_s=t_train - t_recv,
            wall_clock_s=t_sync,
        )
        fired = self.detector.observe(step, float(rewards.mean()), *self._health(stats))
        t_end = self.clock()
        sampling = sampling_record(rewards, keep, results, G, None)
        correct = [self.ops.correct(problems[r.request_id // G], r.response_ids) for r in results]
        first = step * self.cfg.prompts
        rows = rollout_rows(self.run_id, step, G, results, first, rewards, correct).with_columns(
            pl.Series("policy_version", [version] * len(results), dtype=pl.Int64)
        )
        if not fresh:
            rows = rows.with_columns(pl.lit("abort").alias("finish_reason"))
        row = step_row(
            self.run_id,
            step,
            (t_start, t_gen, t_train, t_sync, t_end),
            self.cfg.learner.lr,
            stats,
            self.controller.state_dict(),
            sampling,
        ).with_columns(pl.lit(t_train - t_recv).alias("train_time"))
        self.writer.append_step(rows, row)
        append_engine_requests(self.out, step, G, results, first)
        append_turns(self.out, self.run_id, step, G, results, first)
        extra = {
            "policy_version": version,
            "staleness": step - version,
            "dropped": 0 if fresh else len(results),
            "pull_s": pull_s,
            "wait_s": None if self._t_prev_end is None else t_recv - self._t_prev_end,
            "collapse": fired,
            **sampling,
            **probe,
        }
        if stats is not None:
            extra.update(
                kl=stats.kl, log_ratio_abs_mean=stats.log_ratio_abs_mean, ratio_max=stats.ratio_max
            )
        self._t_prev_end = t_end
        return self._record(step, G, problems, results, rewards, keep, stats, t_start, t_end, extra)

    @staticmethod
    def _health(stats: Any) -> tuple:
        if stats is None:
            return None, None, None, None, None
        return stats.kl, stats.log_ratio_abs_mean, stats.loss, stats.grad_norm, stats.entropy

    def _evaluate(self, step: int) -> float:
        self.engine.update_weights(self.learner.model.state_dict(), step + 1)
        return super()._evaluate(step)

    def _checkpoint(self, done: int, t_s: float, extra: dict[str, Any] | None = None) -> None:
        pending = [self.inflight[j][0] for j in sorted(self.inflight)]
        super()._checkpoint(
            done, t_s, {"pending_G": pending, "collapse": self.detector.state_dict()}
        )

    def _write_outcome(self) -> None:
        d = self.detector
        doc = outcome(d, pipeline=self.pc.spec, lr=self.cfg.learner.lr, seed=self.cfg.seed)
        doc["weight_pushes_to_collapse"] = (
            None if d.t_collapse is None else math.ceil(d.t_collapse / self.pc.sync_every)
        )
        strict_json.write_json(self.out / "collapse.json", doc)
        write_turns_parquet(self.out)  # multi-turn tasks only


def run_async(
    acfg: AsyncConfig,
    out_dir: str | Path,
    resume: bool = False,
    progress: bool = True,
    overrides: dict[str, Any] | None = None,
    cache_dir: Path | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Start (or with ``resume`` continue) an asynchronous run in ``out_dir``; ``cache_dir``:
    the shared warm-start cache (None: not used).

    ``overrides``: settings given on the command line, dotted (``sync.learner.lr``);
    only ``sync.steps`` may differ on resume. Raises: RunDirError, ConfigError,
    CheckpointError as :func:`real.runners.sync.run_sync`; GeneratorDied if the generator
    process dies (the trace then holds every step trained before).
    """
    out = Path(out_dir)
    check_before_writing(acfg.sync)  # a bad setting fails before anything is written
    run_id, acfg = rundir.claim(
        out,
        acfg,
        resume,
        overrides,
        check=lambda c: resume_point(out, None),
        kind="real-async",
        config_cls=AsyncConfig,
    )
    return run_and_close(AsyncRun(acfg, out, run_id, resume, cache_dir), progress)
