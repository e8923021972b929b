"""Same controller, same seed, same warm-started tiny Llama and task: rolloutlab's own
synchronous loop (``rolloutlab real sync``) beside TRL's ``GRPOTrainer`` driven by
:class:`rolloutlab.real.integrations.trl.GroupSizeGRPOTrainer`, over several controllers
and seeds.

Per loop, controller and seed: G per step, the straggler rate (share of steps whose
max/median response length exceeds tau), the generation makespan and the step time; then,
fitted on the first ``--fit-steps`` steps and scored on the rest, the simulator's
predictions of each (``rolloutlab compare idle``: lengths drawn from the fitted length
model through the fitted engine, TRL's static padded batching included; the step time adds
the learner priced on tokens) beside the naive rules (the fit steps' straggler rate;
constant and persistence times) and the run-to-run floor over the seeds
(``bench/three_loops_score.py`` defines every score). ``compare groups`` (the straggler
probability at the logged G) is added where a run kept one G.

Writes ``<out>/<controller>/seed<s>/`` (``rolloutlab/``: a real sync run; ``trl/``: TRL's
output, trace under ``trl/rolloutlab/``; ``idle_{rolloutlab,trl}/``,
``step_times_{rolloutlab,trl}.csv``, ``groups_{rolloutlab,trl}/``), and after every seed
``<out>/three_loops.json`` and ``<out>/summary.md`` with what is finished. Progress lines
on stderr (each phase, the warm start, the run's steps). Times are wall clock on this
machine: the two loops of a seed run one after the other, so compare them within one
invocation only.

    python bench/frameworks_three_loops.py --out runs/three_loops_seeds \\
        --steps 32 --fit-steps 8 --seed 0 --seed 1 --seed 2 \\
        --controller sagc:candidates=2/4/8 --controller sagc:candidates=2/4/8,eta_lambda=1

``--rescore DIR`` runs nothing: it scores again the per-step tables an earlier ``--out DIR``
kept (``three_loops.json``, each run's ``idle_*/idle_comparison.csv`` and
``step_times_*.csv``) with today's ``three_loops_score`` and writes ``three_loops.json``
and ``summary.md`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

import polars as pl
import three_loops_score as score
from click.testing import CliRunner
from rolloutlab.real.policy.model import load_config
from rolloutlab.real.policy.warmstart import default_cache_dir, key_hash, warm_start_key
from rolloutlab.real.rundir.config import SyncConfig, WarmStartConfig
from rolloutlab.real.runners.sync import run_sync
from rolloutlab.real.tasks.hf_tokenizer import task_tokenizer
from rolloutlab.sim.trace.progress import phase

from rolloutlab.cli import main as cli

EVAL_SIZE = 16
"""Held-out problems of the rolloutlab loop (evaluated once, before step 0: the warm start
leaves them out of its data, so this also sets the warm start's cache key)."""


def sync_config(controller: str, seed: int, args) -> SyncConfig:
    """The rolloutlab loop's config: B = ``--prompts``, capacity B x ``--max-group-size``,
    no periodic evaluation or checkpoint, the warm start of ``--warm-start-steps``."""
    return SyncConfig(
        controller=controller,
        steps=args.steps,
        prompts=args.prompts,
        seed=seed,
        tau=args.tau,
        capacity=args.prompts * args.max_group_size,
        eval_every=10_000,
        eval_size=EVAL_SIZE,
        checkpoint_every=10_000,
        warm_start=WarmStartConfig(steps=args.warm_start_steps),
    )


def warm_start_line(cfg: SyncConfig, cache_dir: Path | None) -> str:
    """What the first run will do for its warm start: copy the shared cache's entry (its
    key, :func:`real.policy.warmstart.warm_start_key`, matches) or train it."""
    ops = cfg.task_ops
    exclude = frozenset(p.prompt_text for p in ops.heldout(cfg.eval_size))
    key = warm_start_key(load_config(), ops, cfg.warm_start, exclude)
    entry = None if cache_dir is None else Path(cache_dir) / key_hash(key)
    meta = None if entry is None else entry / "warmstart.json"
    if meta is not None and meta.exists():
        try:
            if json.loads(meta.read_text()).get("key") == key:
                return f"warm start: cached ({entry}), copied into each run"
        except ValueError:
            pass
    return (
        f"warm start: not cached; training {cfg.warm_start.steps} supervised steps "
        f"(batch {cfg.warm_start.batch_size}; about a minute per 100 steps on 2 cores)"
    )


def trl_loop(out: Path, model_dir: Path, controller: str, seed: int, args) -> Path:
    """TRL with the hyper-parameters of :class:`SyncConfig`'s defaults
    (:func:`real.integrations.trl.sync_matched_config`) from the rolloutlab run's warm
    start; returns the trace folder."""
    # trl imports in seconds: not for --help or the settings checks
    from rolloutlab.real.integrations.task_data import (
        digit_chain_dataset,
        make_digit_chain_reward,
    )
    from rolloutlab.real.integrations.trl import GroupSizeGRPOTrainer, sync_matched_config

    cfg = SyncConfig()
    grpo = sync_matched_config(
        cfg, out, prompts=args.prompts, max_group_size=args.max_group_size,
        steps=args.steps, seed=seed,
    )  # fmt: skip
    trainer = GroupSizeGRPOTrainer(
        model=str(model_dir),
        args=grpo,
        processing_class=task_tokenizer(),
        reward_funcs=make_digit_chain_reward(cfg.task),
        train_dataset=digit_chain_dataset(args.prompts * (args.steps + 1), seed, cfg.task),
        controller=controller,
        tau=args.tau,
    )
    trainer.train()
    return out / "rolloutlab"


def invoke(argv: list[str]) -> str | None:
    """Run a ``rolloutlab`` command in this process; None on success, else its last line."""
    res = CliRunner().invoke(cli, argv)
    if res.exit_code != 0:
        lines = (res.output or repr(res.exception)).strip().splitlines()
        return lines[-1] if lines else f"exit {res.exit_code}"
    return None


def idle(trace: Path, out: Path, args) -> pl.DataFrame:
    """``compare idle`` on ``trace`` (fit on ``--fit-steps``): its per-step table.
    Raises RuntimeError with the command's last line when it fails."""
    err = invoke(
        ["compare", "idle", "--real", str(trace), "--fit-steps", str(args.fit_steps),
         "--draws", str(args.draws), "--tau", str(args.tau), "--out", str(out)]
    )  # fmt: skip
    if err:
        raise RuntimeError(f"compare idle {trace}: {err}")
    return pl.read_csv(out / "idle_comparison.csv")


def groups(trace: Path, out: Path, args) -> dict:
    """``compare groups -k K`` (the straggler probability of the held-out steps at the
    logged G, ``hierarchical`` model) where every step has one G; else why not."""
    G = pl.read_parquet(trace / "rollouts.parquet")["group_size"].unique()
    if G.len() > 1:
        return {"skipped": f"G changed ({sorted(G.to_list())}): one G per run needed"}
    err = invoke(
        ["compare", "groups", str(trace / "rollouts.parquet"), "-k", str(args.fit_steps),
         "--tau", str(args.tau), "--out", str(out)]
    )  # fmt: skip
    if err:
        return {"error": err}
    t = pl.read_csv(out / "validation_groups.csv").filter(
        (pl.col("model") == "hierarchical") & (pl.col("G") == G[0])
    )
    return t.select("G", "p_straggler_meas", "p_straggler_pred", "abs_error").to_dicts()[0]


def label(controller: str) -> str:
    """A folder name for a controller spec."""
    return re.sub(r"[^A-Za-z0-9]+", "_", controller).strip("_")


def score_loop(trace: Path, run_dir: Path, name: str, args) -> dict:
    """Predictions and scores of one loop's trace (module docstring)."""
    with phase(f"  compare idle on {name} ({args.draws} draws a step)"):
        per_step = idle(trace, run_dir / f"idle_{name}", args)
    steps = pl.read_parquet(trace / "steps.parquet")
    rollouts = pl.read_parquet(trace / "rollouts.parquet")
    times = score.step_times(per_step, steps, rollouts, args.fit_steps)
    times.write_csv(run_dir / f"step_times_{name}.csv")
    res = score.score_run(per_step, times, args.fit_steps)
    res["compare_groups"] = groups(trace, run_dir / f"groups_{name}", args)
    res["response_tokens_mean"] = float(rollouts["response_tokens"].mean())
    return res


def run_seed(controller: str, seed: int, args, first: bool) -> dict[str, dict]:
    """Both loops for one controller and seed, scored: ``{"rolloutlab": ..., "trl": ...}``."""
    run_dir = args.out / label(controller) / f"seed{seed}"
    cfg = sync_config(controller, seed, args)
    out: dict[str, dict] = {}
    load0 = os.getloadavg()[0]
    what = " (first run: the warm start, then the steps)" if first else ""
    t0 = time.perf_counter()
    with phase(f"{controller} seed {seed}: rolloutlab real sync, {args.steps} steps{what}"):
        run_sync(cfg, run_dir / "rolloutlab", progress=True, cache_dir=default_cache_dir())
    rl_wall = time.perf_counter() - t0
    t0 = time.perf_counter()
    with phase(f"{controller} seed {seed}: TRL GroupSizeGRPOTrainer, {args.steps} steps"):
        tr = trl_loop(run_dir / "trl", run_dir / "rolloutlab" / "warmstart", controller, seed, args)
    trl_wall = time.perf_counter() - t0
    for name, trace, wall in (
        ("rolloutlab", run_dir / "rolloutlab", rl_wall),
        ("trl", tr, trl_wall),
    ):
        out[name] = score_loop(trace, run_dir, name, args)
        out[name]["wall_s"] = wall
        out[name]["load_1min"] = [load0, os.getloadavg()[0]]
    return out


KEYS = ("controller", "loop", "seeds")
TABLES = {
    "straggler rate (tau)": KEYS + (
        "G held out", "rate fit / held out", "rate error sim", "rate error persistence",
        "rate error linear", "rate floor", "sim beats naive (rate)",
        "Brier sim / persistence / linear", "sim beats naive (Brier)",
    ),
    "generation makespan (MdAPE over the held-out steps)": KEYS + (
        "makespan MdAPE drawn", "replay", "constant", "persistence", "linear",
        "makespan floor", "drawn beats naive", "mean makespan s",
    ),
    "step time (MdAPE over the held-out steps)": KEYS + (
        "step MdAPE sim", "step constant", "step persistence", "step linear", "step floor",
        "sim beats naive (step)", "mean step s",
    ),
}  # fmt: skip
"""The over-seeds tables of ``summary.md``: title and columns of :func:`three_loops_score.summary_rows`."""


def per_seed_rows(raw: list[dict]) -> list[dict]:
    """One row per (controller, seed, loop): G per step and the main errors."""
    rows = []
    for r in raw:
        for loop in ("rolloutlab", "trl"):
            s = r[loop]
            rows.append(
                {
                    "controller": r["controller"],
                    "seed": r["seed"],
                    "loop": loop,
                    "G per step": "".join(f"{g:x}" for g in s["G"]),
                    "rate fit / held out": f"{s['fit_rate']:.2f} / {s['held_out_rate']:.2f}",
                    "rate pred sim / persistence / linear": " / ".join(
                        f"{s['rate_pred'][k]:.2f}" for k in score.RATE_RULES
                    ),
                    "Brier sim / persistence / linear": " / ".join(
                        f"{s['brier'][k]:.3f}" for k in score.RATE_RULES
                    ),
                    "makespan MdAPE drawn / replay / constant / persistence / linear": " / ".join(
                        f"{s['makespan_mdape'][k]:.2f}" for k in score.MAKESPAN_RULES
                    ),
                    "step MdAPE sim / constant / persistence / linear": " / ".join(
                        f"{s['step_mdape'][k]:.2f}" for k in score.STEP_RULES
                    ),
                    "mean step / makespan (s)": f"{s['mean_step_s']:.2f} / {s['mean_makespan_s']:.2f}",
                    "load": "-".join(f"{v:.0f}" for v in s["load_1min"]),
                }
            )
    return rows


def write_results(out: Path, args, raw: list[dict]) -> str:
    """``three_loops.json`` (every run's scores) and ``summary.md`` (the per-seed and the
    over-seeds tables) of the runs finished so far; returns the markdown."""
    results: dict[str, dict[str, list[dict]]] = {}
    for r in raw:
        for loop in ("rolloutlab", "trl"):
            results.setdefault(r["controller"], {}).setdefault(loop, []).append(r[loop])
    doc = {"args": {k: str(v) for k, v in vars(args).items()}, "runs": raw}
    (out / "three_loops.json").write_text(json.dumps(doc, indent=1))
    per_seed = per_seed_rows(raw)
    rows = score.summary_rows(results)
    md = "Per seed\n\n" + score.markdown(per_seed, list(per_seed[0]))
    for title, columns in TABLES.items():
        md += f"\nOver the seeds: {title}\n\n" + score.markdown(rows, columns)
    (out / "summary.md").write_text(md)
    return md


def rescore(src: Path, out: Path) -> str:
    """Score again the runs of an earlier ``--out`` ``src`` (module docstring) into ``out``;
    the measured fields a score cannot recompute (wall time, load, ``compare groups``,
    mean response) are kept from ``src/three_loops.json``. Returns the markdown.
    Raises FileNotFoundError naming the first per-step table missing."""
    doc = json.loads((src / "three_loops.json").read_text())
    args = argparse.Namespace(**doc["args"])
    k = int(args.fit_steps)
    raw = []
    for run in doc["runs"]:
        run_dir = src / label(run["controller"]) / f"seed{run['seed']}"
        new = {"controller": run["controller"], "seed": run["seed"]}
        for loop in ("rolloutlab", "trl"):
            tables = (
                run_dir / f"idle_{loop}" / "idle_comparison.csv",
                run_dir / f"step_times_{loop}.csv",
            )
            if missing := [t for t in tables if not t.is_file()]:
                raise FileNotFoundError(f"no per-step table {missing[0]}")
            per_step, times = (pl.read_csv(t) for t in tables)
            kept = {key: run[loop][key] for key in
                    ("compare_groups", "response_tokens_mean", "wall_s", "load_1min")}  # fmt: skip
            new[loop] = {**score.score_run(per_step, times, k), **kept}
        raw.append(new)
    out.mkdir(parents=True)
    return write_results(out, args, raw)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--controller", action="append", help="controller spec; repeat for several "
                   "[default: sagc:candidates=4/8/16]")  # fmt: skip
    p.add_argument("--seed", type=int, action="append", help="seed; repeat [default: 0]")
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--fit-steps", type=int, default=None, help="[default: half the steps]")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--max-group-size", type=int, default=16)
    p.add_argument("--tau", type=float, default=2.0)
    p.add_argument("--warm-start-steps", type=int, default=350)
    p.add_argument("--draws", type=int, default=16, help="compare idle's length draws a step")
    p.add_argument("--rescore", type=Path, default=None,
                   help="score an earlier --out folder's kept tables again; run nothing")  # fmt: skip
    args = p.parse_args(argv)
    args.controller = args.controller or ["sagc:candidates=4/8/16"]
    args.seed = args.seed or [0]
    args.fit_steps = args.fit_steps if args.fit_steps is not None else args.steps // 2
    if not 2 <= args.fit_steps < args.steps:
        p.error(f"--fit-steps {args.fit_steps}: need 2 <= K < --steps {args.steps}")
    if args.out.exists():
        p.error(f"--out {args.out} exists; choose a new folder")
    if args.rescore is not None and not (args.rescore / "three_loops.json").is_file():
        p.error(f"--rescore {args.rescore}: no three_loops.json (give an earlier --out folder)")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.rescore is not None:
        try:
            print(rescore(args.rescore, args.out))
        except FileNotFoundError as exc:  # a per-step table of one run is missing
            sys.exit(f"--rescore {args.rescore}: {exc}")
        return 0
    args.out.mkdir(parents=True)
    first_cfg = sync_config(args.controller[0], args.seed[0], args)
    print(warm_start_line(first_cfg, default_cache_dir()), file=sys.stderr, flush=True)
    raw: list[dict] = []
    for i, seed in enumerate(args.seed):  # seeds outermost: an early stop leaves whole seeds
        for j, controller in enumerate(args.controller):
            res = run_seed(controller, seed, args, first=i == j == 0)
            raw.append({"controller": controller, "seed": seed, **res})
            write_results(args.out, args, raw)
    print(write_results(args.out, args, raw))
    return 0


if __name__ == "__main__":
    sys.exit(main())
