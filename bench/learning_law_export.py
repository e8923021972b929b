"""Export ``real sync`` run directories to the bundled tables of docs/learning.md §5.

Appends one row per run and step to ``runs.csv`` and one row per evaluation to
``evals.csv`` in ``results/learning_law_heldout/`` (or ``--data DIR``), the tables
``bench/learning_law_validation.py`` rebuilds runs from:

    python bench/learning_law_export.py runs/ll3/g4_b8_s5 runs/ll3/g8_b4_s5 ...

The run's name is its directory's name (``g{G}_b{B}_s{seed}``); a name already in the
tables is refused (nothing written), as is a run without ``learner.jsonl``,
``eval.jsonl``, ``config.json`` or ``steps.parquet`` (one line naming the file, exit 2).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import polars as pl

DATA = Path(__file__).resolve().parents[1] / "results" / "learning_law_heldout"


def _jsonl(path: Path) -> list[dict]:
    if not path.exists():
        raise FileNotFoundError(f"{path}: missing (is this a `rolloutlab real sync` run?)")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_tables(run_dir: Path) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``(steps, evals)`` rows of one run, in ``runs.csv`` and ``evals.csv``'s columns."""
    name = run_dir.name
    cfg_path = run_dir / "config.json"
    if not cfg_path.exists():
        raise FileNotFoundError(f"{cfg_path}: missing (is this a `rolloutlab real sync` run?)")
    cfg = json.loads(cfg_path.read_text())["config"]
    steps_path = run_dir / "steps.parquet"
    if not steps_path.exists():
        raise FileNotFoundError(f"{steps_path}: missing")
    lr = dict(pl.read_parquet(steps_path).select("step", "lr").iter_rows())
    learner = _jsonl(run_dir / "learner.jsonl")
    B = int(cfg["prompts"])
    steps = pl.DataFrame([{
        "run": name, "step": int(r["step"]), "G": int(r["G"]), "B": B, "seed": int(cfg["seed"]),
        "lr": float(lr[int(r["step"])]), "dynamic_sampling": bool(cfg["dynamic_sampling"]),
        "reward_mean": float(r["reward_mean"]),
        "group_correct": " ".join(str(int(k)) for k in r["group_correct"]),
        "cpu_gen_s": float(r["cpu_gen_s"]), "cpu_train_s": float(r["cpu_train_s"]),
        "cpu_sync_s": float(r["cpu_sync_s"]),
    } for r in learner])  # fmt: skip
    evals = pl.DataFrame([{
        "run": name, "step": int(e["step"]), "accuracy": float(e["accuracy"]),
        "greedy_accuracy": float(e["greedy_accuracy"]), "eval_size": int(cfg["eval_size"]),
    } for e in _jsonl(run_dir / "eval.jsonl")])  # fmt: skip
    return steps, evals


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run directories of `real sync`")
    ap.add_argument("--data", type=Path, default=DATA, help="folder of runs.csv and evals.csv")
    args = ap.parse_args(argv)
    for name in ("runs.csv", "evals.csv"):
        if not (args.data / name).is_file():
            ap.error(f"--data {args.data}: no {name} (the folder of the bundled tables)")
    old_runs, old_evals = pl.read_csv(args.data / "runs.csv"), pl.read_csv(args.data / "evals.csv")
    have = set(old_runs["run"].unique())
    try:
        parts = [run_tables(d) for d in args.runs]
    except (FileNotFoundError, KeyError) as exc:
        ap.error(str(exc).strip("'\""))
    dup = sorted({p[0]["run"][0] for p in parts} & have)
    if dup:
        ap.error(f"already in {args.data / 'runs.csv'}: {', '.join(dup)}")
    runs = pl.concat([old_runs, *(p[0] for p in parts)], how="vertical_relaxed")
    evals = pl.concat([old_evals, *(p[1] for p in parts)], how="vertical_relaxed")
    runs.write_csv(args.data / "runs.csv", float_precision=6)
    evals.write_csv(args.data / "evals.csv", float_precision=6)
    print(f"appended {len(parts)} runs to {args.data}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
