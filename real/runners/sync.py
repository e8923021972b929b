"""The synchronous GRPO loop: propose G, generate B x G, reward, update, sync weights, observe.

One step (docs/DESIGN.md "Pipeline"):

1. ``G = controller.propose()`` (refused if ``G > engine.capacity``);
2. the engine generates ``G`` rollouts for each of ``B`` prompts (all submitted at once);
3. rewards (exact match + format term + DAPO overlong penalty) and group advantages;
4. the learner's update (DAPO dynamic sampling drops all-equal groups, counted; with
   ``refill`` (``--dynamic-sampling``) step 2 repeats on fresh prompts until ``B``
   informative groups are kept or ``max_gen_batches`` rounds ran, :mod:`real.runners.refill`);
5. the weight sync: the learner's weights are copied into the engine's model, timed;
6. ``observe_step(controller, lengths, ...)`` (:mod:`sim.control.observation`) with exactly the
   engine's response lengths per prompt, the rewards ``(B, G)``, the prompt ids and the
   generation and step times (s) so far;
7. the step's rollout rows and step row are appended and flushed (:class:`sim.trace.jsonl.TraceWriter`),
   with learner statistics in ``learner.jsonl`` and held-out accuracy in ``eval.jsonl``.

Policy version = learner version = step (the rollouts of step ``t`` come from the weights
after ``t`` updates). Checkpoints every ``checkpoint_every`` steps; ``resume=True`` loads
the newest and truncates every JSONL file to the steps before it, so each step is
recorded exactly once. The clock is seconds from run start; a resumed run continues it
from the checkpoint's time.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import torch
from rolloutlab.real.engines.factory import factory_for, run_and_close
from rolloutlab.real.engines.interface import RolloutEngine, RolloutRequest, RolloutResult
from rolloutlab.real.engines.sampling import SamplingParams
from rolloutlab.real.policy import numerics
from rolloutlab.real.policy.grpo import group_advantages, informative_groups, overlong_penalty
from rolloutlab.real.policy.learner import Learner, pack
from rolloutlab.real.policy.warmstart import initial_policy
from rolloutlab.real.rundir import checkpoint
from rolloutlab.real.rundir import folder as rundir
from rolloutlab.real.rundir.config import ConfigError, SyncConfig
from rolloutlab.real.rundir.resume_check import resume_point
from rolloutlab.real.rundir.run_checks import check_before_writing, check_capacity, request_seed
from rolloutlab.real.rundir.trace_rows import (
    append_engine_requests,
    finish_reason_rows,
    learner_row,
    rollout_rows,
    step_row,
)
from rolloutlab.real.rundir.turn_rows import append_turns, write_turns_parquet
from rolloutlab.real.runners import collapse
from rolloutlab.real.runners.probe import SpeedProbe
from rolloutlab.real.runners.refill import RefillOutcome, run_rounds, sampling_record
from rolloutlab.real.tasks.evaluate import evaluate
from rolloutlab.sim.control.observation import observe_step, propose_step
from rolloutlab.sim.control.spec import parse_controller
from rolloutlab.sim.trace import strict_json
from rolloutlab.sim.trace.jsonl import TraceWriter, append_durably, read_rows, truncate_jsonl
from rolloutlab.sim.trace.progress import progress_bar

EXTRA_LOGS = ("learner.jsonl", "eval.jsonl", "engine_requests.jsonl", "turns.jsonl")


def score_groups(
    ops: Any, cfg: Any, problems: list, results: list[RolloutResult], G: int
) -> tuple[torch.Tensor, list[list[int]]]:
    """Rewards ``(B, G)`` (float64) and response lengths ``(B, G)`` (tokens) of ``results``,
    ordered prompt by prompt, ``G`` per prompt (``len(results) == len(problems) * G``).

    ``ops.reward(problem, response_ids)`` is the task reward; ``cfg.max_response_length``
    and ``cfg.overlong_cache`` set the overlong penalty. Raises ValueError when the
    results do not hold ``G`` rollouts for every problem.
    """
    if len(results) != len(problems) * G:
        raise ValueError(f"{len(results)} rollouts for {len(problems)} prompts x G = {G}")
    groups = [results[p * G : (p + 1) * G] for p in range(len(problems))]
    rewards = torch.tensor(
        [[ops.reward(problems[p], r.response_ids) for r in g] for p, g in enumerate(groups)],
        dtype=torch.float64,
    )  # (B, G)
    lengths = [[len(r.response_ids) for r in g] for g in groups]
    if cfg.overlong_cache:
        rewards = rewards + overlong_penalty(
            torch.tensor(lengths), cfg.max_response_length, cfg.overlong_cache
        )
    return rewards, lengths


def _append_jsonl(path: Path, row: dict[str, Any]) -> None:
    append_durably(path, strict_json.dumps(row) + "\n")


class SyncRun:
    """One synchronous run in ``out_dir``; :meth:`run` executes the remaining steps.

    With ``resume``, the tables are first checked against the checkpoint
    (:func:`real.rundir.resume_check.resume_point`): damaged steps before it are re-run from the
    checkpoint before them, or the resume is refused listing them.
    """

    WHOLE_ROUNDS = True
    """Each step's rollouts are whole rounds of ``prompts`` prompts (checked on resume)."""

    def __init__(
        self,
        cfg: SyncConfig,
        out_dir: Path,
        run_id: str,
        resume: bool,
        engine_factory: Callable[..., RolloutEngine] | None = None,
        cache_dir: Path | None = None,
    ):
        self.cfg, self.out, self.run_id = cfg, Path(out_dir), run_id
        self.ops = cfg.task_ops
        torch.set_num_threads(cfg.torch_threads)
        self.probe = SpeedProbe()  # timed once a step, outside its phases (probe.py)
        self.out.mkdir(parents=True, exist_ok=True)
        if not (self.out / "numerics.json").exists():  # the machine that started the run
            strict_json.write_json(self.out / "numerics.json", numerics.describe())
        self.controller = parse_controller(cfg.controller, seed=cfg.seed, tau=cfg.tau)
        check_capacity(cfg, self.controller)
        self.heldout = self.ops.heldout(cfg.eval_size)
        self.exclude = frozenset(p.prompt_text for p in self.heldout)
        self.params = SamplingParams(cfg.temperature, cfg.top_p, cfg.max_response_length)
        self.start_step, clock_offset = 0, 0.0
        self.next_prompt_id = 0  # the prompt stream: refill rounds take the next prompts
        reference = initial_policy(
            self.out, cfg.model, self.ops, cfg.warm_start, self.exclude, cache_dir
        )
        policy = copy.deepcopy(reference)
        ckpt, self.repaired = (
            resume_point(self.out, cfg.prompts if self.WHOLE_ROUNDS else None)
            if resume
            else (None, [])
        )
        self.resumed_from = ckpt
        trainer = None
        if ckpt is not None:
            policy, trainer, state = checkpoint.load(ckpt)
            self.start_step, clock_offset = int(state["step"]), float(state["t_s"])
            self.next_prompt_id = int(state.get("next_prompt_id", self.start_step * cfg.prompts))
            self.controller.load_state_dict(state["controller"])
            checkpoint.restore_global_rngs(state)
        self.learner = Learner(policy, reference, cfg.learner)
        if trainer is not None:
            self.learner.load_state_dict(trainer["learner"])
            torch.set_rng_state(trainer["torch_rng"])
        t0 = time.perf_counter() - clock_offset
        self.clock = lambda: time.perf_counter() - t0
        factory = engine_factory or factory_for(cfg)
        self.engine = factory(copy.deepcopy(policy), cfg.capacity, self.clock)
        if hasattr(self.engine, "describe"):  # the vLLM engine's resolved config, beside the trace
            strict_json.write_json(self.out / "engine.json", self.engine.describe())
        self.engine.update_weights(policy.state_dict(), self.start_step)
        for name in ("rollouts.jsonl", "steps.jsonl", *EXTRA_LOGS):
            truncate_jsonl(self.out / name, self.start_step if self.start_step > 0 else -1)
        if resume:  # config.json says what this resume runs
            rundir.record_resume(
                self.out,
                {"from_step": self.start_step, "to_step": cfg.steps, "repaired": self.repaired},
            )
        self.writer = TraceWriter(self.out)

    def run(self, progress: bool = True) -> tuple[pl.DataFrame, pl.DataFrame]:
        """Run steps ``start_step..cfg.steps-1``; returns the closed trace ``(rollouts, steps)``
        and writes ``collapse.json`` (:func:`real.runners.collapse.judge_run` over every step
        and held-out evaluation)."""
        if self.start_step == 0:
            self._evaluate(-1)
        bar = progress_bar(
            range(self.start_step, self.cfg.steps),
            initial=self.start_step,
            total=self.cfg.steps,
            enabled=progress,  # a bar on a terminal, plain lines otherwise
            desc="real sync",
            unit="step",
        )
        heldout = ""
        for step in bar:
            info = self.step(step)
            heldout = info.get("heldout_accuracy", heldout)
            bar.set_postfix(
                G=info["G"],
                reward=f"{info['reward_mean']:.2f}",
                step_s=f"{info['step_s']:.2f}",
                heldout_acc=heldout,
            )
        rollouts, steps = self.writer.close()
        evals_path = self.out / "eval.jsonl"
        evals = read_rows(evals_path) if evals_path.exists() else []
        judged = collapse.judge_run(steps.to_dicts(), evals)  # the whole run, resumed too
        doc = collapse.outcome(judged, lr=self.cfg.learner.lr, seed=self.cfg.seed)
        strict_json.write_json(self.out / "collapse.json", doc)
        write_turns_parquet(self.out)  # multi-turn tasks only
        return rollouts, steps

    def _requests(self, step: int, G: int, round_: int = 0) -> tuple[list, list[RolloutRequest]]:
        """Round ``round_``'s ``B`` problems and ``B x G`` requests (ids after the earlier rounds')."""
        B = self.cfg.prompts
        rng = np.random.default_rng([self.cfg.seed, step, 7] + ([round_] if round_ else []))
        problems = self.ops.sample(rng, B, self.exclude)
        seeds = [
            [request_seed(self.cfg.seed, step, p, j, round_) for j in range(G)] for p in range(B)
        ]
        tool = self.ops.tool
        reqs = [
            RolloutRequest(
                round_ * B * G + p * G + j,
                tuple(prob.prompt_ids),
                seeds[p][j],
                None if tool is None else tool(prob, seeds[p][j]),
            )
            for p, prob in enumerate(problems)
            for j in range(G)
        ]
        return problems, reqs

    def _generate(self, step: int, G: int) -> tuple[list, list, list, RefillOutcome | None]:
        """Problems, requests and results of every round of the step (one round without
        ``refill``; else :func:`real.runners.refill.run_rounds` decides), and the refill outcome."""
        problems: list = []
        reqs: list[RolloutRequest] = []
        results: list[RolloutResult] = []

        def one_round(r: int) -> torch.Tensor:
            probs, rq = self._requests(step, G, r)
            res = self.engine.generate(rq, self.params)
            problems.extend(probs)
            reqs.extend(rq)
            results.extend(res)
            return self._score(probs, res, G)[0]

        if not self.cfg.refill:
            one_round(0)
            return problems, reqs, results, None
        outcome = run_rounds(one_round, self.cfg.prompts, self.cfg.max_gen_batches)
        return problems, reqs, results, outcome

    def step(self, step: int) -> dict[str, Any]:
        """Run one synchronous step and record it; returns the learner.jsonl row."""
        cfg = self.cfg
        G = propose_step(self.controller)
        if G > cfg.capacity:
            raise ConfigError(
                f"step {step}: controller proposed G={G} > engine capacity {cfg.capacity}"
            )
        probe = self.probe.record(self.learner.model)
        t_start, cpu = self.clock(), [time.process_time()]
        problems, reqs, results, ds = self._generate(step, G)
        t_gen = self.clock()
        cpu.append(time.process_time())
        rewards, lengths, keep, stats = self._learn(
            step, G, problems, reqs, results, None if ds is None else ds.keep
        )
        t_train = self.clock()
        cpu.append(time.process_time())
        self.engine.update_weights(self.learner.model.state_dict(), step + 1)
        t_sync = self.clock()
        cpu.append(time.process_time())
        observe_step(
            self.controller,
            lengths,
            rewards=rewards.detach().cpu().numpy(),  # (B, G)
            prompt_ids=self._prompt_ids(self.next_prompt_id, len(problems)),
            gen_time_s=t_gen - t_start,
            step_time_s=t_sync - t_start,
            finish_reasons=finish_reason_rows(results, G),
            learner_time_s=t_train - t_gen,
            wall_clock_s=t_sync,
        )
        t_end = self.clock()
        extra = sampling_record(rewards, keep, results, G, ds)
        # process CPU time (s) of the step's phases: a clock that the machine's load
        # does not stretch (analysis.learning.compare's --clock cpu)
        extra.update(
            cpu_gen_s=cpu[1] - cpu[0], cpu_train_s=cpu[2] - cpu[1], cpu_sync_s=cpu[3] - cpu[2]
        )
        extra.update(probe)
        correct = [self.ops.correct(problems[r.request_id // G], r.response_ids) for r in results]
        self.writer.append_step(
            rollout_rows(self.run_id, step, G, results, self.next_prompt_id, rewards, correct),
            step_row(
                self.run_id,
                step,
                (t_start, t_gen, t_train, t_sync, t_end),
                self.cfg.learner.lr,
                stats,
                self.controller.state_dict(),
                extra,
            ),
        )
        append_engine_requests(self.out, step, G, results, self.next_prompt_id)
        append_turns(self.out, self.run_id, step, G, results, self.next_prompt_id)
        self.next_prompt_id += len(problems)
        return self._record(step, G, problems, results, rewards, keep, stats, t_start, t_end, extra)

    def _score(
        self, problems: list, results: list[RolloutResult], G: int
    ) -> tuple[torch.Tensor, list[list[int]]]:
        """Rewards ``(B, G)`` and lengths ``(B, G)`` (:func:`score_groups`)."""
        return score_groups(self.ops, self.cfg, problems, results, G)

    @staticmethod
    def _prompt_ids(first: int, n: int) -> np.ndarray:
        """(n,) prompt ids from ``first`` on (the prompt stream; ``step * B`` without
        refill), as in the rollout table's ``prompt_id``."""
        return first + np.arange(n, dtype=np.int64)

    def _learn(
        self,
        step: int,
        G: int,
        problems: list,
        reqs: list[RolloutRequest],
        results: list[RolloutResult],
        keep: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, list[list[int]], torch.Tensor, Any]:
        """Rewards ``(B, G)``, lengths ``(B, G)``, kept groups ``(B,)`` and the update's
        statistics (None when no group was kept) of one step's rollouts (``B``: groups of
        all rounds). ``keep``: the refill's choice; default: informative groups, or all
        without dynamic sampling."""
        cfg = self.cfg
        B = len(problems)
        groups = [results[p * G : (p + 1) * G] for p in range(B)]
        rewards, lengths = self._score(problems, results, G)
        adv = group_advantages(rewards)  # (B, G)
        if keep is None:
            keep = (
                informative_groups(rewards)
                if cfg.dynamic_sampling
                else torch.ones(B, dtype=torch.bool)
            )
        stats = None
        if keep.any():
            kept = [r for p in range(B) if keep[p] for r in groups[p]]
            batch = pack(
                [reqs[r.request_id].prompt_ids for r in kept],
                [r.response_ids for r in kept],
                [r.logprobs for r in kept],
                adv[keep].reshape(-1),
                [r.tool_mask for r in kept],
            )
            # prompt index B is no rollout's: the minibatch order gets its own stream
            order_gen = torch.Generator().manual_seed(request_seed(cfg.seed, step, cfg.prompts, 0))
            stats = self.learner.update(batch, order_gen)
        return rewards, lengths, keep, stats

    def _record(
        self,
        step: int,
        G: int,
        problems: list,
        results: list[RolloutResult],
        rewards: torch.Tensor,
        keep: torch.Tensor,
        stats: Any,
        t_start: float,
        t_end: float,
        extra: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Append the learner.jsonl row (plus ``extra``), evaluate and checkpoint when due."""
        cfg = self.cfg
        correct = [self.ops.correct(problems[r.request_id // G], r.response_ids) for r in results]
        info = learner_row(
            step, G, results, correct, len(problems), rewards, keep, stats, t_start, t_end
        )
        info.update(extra or {})
        done = step + 1
        info["heldout_accuracy"] = None
        if done % cfg.eval_every == 0 or done == cfg.steps:
            info["heldout_accuracy"] = self._evaluate(step)
        _append_jsonl(self.out / "learner.jsonl", info)
        if done % cfg.checkpoint_every == 0 or done == cfg.steps:
            self._checkpoint(done, t_end)
        return info

    def _evaluate(self, step: int) -> float:
        res = evaluate(self.engine, self.heldout, self.params, self.cfg.seed, self.ops)
        _append_jsonl(self.out / "eval.jsonl", {"step": step, "t_s": self.clock(), **res})
        return res["accuracy"]

    def _checkpoint(self, done: int, t_s: float, extra: dict[str, Any] | None = None) -> None:
        trainer = {"learner": self.learner.state_dict(), "torch_rng": torch.get_rng_state()}
        state = {
            "t_s": t_s,
            "controller": self.controller.state_dict(),
            **checkpoint.global_rngs(),
            "next_prompt_id": self.next_prompt_id,
            **(extra or {}),
        }
        checkpoint.save(self.out, done, self.learner.model, trainer, state)


def run_sync(
    cfg: SyncConfig,
    out_dir: str | Path,
    resume: bool = False,
    progress: bool = True,
    overrides: dict[str, Any] | None = None,
    cache_dir: Path | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Start (or with ``resume`` continue) a synchronous run in ``out_dir``; ``cache_dir``:
    the shared warm-start cache (None: ``--no-cache``, :mod:`real.policy.warmstart`).

    Raises: RunDirError (directory holds another run / nothing to resume / conflicting
    setting), ConfigError (G above capacity, bad setting), CheckpointError (corrupt
    checkpoint), ConfigError (unknown controller spec); none of them changes the directory.
    """
    out = Path(out_dir)
    check_before_writing(cfg)  # a bad setting fails before anything is written
    run_id, cfg = rundir.claim(
        out, cfg, resume, overrides, check=lambda c: resume_point(out, c.prompts)
    )
    return run_and_close(SyncRun(cfg, out, run_id, resume, cache_dir=cache_dir), progress)
