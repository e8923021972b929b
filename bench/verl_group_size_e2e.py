"""verl's GRPO end to end with G per step from a rolloutlab controller (GPU stage).

    python bench/verl_group_size_e2e.py --model MODEL_DIR --out OUT [--steps 4] [--dry-run]

Runs verl 0.9.1's PPO entry (``verl.trainer.main_ppo.run_ppo``, legacy
``RayPPOTrainer`` path: ``trainer.use_v1=False``, the class
:func:`rolloutlab.real.integrations.verl.group_size_trainer` subclasses) with GRPO on
``MODEL_DIR`` (a local Hugging Face folder, e.g. the converted SmolLM2-135M-Instruct of
``real/policy/smollm2.py``: nothing is downloaded) and a parquet of the project's
arithmetic problems (``real/tasks/arithmetic.py``) written into ``OUT/data``. The trainer
class is plugged in inside verl's own ``TaskRunner`` (a Ray actor): a subclass of it swaps
the ``RayPPOTrainer`` name its ``run`` builds for rolloutlab's subclass, so verl's
dataset, worker and reward set-up run unchanged.

Checks, written to ``OUT/checks.json`` (exit 1 when one fails):

- ``rollout_n_follows_controller``: each step's ``rollout.n`` is the G the controller
  proposed for it, the scored batch holds B groups of exactly that size (by ``uid``), and
  G took at least two values over the run (the default controller, :class:`CycleG`,
  proposes 2, 4, 8, 4, ...);
- ``grpo_grouped_by_uid``: the batch's ``advantages`` on each response equal
  ``(r - mean_uid r) / (std_uid r + 1e-6)`` over its uid group at the step's size
  (``core_algos.compute_grpo_outcome_advantage``, unbiased std; within 1e-4);
- ``trace_written``: rolloutlab's trace (``OUT/trace``) has the run's steps, its G per
  step equal to the proposals;
- ``calibrate_groups`` / ``compare_idle``: ``rolloutlab calibrate groups`` and
  ``rolloutlab compare idle`` exit 0 on the trace. verl gives no per-rollout finish
  time (``rollout_times: step``), so ``compare idle``'s idle numbers are not a measurement
  here: only that it reads the trace is checked.

``--dry-run`` writes the dataset and prints the hydra overrides, one a line, without
importing verl (tests/test_verl_e2e_script.py runs it on CPU).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
from rolloutlab.real.tasks.arithmetic import (
    INSTRUCTION,
    ArithmeticConfig,
    draw,
    final_number,
)

EPS = 1e-6
"""verl's ``compute_grpo_outcome_advantage`` default epsilon."""


class CycleG:
    """A controller that moves G every step (2, 4, 8, 4, 2, ...): what the check needs
    is G changing, which SAGC does not promise within a few steps."""

    CYCLE = (2, 4, 8, 4)

    def __init__(self) -> None:
        self.t = 0

    def propose(self) -> int:
        return self.CYCLE[self.t % len(self.CYCLE)]

    def observe(self, lengths: Any) -> None:
        self.t += 1

    def state_dict(self) -> dict[str, int]:
        return {"t": self.t}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.t = state["t"]


def compute_score(data_source, solution_str, ground_truth, extra_info=None) -> float:
    """verl's custom reward signature: 1 when the reply's final number is the answer
    (:func:`rolloutlab.real.tasks.arithmetic.final_number`), else 0."""
    return float(final_number(solution_str) == int(ground_truth))


