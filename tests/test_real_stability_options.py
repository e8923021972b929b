"""``rolloutlab real stability``'s detector and loss options reach the grid's run config:
checked on the grid spec handed to the grid store, before any run starts."""

import pytest
from click.testing import CliRunner

from rolloutlab.cli import main
from rolloutlab.commands.real import stability as real_stability


class Stop(Exception):
    """Raised by the spy once it has the spec (no run, no warm start)."""


@pytest.fixture
def spec(monkeypatch):
    seen = {}

    def spy(opts, out_dir, command, spec, points, default_parallel=None, earlier_specs=()):
        seen.update(spec)
        raise Stop

    monkeypatch.setattr(real_stability, "prepare_grid", spy)
    return seen


def test_detector_and_loss_options_reach_every_run_of_the_grid(tmp_path, spec):
    args = "--entropy-frac 0.4 --kl-max 3 --detector-patience 2 --release 0.5"
    args += " --clip off --is-mode sequence --is-cap 1.5"
    res = CliRunner().invoke(main, ["real", "stability", *args.split(), "--out", str(tmp_path)])
    assert isinstance(res.exception, Stop), res.output
    collapse, learner = spec["base"]["collapse"], spec["base"]["sync"]["learner"]
    assert (collapse["entropy_frac"], collapse["kl_max"]) == (0.4, 3.0)
    assert (collapse["kl_patience"], collapse["release"]) == (2, 0.5)
    assert (learner["clip"], learner["is_mode"], learner["is_cap"]) == (False, "sequence", 1.5)


def test_the_entropy_criterion_is_off_unless_asked(tmp_path, spec):
    res = CliRunner().invoke(main, ["real", "stability", "--out", str(tmp_path)])
    assert isinstance(res.exception, Stop), res.output
    assert spec["base"]["collapse"]["entropy_frac"] == 0.0


@pytest.mark.parametrize("flag, uses_cache", [([], True), (["--no-cache"], False)])
def test_the_grid_warm_start_uses_the_shared_cache_unless_no_cache(
    tmp_path, monkeypatch, flag, uses_cache
):
    from rolloutlab.real.runners import stability

    seen = []

    def spy(out, base, cache_dir=None):
        seen.append(cache_dir)
        raise Stop

    monkeypatch.setenv("ROLLOUTLAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(stability, "prepare_warm_start", spy)
    res = CliRunner().invoke(main, ["real", "stability", *flag, "--out", str(tmp_path / "g")])
    assert isinstance(res.exception, Stop), res.output
    assert seen == [tmp_path / "cache" if uses_cache else None]


def test_seed_offset_runs_new_seeds_not_reruns_of_the_first_ones(tmp_path, spec):
    from rolloutlab.real.runners.stability import GridConfig, grid_points

    args = ["--seeds", "2", "--seed-offset", "4", "--S", "1,2", "--lr", "1e-3"]
    res = CliRunner().invoke(main, ["real", "stability", *args, "--out", str(tmp_path)])
    assert isinstance(res.exception, Stop), res.output
    assert (spec["seeds"], spec["seed_offset"]) == (2, 4)
    grid = GridConfig(S_values=(1, 2), lrs=(1e-3,), seeds=2, seed_offset=4)
    assert sorted({p["seed"] for p in grid_points(grid)}) == [4, 5]
    assert len(grid_points(grid)) == 4
    assert grid.run_config(2, 1e-3, 5).sync.seed == 5


def test_a_grid_without_seed_offset_keeps_its_old_spec(tmp_path, spec):
    """Folders grown before --seed-offset existed still resume (same spec hash)."""
    res = CliRunner().invoke(main, ["real", "stability", "--out", str(tmp_path)])
    assert isinstance(res.exception, Stop), res.output
    assert "seed_offset" not in spec and spec["seeds"] == 3


def test_a_negative_seed_offset_is_refused_by_the_grid():
    from rolloutlab.real.runners.stability import GridConfig

    with pytest.raises(ValueError, match="seed_offset >= 0"):
        GridConfig(seed_offset=-1)


def test_a_finished_grid_keeps_every_point_and_fits_the_finished_ones(tmp_path):
    import json

    import polars as pl
    from rolloutlab.analysis.collapse.stability_fit import finish_real_grid

    df = pl.DataFrame(
        {
            "S": [1, 1, 2, 2, 2, 2],
            "lr": [1e-3, 1e-2, 1e-3, 1e-2, 1e-3, 1e-2],
            "seed": [0, 0, 0, 0, 1, 1],
            "collapsed": [False, True, False, True, True, False],
            "t_collapse": [None, 40, None, 20, 30, None],
            "status": ["ok", "ok", "ok", "ok", "ok", "failed"],
        }
    )
    grid = {"mode": "interval", "seeds": 2, "seed_offset": 4, "base": {"sync": {"steps": 50}}}
    table, t_collapse, _ = finish_real_grid(df, grid, 12.5, {"executor": "local"}, tmp_path)
    assert pl.read_csv(tmp_path / "stability.csv").height == 6  # the failed point too
    rows = {(r["S"], r["lr"]): r for r in t_collapse.to_dicts()}
    assert rows[(2, 1e-3)]["collapsed_runs"] == 1 and rows[(2, 1e-2)]["collapsed_runs"] == 1
    assert rows[(1, 1e-2)]["eta_t_collapse"] == pytest.approx(0.4)
    assert table["frac_by_lr"].to_list() == ["0.00 1.00", "0.50 1.00"]  # failed one left out
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["grid"] == grid and cfg["runtime_s"] == 12.5 and cfg["executor"] == "local"
