"""Any rolloutlab group-size controller sets G per step in TRL's ``GRPOTrainer`` (trl 1.16.0).

Written against trl 1.16.0's ``trl/trainer/grpo_trainer.py``; any other release is refused
with one line (:mod:`.frameworks`). What TRL fixes at start and what
:class:`GroupSizeGRPOTrainer` changes, method by method:

- **Sampler** (``_get_train_sampler``): TRL's ``RepeatSampler`` repeats each prompt
  ``num_generations`` times. Here it draws ``B`` prompts a step, each once
  (``mini_repeat_count=1``); each is repeated ``G_t`` times when the step's generation
  starts (``_generate_and_score_completions``), with ``G_t = controller.propose()``.
  Why not in the sampler: accelerate's ``DataLoaderShard`` fetches one batch ahead, so a
  sampler would pick G before the previous step was observed.
- **Advantages**: TRL normalises with ``rewards.view(-1, num_generations)``; for the
  step's generation ``num_generations`` is set to ``G_t``, and every group of the step
  has ``G_t`` rollouts, so each group is normalised within itself.
- **Budget and divisibility** (:mod:`.group_rules`): ``generation_batch_size`` is the
  most rollouts a step may generate (set ``num_generations`` to the largest G you allow:
  ``B = generation_batch_size // num_generations``), and ``B x G_t`` must split into
  ``steps_per_generation`` equal micro-batches (TRL's ``split_tensor_dict`` would drop
  a remainder silently). A G that breaks a rule is refused before its step.
- **Loss and logging**: unchanged; TRL's loss types normalise per sequence, per token or
  by ``num_items_in_batch`` of the generation, all of which follow the step's size.
  TRL's log gains ``rolloutlab/group_size``, ``rolloutlab/straggler_ratio``,
  ``rolloutlab/straggler_event`` and ``rolloutlab/gen_makespan_s``.
- **Trace** (:mod:`.round_trace`): a forward hook on the generating model stamps each
  decode iteration, so rollout ``i`` of length ``L_i`` finished at iteration ``L_i``
  (``transformers.generate`` pads finished rows: static batching, one wave per step).
- **Checkpoint** (``_save_checkpoint`` / ``_load_optimizer_and_scheduler``, as TRL
  saves its entropy controller): the controller's state, the steps done and the run
  clock go to ``rolloutlab_controller.json`` in the checkpoint folder; a resumed run
  restores them and cuts the trace back to that step.

A step is one generation round (``num_iterations`` optimiser steps on it). Not tried and
therefore refused at start, one line each: vLLM generation, transformers' continuous
batching, tools / environments / ``rollout_func``, several processes, iterable datasets,
``steps_per_generation != gradient_accumulation_steps``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from rolloutlab.real.integrations.frameworks import WRITTEN_FOR, require
from rolloutlab.real.integrations.group_rules import check_candidates, check_group_size
from rolloutlab.real.integrations.round_trace import Generation, RoundRecord, RoundTrace
from rolloutlab.sim.control.observation import propose_step
from rolloutlab.sim.control.spec import parse_controller
from rolloutlab.sim.trace.metrics import DEFAULT_TAU

trl = require("trl")

# after the version check: its one line is what a user without trl needs to read
from torch.utils.data import Dataset as TorchDataset  # noqa: E402
from transformers import TrainerCallback  # noqa: E402
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402
from trl.trainer.utils import RepeatSampler  # noqa: E402

PROMPT_ID = "rolloutlab_prompt_id"
"""Key under which the sampled row carries its dataset index (taken off before TRL sees it)."""
STATE_FILE = "rolloutlab_controller.json"
"""Checkpoint-folder file holding the controller state, steps done and run clock."""


class _IndexedPrompts(TorchDataset):
    """The train dataset with each row's index under :data:`PROMPT_ID` (the trace's prompt id)."""

    def __init__(self, dataset: Any):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {**self.dataset[i], PROMPT_ID: int(i)}


class _StepEnd(TrainerCallback):
    """Closes a generation round after its last optimiser step (before logging and saving)."""

    def __init__(self, trainer: GroupSizeGRPOTrainer):
        self.trainer = trainer

    def on_step_end(self, args, state, control, **kwargs):
        self.trainer._finish_round_if_done()


def _refusals(args: Any, kwargs: dict[str, Any]) -> list[str]:
    """What this integration was not written for, one phrase each."""
    out = []
    if args.use_vllm:
        out.append("use_vllm=True (vLLM generation)")
    if args.use_transformers_continuous_batching:
        out.append("use_transformers_continuous_batching=True")
    if args.steps_per_generation != args.gradient_accumulation_steps:
        out.append(
            f"steps_per_generation={args.steps_per_generation} != gradient_accumulation_steps="
            f"{args.gradient_accumulation_steps} (one generation per optimiser step is the tried case)"
        )
    if args.world_size > 1:
        out.append(f"{args.world_size} processes (one process is the tried case)")
    for name in ("tools", "environment_factory", "rollout_func"):
        if kwargs.get(name):
            out.append(f"{name}=...")
    return out


class GroupSizeGRPOTrainer(GRPOTrainer):
    """TRL's ``GRPOTrainer`` with G chosen per step by a rolloutlab controller (module docstring).

    Arguments beyond ``GRPOTrainer``'s (all keyword):

    - ``controller``: a spec (``static:G``, ``sagc[:k=v,...]``, ``lagc[:...]``,
      ``file.py:Class[:k=v,...]``, ``module:Class``; :func:`sim.control.spec.parse_controller`,
      seeded with ``args.seed``) or a controller object;
    - ``tau``: straggler threshold on max/median response length (the SAGC/LAGC default
      and the ``rolloutlab/straggler_event`` metric);
    - ``prompts_per_step``: ``B`` (default ``generation_batch_size // num_generations``);
    - ``trace_dir``: rolloutlab trace directory (default ``<output_dir>/rolloutlab``).

    Raises at construction: :class:`.frameworks.FrameworkError` (trl missing or not
    1.16.0, at import), ValueError naming each unsupported setting or a bad controller
    spec, :class:`.group_rules.GroupSizeError` for declared ``candidates`` the budget or
    micro-batching cannot take. During training, a proposed G that breaks a rule raises
    :class:`.group_rules.GroupSizeError` before its step generates anything.
    """

    def __init__(
        self,
        *args: Any,
        controller: Any,
        tau: float = DEFAULT_TAU,
        prompts_per_step: int | None = None,
        trace_dir: str | os.PathLike | None = None,
        **kwargs: Any,
    ):
        super().__init__(*args, **kwargs)
        refused = _refusals(self.args, kwargs)
        if refused:
            raise ValueError(
                f"GroupSizeGRPOTrainer (trl {WRITTEN_FOR['trl']}) was not tried with: "
                + "; ".join(refused)
            )
        if not hasattr(self.train_dataset, "__getitem__"):
            raise ValueError("GroupSizeGRPOTrainer needs a map-style train_dataset (not iterable)")
        self.spec = controller if isinstance(controller, str) else None
        self.controller = (
            parse_controller(controller, seed=self.args.seed, tau=tau)
            if isinstance(controller, str)
            else controller
        )
        self.tau = float(getattr(self.controller, "tau", tau))
        self.prompts_per_step = int(
            prompts_per_step or self.args.generation_batch_size // self.num_generations
        )
        self.budget = int(self.args.generation_batch_size)
        self.divisors = {"steps_per_generation": int(self.args.steps_per_generation)}
        check_candidates(
            getattr(self.controller, "candidates", None),
            self.prompts_per_step,
            self.budget,
            self.divisors,
            f"controller {self._who()}",
        )
        self.max_group_size = self.num_generations
        self.trace = RoundTrace(
            Path(trace_dir) if trace_dir else Path(self.args.output_dir) / "rolloutlab",
            self.controller,
            self.tau,
        )
        self._round: RoundRecord | None = None
        self._round_first_global_step = 0
        self._steps_done = 0
        self._resume_state: dict[str, Any] | None = None
        self._t0 = time.perf_counter()
        self.add_callback(_StepEnd(self))

    # -- run clock, trace directory ---------------------------------------------------
    def _who(self) -> str:
        return self.spec or getattr(self.controller, "name", None) or type(self.controller).__name__

    def _clock(self) -> float:
        """Seconds since the run started (a resumed run continues the checkpoint's clock)."""
        return time.perf_counter() - self._t0

    def _trace_config(self) -> dict[str, Any]:
        a = self.args
        return {
            "framework": "trl",
            "framework_version": trl.__version__,
            "controller": self.spec or self._who(),
            "tau": self.tau,
            "prompts": self.prompts_per_step,
            "max_group_size": self.max_group_size,
            "capacity": self.budget,
            "engine_mode": "static",  # transformers.generate: one padded batch per step
            "batch_padding": True,  # finished rows decode pad tokens until the batch ends
            "max_response_length": self.max_completion_length,
            "temperature": self.temperature,
            "seed": a.seed,
            "learning_rate": a.learning_rate,
            "loss_type": self.loss_type,
            "beta": self.beta,
            "num_iterations": self.num_iterations,
            "gradient_accumulation_steps": a.gradient_accumulation_steps,
            "per_device_train_batch_size": a.per_device_train_batch_size,
            "max_steps": a.max_steps,
        }

    def train(self, resume_from_checkpoint: str | bool | None = None, *args: Any, **kwargs: Any):
        """``GRPOTrainer.train``, with the trace directory claimed first (a fresh run
        refuses one holding a run) and its parquet tables written at the end, also when
        training raises (the steps finished so far)."""
        resuming = resume_from_checkpoint not in (None, False)
        self._t0 = time.perf_counter()
        if not resuming:
            self.trace.open(self._trace_config(), "trl", None)
        try:
            return super().train(resume_from_checkpoint, *args, **kwargs)
        finally:
            self.trace.close()

    # -- data: B prompts a step, each once ----------------------------------------------
    def _set_signature_columns_if_needed(self):
        super()._set_signature_columns_if_needed()
        if PROMPT_ID not in self._signature_columns:
            self._signature_columns = [*self._signature_columns, PROMPT_ID]

    def get_train_dataloader(self):
        return self._get_dataloader(
            dataset=_IndexedPrompts(self.train_dataset),
            description="Training",
            batch_size=self.prompts_per_step,
            sampler_fn=self._get_train_sampler,
            is_training=True,
        )

    def _get_train_sampler(self, dataset=None):
        return RepeatSampler(
            data_source=dataset if dataset is not None else self.train_dataset,
            mini_repeat_count=1,
            batch_size=self.prompts_per_step,
            repeat_count=self.num_iterations * self.args.steps_per_generation,
            shuffle=self.shuffle_dataset,
            seed=self.args.seed,
        )

    # -- one step: propose G, repeat, generate (timed), score --------------------------
    def _generate_and_score_completions(self, inputs):
        if not self.model.training:  # evaluation keeps TRL's fixed num_generations_eval
            return super()._generate_and_score_completions(inputs)
        prompt_ids = [int(row[PROMPT_ID]) for row in inputs]
        rows = [{k: v for k, v in row.items() if k != PROMPT_ID} for row in inputs]
        step = self._steps_done
        where = f"controller {self._who()}, step {step}"
        G = propose_step(self.controller, prompt_ids=prompt_ids)
        check_group_size(G, len(rows), self.budget, self.divisors, where)
        self.num_generations = G  # TRL's advantages: rewards.view(-1, num_generations)
        self._round = RoundRecord(step=step, G=G, prompt_ids=prompt_ids, t_start=self._clock())
        self._round_first_global_step = self.state.global_step
        repeated = [dict(row) for row in rows for _ in range(G)]  # (B x G,) group order
        return super()._generate_and_score_completions(repeated)

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, **kw):
        rec = self._round if self.model.training else None
        if rec is None:
            return super()._generate_single_turn(
                prompt_ids, images, multimodal_fields, num_generations, **kw
            )
        ticks: list[float] = []  # end of each forward pass: prefill, then one per decode iteration
        model = self.accelerator.unwrap_model(self.model)
        handle = model.register_forward_hook(lambda *_: ticks.append(self._clock()))
        try:
            completion_ids, logprobs = super()._generate_single_turn(
                prompt_ids, images, multimodal_fields, num_generations, **kw
            )
        finally:
            handle.remove()
        t_gen_end = self._clock()
        lengths = [len(c) for c in completion_ids]
        if lengths and max(lengths) > len(ticks):
            raise RuntimeError(
                f"step {rec.step}: {len(ticks)} forward passes timed for a longest response "
                f"of {max(lengths)} tokens; the generation path is not transformers.generate"
            )
        eos = set(self.eos_token_ids)
        rec.generation = Generation(
            t_end=t_gen_end,
            prompt_tokens=[len(p) for p in prompt_ids],
            response_tokens=lengths,
            t_first_token=[ticks[0]] * len(lengths),
            t_finish=[ticks[n - 1] for n in lengths],
            finish_reason=["stop" if c and c[-1] in eos else "length" for c in completion_ids],
        )
        return completion_ids, logprobs

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(
            inputs, prompts, completions, completion_ids_list
        )
        if self._round is not None and self.model.training:
            weights = self.reward_weights.to(rewards_per_func.device).unsqueeze(0)
            self._round.rewards = (rewards_per_func * weights).nansum(dim=1).tolist()
        return rewards_per_func

    # -- end of a round: observe, trace, log ---------------------------------------------
    def _finish_round_if_done(self) -> None:
        rec = self._round
        if rec is None or self.state.global_step - self._round_first_global_step < (
            self.num_iterations
        ):
            return
        metrics = self.trace.finish(rec, self._clock(), lr=self._get_learning_rate())
        for key, value in metrics.items():
            self._metrics["train"][key].append(value)
        self._steps_done += 1
        self._round = None

    # -- checkpoint: the controller and the trace position ---------------------------------
    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        if self.args.should_save:
            folder = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
            path = Path(self._get_output_dir(trial=trial)) / folder / STATE_FILE
            state = {
                "controller": self.controller.state_dict(),
                "steps_done": self._steps_done,
                "t_s": self._clock(),
                "max_group_size": self.max_group_size,
            }
            path.write_text(json.dumps(state))

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
        path = Path(checkpoint) / STATE_FILE
        if not path.exists():
            raise ValueError(
                f"{path}: missing; the checkpoint was not written by GroupSizeGRPOTrainer"
            )
        state = json.loads(path.read_text())
        self.controller.load_state_dict(state["controller"])
        self._steps_done = int(state["steps_done"])
        self._t0 = time.perf_counter() - float(state["t_s"])
        self._round = None
        self.trace.open(self._trace_config(), "trl", self._steps_done)


def loss_history(trainer: GRPOTrainer) -> list[float]:
    """The training losses TRL logged, one per logged optimiser step."""
    return [row["loss"] for row in trainer.state.log_history if "loss" in row]


def sync_matched_config(
    cfg: Any,
    out: Path,
    *,
    prompts: int,
    max_group_size: int,
    steps: int,
    seed: int,
    max_response_length: int | None = None,
) -> GRPOConfig:
    """TRL's ``GRPOConfig`` with the hyper-parameters of a ``rolloutlab real sync`` run
    (``cfg``, a :class:`~rolloutlab.real.rundir.config.SyncConfig`): its learning rate
    (constant), clip range (``eps_low`` / ``eps_high``), KL coefficient, gradient clip,
    temperature and response cap (``max_response_length`` overrides it), token-level (DAPO)
    loss, one optimiser step per generation, CPU without bf16. The generation budget is
    ``prompts x max_group_size`` rollouts (``num_generations`` is the largest G the
    controller may pick), so the two loops train alike and their steps compare."""
    return GRPOConfig(
        output_dir=str(out),
        use_cpu=True,
        bf16=False,
        num_generations=max_group_size,
        per_device_train_batch_size=prompts * max_group_size,
        max_completion_length=max_response_length or cfg.max_response_length,
        max_steps=steps,
        learning_rate=cfg.learner.lr,
        lr_scheduler_type="constant",
        epsilon=cfg.learner.eps_low,
        epsilon_high=cfg.learner.eps_high,
        beta=cfg.learner.kl_coef,
        loss_type="dapo",
        max_grad_norm=cfg.learner.grad_clip,
        temperature=cfg.temperature,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        seed=seed,
        disable_tqdm=True,
    )