def dataset_rows(n: int, seed: int, cfg: ArithmeticConfig) -> list[dict[str, Any]]:
    """``n`` arithmetic problems in verl's RL dataset layout (``prompt`` as chat
    messages, ``reward_model.ground_truth`` the answer as a string)."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        text, answer = draw(rng, cfg)
        rows.append(
            {
                "data_source": "rolloutlab/arithmetic",
                "prompt": [{"role": "user", "content": f"{text}\n{INSTRUCTION}"}],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": str(answer)},
                "extra_info": {"index": i},
            }
        )
    return rows


def write_dataset(folder: Path, train: int, val: int, seed: int) -> tuple[Path, Path]:
    """``folder/train.parquet`` and ``folder/val.parquet`` (val from seed + 1)."""
    import polars as pl

    folder.mkdir(parents=True, exist_ok=True)
    cfg = ArithmeticConfig()
    paths = folder / "train.parquet", folder / "val.parquet"
    for path, n, s in zip(paths, (train, val), (seed, seed + 1), strict=True):
        pl.DataFrame(dataset_rows(n, s, cfg)).write_parquet(path)
    return paths


def overrides(args: argparse.Namespace, train: Path, val: Path) -> list[str]:
    """verl 0.9.1 hydra overrides (keys read in its ``_generated_ppo_trainer.yaml``):
    GRPO, B prompts a step, one GPU, vLLM rollout, no KL, no validation or checkpoints.
    ``rollout.n`` is only the first step's; the controller rewrites it each step."""
    B, micro = args.prompts, args.micro_batch
    return [
        "algorithm.adv_estimator=grpo",
        "algorithm.use_kl_in_reward=False",
        f"data.train_files={train}",
        f"data.val_files={val}",
        f"data.train_batch_size={B}",
        f"data.max_prompt_length={args.max_prompt_length}",
        f"data.max_response_length={args.max_response_length}",
        f"data.seed={args.seed}",
        f"actor_rollout_ref.model.path={args.model}",
        "actor_rollout_ref.actor.optim.lr=1e-6",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={B}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro}",
        "actor_rollout_ref.actor.use_kl_loss=False",
        "actor_rollout_ref.actor.use_dynamic_bsz=False",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={micro}",
        "actor_rollout_ref.rollout.name=vllm",
        f"actor_rollout_ref.rollout.n={CycleG.CYCLE[0]}",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        f"actor_rollout_ref.rollout.gpu_memory_utilization={args.gpu_memory_utilization}",
        "actor_rollout_ref.rollout.enforce_eager=True",
        f"reward.custom_reward_function.path={Path(__file__).resolve()}",
        "reward.custom_reward_function.name=compute_score",
        "reward.num_workers=1",
        "trainer.use_v1=False",
        "trainer.n_gpus_per_node=1",
        "trainer.nnodes=1",
        f"trainer.total_training_steps={args.steps}",
        "trainer.total_epochs=1",
        "trainer.val_before_train=False",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        "trainer.logger=[console]",
        "trainer.project_name=rolloutlab",
        "trainer.experiment_name=verl_group_size_e2e",
        f"trainer.default_local_dir={args.out / 'ckpt'}",
    ]


def step_check(batch: Any, G: int, B: int) -> dict[str, Any]:
    """One step's checks on the scored batch ``_update_actor`` receives: group sizes by
    uid, and advantages against GRPO's formula per uid (first response token of each
    row: GRPO's advantage is constant over a response)."""
    from rolloutlab.real.integrations.verl import group_order

    _, rows = group_order(batch.non_tensor_batch["uid"])
    sizes = [len(r) for r in rows]
    r = batch.batch["token_level_rewards"].sum(-1).float().cpu().numpy()
    adv = batch.batch["advantages"][:, 0].float().cpu().numpy()
    worst = 0.0
    for idx in rows:
        g = r[idx]
        # a group of one: verl takes mean 0 and std 1
        mean, std = (g.mean(), g.std(ddof=1)) if len(g) > 1 else (0.0, 1.0)
        want = (g - mean) / (std + EPS)
        worst = max(worst, float(np.abs(adv[idx] - want).max()))
    return {
        "G": G,
        "groups": len(sizes),
        "group_sizes": sorted(set(sizes)),
        "sizes_ok": len(sizes) == B and set(sizes) == {G},
        "advantage_max_abs_err": worst,
    }


def checked_trainer(out: Path, B: int) -> type:
    """rolloutlab's verl trainer with each step's :func:`step_check` appended to
    ``out/steps_checked.jsonl`` (from the Ray actor that runs ``fit``)."""
    from rolloutlab.real.integrations.verl import group_size_trainer

    class Checked(group_size_trainer()):  # type: ignore[misc]
        def _update_actor(self, batch):
            G = int(self.config.actor_rollout_ref.rollout.n)
            row = {"step": self.rl_step, **step_check(batch, G, B)}
            with open(out / "steps_checked.jsonl", "a") as fh:
                fh.write(json.dumps(row) + "\n")
            return super()._update_actor(batch)

    return Checked


def task_runner(out: Path, B: int, tau: float) -> Any:
    """verl's legacy ``TaskRunner`` (a Ray actor) whose ``run`` builds rolloutlab's
    trainer: the controller and trace are created in the actor, where ``fit`` runs."""
    import ray
    import verl.trainer.main_ppo_v0 as v0

    meta = getattr(v0.TaskRunner, "__ray_metadata__", None)
    if meta is None:
        raise SystemExit("verl_group_size_e2e: this Ray has no __ray_metadata__ on actors")

    class GroupSizeTaskRunner(meta.modified_class):  # type: ignore[misc, name-defined]
        def run(self, config):
            from rolloutlab.real.integrations.round_trace import RoundTrace

            ctl = CycleG()
            trace = RoundTrace(out / "trace", ctl, tau=tau)
            trace.open({"framework": "verl", "rollout_times": "step"}, "verl", None)
            cls = checked_trainer(out, B)
            v0.RayPPOTrainer = lambda **kw: cls(**kw, controller=ctl, trace=trace, budget=None)
            try:
                super().run(config)
            finally:
                trace.close()

    return ray.remote(GroupSizeTaskRunner)


