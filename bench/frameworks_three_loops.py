"""Same controller, same seed, same warm-started tiny Llama and task: rolloutlab's own
synchronous loop (``rolloutlab real sync``) beside TRL's ``GRPOTrainer`` driven by
:class:`rolloutlab.real.integrations.trl.GroupSizeGRPOTrainer`.

Per loop: G per step, the straggler rate (share of steps whose max/median response length
exceeds tau), mean step and generation time; then the simulator's prediction of the
straggler rate from each loop's own first half (``rolloutlab compare groups -k K``: the
length model fitted on steps 0..K-1, P(max/median > tau) predicted for the later steps at
their G), beside the naive rule "the first half's rate" (persistence).

Writes ``<out>/rolloutlab/`` (a real sync run), ``<out>/trl/`` (TRL output, trace under
``trl/rolloutlab/``), ``<out>/validate_{rolloutlab,trl}/`` and ``<out>/three_loops.json``;
prints a markdown table. Times are wall clock on this machine: compare them only within
one run of this script (the two loops run one after the other).

    python bench/frameworks_three_loops.py --out runs/three_loops [--steps 16 --seed 0]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl
from click.testing import CliRunner
from rolloutlab.real.integrations.task_data import digit_chain_dataset, make_digit_chain_reward
from rolloutlab.real.integrations.trl import GroupSizeGRPOTrainer, sync_matched_config
from rolloutlab.real.policy.warmstart import default_cache_dir
from rolloutlab.real.rundir.config import SyncConfig, WarmStartConfig
from rolloutlab.real.runners.sync import run_sync
from rolloutlab.real.tasks.hf_tokenizer import task_tokenizer
from rolloutlab.sim.trace.metrics import straggler_ratio

from rolloutlab.cli import main as cli


def summarise(trace_dir: Path, tau: float) -> dict:
    """G per step, straggler ratio per step, straggler rate, mean step/generation time (s)."""
    rollouts = pl.read_parquet(trace_dir / "rollouts.parquet")
    steps = pl.read_parquet(trace_dir / "steps.parquet").sort("step")
    per = rollouts.partition_by("step", maintain_order=True)
    ratios = [straggler_ratio(d["response_tokens"].to_numpy().astype(float)) for d in per]
    return {
        "G": [int(d["group_size"][0]) for d in per],
        "straggler_ratio": [round(float(r), 3) for r in ratios],
        "straggler_rate": float(np.mean(np.asarray(ratios) > tau)),
        "step_time_s": float((steps["t_end"] - steps["t_start"]).mean()),
        "gen_time_s": float(steps["gen_time"].mean()),
        "response_tokens_mean": float(rollouts["response_tokens"].mean()),
    }


def predict(trace_dir: Path, out: Path, k: int, tau: float) -> dict:
    """``compare groups -k K`` on the loop's trace: measured and predicted straggler
    rate over the held-out steps at their G, and the first half's rate (persistence)."""
    res = CliRunner().invoke(
        cli,
        ["compare", "groups", str(trace_dir / "rollouts.parquet"), "-k", str(k),
         "--tau", str(tau), "--out", str(out)],
    )  # fmt: skip
    if res.exit_code != 0:
        return {"error": res.output.strip().splitlines()[-1]}
    table = pl.read_csv(out / "validation_groups.csv")
    return {"table": table.to_dicts()}


def rolloutlab_loop(out: Path, args) -> Path:
    cfg = SyncConfig(
        controller=args.controller,
        steps=args.steps,
        prompts=args.prompts,
        seed=args.seed,
        tau=args.tau,
        capacity=args.prompts * args.max_group_size,
        eval_every=10_000,
        eval_size=16,
        checkpoint_every=10_000,
        warm_start=WarmStartConfig(steps=args.warm_start_steps),
    )
    run_sync(cfg, out, progress=False, cache_dir=default_cache_dir())
    return out


def trl_loop(out: Path, model_dir: Path, args, cfg: SyncConfig) -> Path:
    """TRL with the hyper-parameters of :class:`SyncConfig`'s defaults: lr, clip range
    (0.2 / 0.28), no KL, token-level (DAPO) loss, one optimiser step per generation,
    constant lr, temperature 1, the same response cap."""
    grpo = sync_matched_config(
        cfg,
        out,
        prompts=args.prompts,
        max_group_size=args.max_group_size,
        steps=args.steps,
        seed=args.seed,
    )
    trainer = GroupSizeGRPOTrainer(
        model=str(model_dir),
        args=grpo,
        processing_class=task_tokenizer(),
        reward_funcs=make_digit_chain_reward(cfg.task),
        train_dataset=digit_chain_dataset(args.prompts * (args.steps + 1), args.seed, cfg.task),
        controller=args.controller,
        tau=args.tau,
    )
    trainer.train()
    return out / "rolloutlab"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--controller", default="sagc:candidates=4/8/16")
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--max-group-size", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tau", type=float, default=2.0)
    p.add_argument("--warm-start-steps", type=int, default=350)
    args = p.parse_args(argv)
    if args.out.exists():
        p.error(f"--out {args.out} exists; choose a new folder")
    results = {"args": {k: str(v) for k, v in vars(args).items()}}
    t0 = time.perf_counter()
    rl = rolloutlab_loop(args.out / "rolloutlab", args)
    results["rolloutlab_wall_s"] = time.perf_counter() - t0
    cfg = SyncConfig()
    t0 = time.perf_counter()
    tr = trl_loop(args.out / "trl", args.out / "rolloutlab" / "warmstart", args, cfg)
    results["trl_wall_s"] = time.perf_counter() - t0
    k = args.steps // 2
    for name, trace in (("rolloutlab", rl), ("trl", tr)):
        results[name] = summarise(trace, args.tau)
        results[name]["prediction"] = predict(trace, args.out / f"validate_{name}", k, args.tau)
    (args.out / "three_loops.json").write_text(json.dumps(results, indent=1))
    print("| loop | G per step | straggler rate | step time (s) | generation (s) |")
    print("|---|---|---|---|---|")
    for name in ("rolloutlab", "trl"):
        r = results[name]
        print(
            f"| {name} | {' '.join(map(str, r['G']))} | {r['straggler_rate']:.2f} | "
            f"{r['step_time_s']:.2f} | {r['gen_time_s']:.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
