"""``compare horizon --fit-seeds``: a seed split named before the results are
seen (e.g. fit on 0,2,4,6 of seeds 0..7, or keep an old fit half and predict new seeds)."""

from __future__ import annotations

import polars as pl
import pytest
from rolloutlab.analysis.collapse.compare import GridError
from rolloutlab.analysis.collapse.horizon import split

from tests.test_horizon_compare import compare_horizon, write_grid
from tests.test_horizon_law import TRUE


def rows(seeds: list[int]) -> pl.DataFrame:
    return pl.DataFrame({"seed": seeds, "S": [1] * len(seeds)})


def test_named_fit_seeds_fit_and_every_other_seed_is_held_out():
    fit, held = split(rows([0, 1, 2, 3, 4, 5, 6, 7]), "seed", (0, 2))
    assert sorted(fit["seed"]) == [0, 2]
    assert sorted(held["seed"]) == [1, 3, 4, 5, 6, 7]
    # a mechanism with fewer seeds keeps the ones it has on each side
    fit, held = split(rows([0, 1]), "seed", (0, 2, 4, 6))
    assert (fit["seed"].to_list(), held["seed"].to_list()) == ([0], [1])


def test_without_fit_seeds_the_split_is_even_against_odd_seeds():
    fit, held = split(rows([0, 1, 2, 3, 4, 5, 6, 7]), "seed")
    assert sorted(fit["seed"]) == [0, 2, 4, 6] and sorted(held["seed"]) == [1, 3, 5, 7]


@pytest.mark.parametrize("fit_seeds", [(0, 1), (5,)])
def test_fit_seeds_leaving_a_half_empty_are_refused(fit_seeds):
    with pytest.raises(GridError, match="at least one seed on each side"):
        split(rows([0, 1]), "seed", fit_seeds)


def test_compare_horizon_holds_out_exactly_the_seeds_not_named(tmp_path):
    grid = write_grid(tmp_path / "on", TRUE, 60, True, "token", 3)  # seeds 0..3
    out = tmp_path / "o"
    summary, printed = compare_horizon([grid], out, "--bootstrap", "0", "--fit-seeds", "0")
    assert summary["fit_seeds"] == [0]
    held = pl.read_csv(out / "horizon_points.csv")
    assert sorted(held["seed"].unique()) == [1, 2, 3]
    n_cells = pl.read_csv(grid / "stability.csv").select("S", "lr").unique().height
    assert summary["held_out"]["points"] == held.height == 3 * n_cells
    assert "held-out runs" in printed
