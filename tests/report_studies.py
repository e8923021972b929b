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
    _cli("sim", "--controllers", "static:4,static:8,sagc", "--steps", "30", "--prompts", "8",
         "--out", str(d))  # fmt: skip
    return d


def sweep(d: Path) -> Path:
    _cli("sweep", "--calibration", GSM8K, "--steps", "3", "--prompts", "2,4", "--workers", "1,2",
         "--seeds", "2", "--controllers", "static:2,sagc", "--out", str(d))  # fmt: skip
    return d


def advise(d: Path) -> Path:
    _cli(*("advise --controllers static:2,static:4 --prompts 4 --workers 1,2 --max-num-seqs 64 "
           "--pipeline sync,bounded:2 --lr 1e-6,4e-6 --steps 15 --trials 6 --batch 3").split(),
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
    }
    out["compare-collapse"] = compare_collapse(root / "collapse", out["stability"])
    return out
