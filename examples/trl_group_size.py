"""A rolloutlab controller choosing G per step inside TRL's ``GRPOTrainer``, on CPU.

The tiny Llama of ``rolloutlab real sync`` (2 layers, the task's 192-token vocabulary),
warm-started as that loop warm-starts it (cached in ``~/.cache/rolloutlab/warmstart``),
learns the digit-chain task with TRL 1.16.0; the hyper-parameters are those of
``rolloutlab real sync``'s defaults (learning rate, clip range 0.2 / 0.28, no KL,
token-level loss, temperature 1, responses capped at 48 tokens). Only two things differ
from a plain TRL script: ``GroupSizeGRPOTrainer`` instead of ``GRPOTrainer``, and a
``controller``. The run writes TRL's output in ``--out`` and rolloutlab's trace in
``--out/rolloutlab/``, then prints one line per step read back from that trace.

    python examples/trl_group_size.py --out runs/trl_example
    python examples/trl_group_size.py --out runs/trl_sagc --controller sagc:candidates=2/4/8 --steps 8

``--model DIR``: start from a Hugging Face model folder instead (the task tokenizer is
used, so its vocabulary must be the task's). ``--out`` must not exist.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import polars as pl
from rolloutlab.real.integrations.task_data import digit_chain_dataset, make_digit_chain_reward
from rolloutlab.real.integrations.trl import GroupSizeGRPOTrainer, sync_matched_config
from rolloutlab.real.policy.model import load_config
from rolloutlab.real.policy.warmstart import cached_warm_start, default_cache_dir
from rolloutlab.real.rundir.config import SyncConfig, WarmStartConfig
from rolloutlab.real.tasks.hf_tokenizer import task_tokenizer
from trl import GRPOConfig


def grpo_config(out: Path, args: argparse.Namespace, cfg: SyncConfig) -> GRPOConfig:
    """TRL's config with ``rolloutlab real sync``'s hyper-parameters (``cfg``): the
    generation budget is ``B x`` the largest G (``num_generations``), one optimiser step
    per generation, constant learning rate (a plain ``GRPOConfig`` of your own works too)."""
    return sync_matched_config(
        cfg,
        out,
        prompts=args.prompts,
        max_group_size=args.max_group_size,  # the largest G the controller may pick
        steps=args.steps,
        seed=args.seed,
        max_response_length=args.max_response_length,
    )


def model_folder(out: Path, args: argparse.Namespace, cfg: SyncConfig) -> Path:
    """``--model``, or the warm-started tiny Llama saved in ``out/warmstart`` (the shared
    warm-start cache of ``rolloutlab real sync``; trained there on a miss)."""
    if args.model is not None:
        return args.model
    ops = cfg.task_ops
    exclude = frozenset(p.prompt_text for p in ops.heldout(cfg.eval_size))
    warm = WarmStartConfig(steps=args.warm_start_steps)
    cached_warm_start(out, load_config(), ops, warm, exclude, default_cache_dir())
    return out / "warmstart"


def step_table(trace_dir: Path) -> pl.DataFrame:
    """One row per step of the trace: G, rollouts, mean response length (tokens),
    straggler ratio (max/median length), mean reward, generation and step time (s)."""
    rollouts = pl.read_parquet(trace_dir / "rollouts.parquet")
    steps = pl.read_parquet(trace_dir / "steps.parquet").sort("step")
    per = rollouts.group_by("step", maintain_order=True).agg(
        pl.col("group_size").first().alias("G"),
        pl.len().alias("rollouts"),
        pl.col("response_tokens").mean().round(1).alias("mean_len"),
        # max/median, as sim.trace.metrics.straggler_ratio and the trainer's log
        (pl.col("response_tokens").max() / pl.col("response_tokens").median())
        .round(2)
        .alias("straggler_ratio"),
    )
    times = steps.select(
        "step",
        pl.col("reward_mean").round(3),
        pl.col("gen_time").round(3).alias("gen_s"),
        (pl.col("t_end") - pl.col("t_start")).round(3).alias("step_s"),
    )
    return per.join(times, on="step").sort("step")


def run(args: argparse.Namespace) -> pl.DataFrame:
    """Train, then return :func:`step_table` of the run's trace."""
    cfg = SyncConfig(seed=args.seed)
    args.out.mkdir(parents=True)
    trainer = GroupSizeGRPOTrainer(
        model=str(model_folder(args.out, args, cfg)),
        args=grpo_config(args.out, args, cfg),
        processing_class=task_tokenizer(),
        reward_funcs=make_digit_chain_reward(cfg.task),
        train_dataset=digit_chain_dataset(args.prompts * (args.steps + 1), args.seed, cfg.task),
        controller=args.controller,  # static:G, sagc, lagc, file.py:Class, ...
        tau=args.tau,
    )
    trainer.train()
    return step_table(args.out / "rolloutlab")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="output folder (must not exist)")
    p.add_argument("--controller", default="sagc:candidates=2/4/8", help="controller spec")
    p.add_argument("--steps", type=int, default=6, help="GRPO steps")
    p.add_argument("--prompts", type=int, default=4, help="B, prompts per step")
    p.add_argument("--max-group-size", type=int, default=8, help="largest G (sets the budget)")
    p.add_argument("--tau", type=float, default=2.0, help="straggler threshold (max/median)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-response-length", type=int, default=None, help="default: real sync's")
    p.add_argument("--warm-start-steps", type=int, default=100)
    p.add_argument("--model", type=Path, default=None, help="HF model folder (no warm start)")
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.out.exists():
        p.error(f"--out {args.out} exists; choose a new folder")
    with pl.Config(tbl_rows=-1, tbl_hide_dataframe_shape=True, tbl_hide_column_data_types=True):
        print(run(args))
    print(f"trace: {args.out / 'rolloutlab'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
