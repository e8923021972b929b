"""Tiny outputs of every study kind that ``rolloutlab report`` renders, made by the CLI
itself (seconds each): the pages the browser test opens."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from rolloutlab.cli import main
from tests.test_compare_idle import write_run
from tests.test_compare_learning import write_synthetic_run
from tests.test_horizon_compare import write_grid
from tests.test_horizon_law import TRUE

ROOT = Path(__file__).resolve().parent.parent
GSM8K = str(ROOT / "sim" / "data" / "gsm8k.json")
GROUPS = str(ROOT / "tests" / "data" / "groups" / "real_sync")
VERL_TB = str(ROOT / "tests" / "data" / "verl_tb" / "q3b_fsdp_base")


def _cli(*args: str) -> None:
    """``rolloutlab ARGS``; raises with the command's output when it does not exit 0."""
    res = CliRunner().invoke(main, list(args), catch_exceptions=False)
    if res.exit_code != 0:
        raise RuntimeError(f"rolloutlab {' '.join(args)}: exit {res.exit_code}\n{res.output}")


def sim(d: Path) -> Path:
    _cli("sim", "--controller", "static:4,static:8,sagc", "--steps", "30", "--prompts", "8",
         "--out", str(d))  # fmt: skip
    return d


def sweep(d: Path) -> Path:
    _cli("sweep", "--calibration", GSM8K, "--steps", "3", "--prompts", "2,4", "--workers", "1,2",
         "--seeds", "2", "--controller", "static:2,sagc", "--out", str(d))  # fmt: skip
    return d


def advise(d: Path) -> Path:
    _cli(*("advise --controller static:2,static:4 --prompts 4 --workers 1,2 --max-num-seqs 64 "
           "--pipeline sync,bounded:2 --lr 1e-6,4e-6 --steps 15 --trials 6 --parallel-trials 3").split(),
         "--out", str(d))  # fmt: skip
    return d


def stability(d: Path) -> Path:
    _cli("stability", "--S", "2,8", "--lr", "0.01,0.1", "--steps", "20", "--seeds", "2",
         "--out", str(d))  # fmt: skip
    return d


def compare_idle(d: Path) -> Path:
    run = write_run(d.parent / f"{d.name}_run", [4, 8] * 5)
    _cli("compare", "idle", "--real", str(run), "--fit-steps", "4", "--draws", "2", "--out", str(d))
    return d


def compare_collapse(d: Path, grid: Path) -> Path:
    _cli("compare", "collapse", "--real", str(grid), "--out", str(d))
    return d


def compare_horizon(d: Path) -> Path:
    a = write_grid(d.parent / f"{d.name}_grid", TRUE, 60, True, "token", 1)
    _cli("compare", "horizon", "--real", str(a), "--bootstrap", "5", "--out", str(d))
    return d


def compare_learning(d: Path) -> Path:
    base = d.parent / f"{d.name}_runs"
    base.mkdir()
    write_synthetic_run(base / "fit", 8, 0, T=25)
    write_synthetic_run(base / "g4", 4, 1, T=25)
    write_synthetic_run(base / "g16", 16, 2, T=25)
    _cli("compare", "learning", "--learning-model", "linear", "--draws", "3", "--fit",
         str(base / "fit"), "--real", str(base / "g4"), "--real", str(base / "g16"),
         "--target-accuracy", "0.7", "--out", str(d))  # fmt: skip
    return d


def validate_groups(d: Path) -> Path:
    _cli("compare", "groups", GROUPS, "--fit-steps", "5", "--out", str(d))
    return d


def validate_verl_tb(d: Path) -> Path:
    _cli("compare", "verl-tb", VERL_TB, "--fit-steps", "80", "--out", str(d))
    return d


def advise_split(d: Path, *extra: str) -> Path:
    """``advise --split`` with one controller (the README's form) and a frozen pass rate:
    the split is searched, the controller is not, and the objective is time per step."""
    _cli(*("advise --model qwen2.5-7b --gpu h100 --tp 2 --gpus 64 --split 56:8,48:16 "
           "--prompts 64 --lr 1e-6 --controller static:8 --max-num-seqs 256 --steps 4 "
           "--trials 2 --parallel-trials 2 --max-straggler-rate 1 --pass-rate fixed:0.5").split(),
         *extra, "--out", str(d))  # fmt: skip
    return d


WHOLE_STEP = {  # run -> (measured, model, constant, linear, persistence) step time, s
    "fitted": ([100.0, 100.0], [101.0, 99.0], [120.0, 120.0], [130.0, 130.0], [None, 100.0]),
    "heldout": ([100.0, 100.0], [110.0, 90.0], [120.0, 120.0], [130.0, 130.0], [None, 150.0]),
}
"""Hand-made whole steps: held out, the model's MAPE is 10 %, constant 20 %, linear 30 %,
persistence 50 % (one step with a previous one)."""


def validate_verl_whole_step(d: Path, whole_step: dict | None = None) -> Path:
    """A ``compare verl-tb --calibration`` output (validation.csv scored by the command's
    own :func:`score` from ``whole_step``, :data:`WHOLE_STEP` by default; config naming the
    runs the calibration fitted), without the minute the real calibration and prediction
    take."""
    import polars as pl
    from rolloutlab.calibration.validation.step_holdout import score
    from rolloutlab.sim.scenario.provenance import write_config

    rows = [
        {"run": run, "step": i + 1, "measured_s": m, "model_s": a, "constant_s": c,
         "linear_s": li, "persistence_s": p, "periodic": False}
        for run, cols in (whole_step or WHOLE_STEP).items()
        for i, (m, a, c, li, p) in enumerate(zip(*cols))
    ]  # fmt: skip
    d.mkdir()
    score(pl.DataFrame(rows)).write_csv(d / "validation.csv")
    write_config(d / "config.json", {"command": "validate-verl-tb", "runs": list(whole_step or WHOLE_STEP),
                                     "calibration": "cal.json", "fitted_runs": ["fitted"]})  # fmt: skip
    return d


def all_studies(root: Path) -> dict[str, Path]:
    """Every study kind's tiny output under ``root``: ``{kind: folder}``."""
    out = {
        "sim": sim(root / "sim"),
        "sweep": sweep(root / "sweep"),
        "advise": advise(root / "advise"),
        "stability": stability(root / "stability"),
        "compare-idle": compare_idle(root / "idle"),
        "compare-horizon": compare_horizon(root / "horizon"),
        "compare-learning": compare_learning(root / "learning"),
        "validate-groups": validate_groups(root / "vgroups"),
        "validate-verl-tb": validate_verl_tb(root / "vverl"),
        "validate-verl-whole-step": validate_verl_whole_step(root / "vverl_step"),
        "advise-split": advise_split(root / "advise_split"),
    }
    out["compare-collapse"] = compare_collapse(root / "collapse", out["stability"])
    return out