def run_verl(args: argparse.Namespace, ov: list[str]) -> None:
    """Compose verl's ``ppo_trainer`` config with ``ov`` and run ``run_ppo``."""
    import verl.trainer
    from hydra import compose, initialize_config_dir
    from verl.trainer.main_ppo import run_ppo

    config_dir = str(Path(verl.trainer.__file__).parent / "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        config = compose(config_name="ppo_trainer", overrides=ov)
    run_ppo(config, task_runner_class=task_runner(args.out, args.prompts, args.tau))


def cli_reads(name: str, argv: list[str], out: Path) -> dict[str, Any]:
    """Run ``python -m rolloutlab ARGV``; exit status and the last lines of its output."""
    p = subprocess.run(
        [sys.executable, "-m", "rolloutlab", *argv], capture_output=True, text=True, check=False
    )
    (out / f"{name}.log").write_text(p.stdout + p.stderr)
    return {"ok": p.returncode == 0, "rc": p.returncode, "tail": (p.stdout + p.stderr)[-400:]}


def check_run(out: Path, steps: int) -> dict[str, Any]:
    """The checks of the module docstring on a finished run's ``out``."""
    import polars as pl

    checks: dict[str, Any] = {}
    path = out / "steps_checked.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
    want = [CycleG.CYCLE[t % len(CycleG.CYCLE)] for t in range(len(rows))]
    Gs = [r["G"] for r in rows]
    checks["rollout_n_follows_controller"] = {
        "ok": len(rows) == steps
        and Gs == want
        and all(r["sizes_ok"] for r in rows)
        and len(set(Gs)) > 1,
        "G_per_step": Gs,
        "proposed": want,
        "steps_seen": len(rows),
    }
    err = max((r["advantage_max_abs_err"] for r in rows), default=float("nan"))
    checks["grpo_grouped_by_uid"] = {"ok": bool(rows) and err < 1e-4, "max_abs_err": err}
    trace = out / "trace"
    try:
        per_step = (
            pl.read_parquet(trace / "rollouts.parquet")
            .group_by("step", maintain_order=True)
            .agg(pl.col("group_size").first())["group_size"]
            .to_list()
        )
    except (OSError, pl.exceptions.PolarsError) as exc:
        per_step = [f"unreadable: {exc}"]
    checks["trace_written"] = {"ok": per_step == Gs and bool(Gs), "G_per_step": per_step}
    checks["calibrate_groups"] = cli_reads(
        "calibrate_groups",
        ["calibrate", "groups", str(trace / "rollouts.parquet"), "--out", str(out / "groups.json")],
        out,
    )
    checks["compare_idle"] = cli_reads(
        "compare_idle",
        ["compare", "idle", "--real", str(trace), "--fit-steps", "2", "--out", str(out / "idle")],
        out,
    )
    return checks


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", type=Path, required=True, help="local Hugging Face folder")
    p.add_argument("--out", type=Path, required=True, help="new folder for data, trace, checks")
    p.add_argument("--steps", type=int, default=4, help="GRPO steps (>= 2)")
    p.add_argument("--prompts", type=int, default=4, help="prompt batch B")
    p.add_argument("--micro-batch", type=int, default=2, help="ppo_micro_batch_size_per_gpu")
    p.add_argument("--max-prompt-length", type=int, default=256)
    p.add_argument("--max-response-length", type=int, default=128)
    p.add_argument("--gpu-memory-utilization", type=float, default=0.3)
    p.add_argument("--tau", type=float, default=2.0, help="straggler threshold of the trace")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dry-run", action="store_true", help="write data, print overrides, stop")
    args = p.parse_args(argv)
    if args.steps < 2:
        p.error(f"--steps must be >= 2 (G must change between steps), got {args.steps}")
    bad = [G for G in CycleG.CYCLE if (args.prompts * G) % args.micro_batch]
    if args.prompts < 1 or bad:
        p.error(
            f"--prompts {args.prompts} x G for G in {bad} is not a multiple of "
            f"--micro-batch {args.micro_batch}"
        )
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if (args.out / "checks.json").exists():
        raise SystemExit(f"{args.out}: holds a finished run (checks.json); choose a new --out")
    train, val = write_dataset(
        args.out / "data", args.prompts * args.steps, args.prompts, args.seed
    )
    ov = overrides(args, train, val)
    if args.dry_run:
        print("\n".join(ov))
        return 0
    if not (args.model / "config.json").is_file():
        raise SystemExit(f"--model {args.model}: no config.json (a local Hugging Face folder)")
    run_verl(args, ov)
    checks = check_run(args.out, args.steps)
    (args.out / "checks.json").write_text(json.dumps(checks, indent=2) + "\n")
    for name, c in checks.items():
        print(f"{name}: {'ok' if c['ok'] else 'FAILED'}")
    return 0 if all(c["ok"] for c in checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
