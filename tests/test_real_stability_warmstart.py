"""Stability grids share their supervised warm start through the shared cache: a second
grid with the same model, task and warm-start settings copies it instead of retraining."""

import json

import pytest

torch = pytest.importorskip("torch")

from rolloutlab.real.policy import warmstart
from rolloutlab.real.rundir.async_config import AsyncConfig
from rolloutlab.real.runners.stability import prepare_warm_start

from tests.real_helpers import tiny_config


def source(grid_dir):
    return json.loads((grid_dir / "warmstart" / "warmstart.json").read_text())["source"]


def test_a_second_grid_takes_the_warm_start_from_the_cache(tmp_path, monkeypatch):
    trained = []
    train = warmstart.train_warm_start

    def counting(*args, **kw):
        trained.append(1)
        return train(*args, **kw)

    monkeypatch.setattr(warmstart, "train_warm_start", counting)
    base = AsyncConfig(sync=tiny_config())
    cache = tmp_path / "cache"
    prepare_warm_start(tmp_path / "grid1", base, cache)
    prepare_warm_start(tmp_path / "grid2", AsyncConfig(sync=tiny_config(seed=3)), cache)
    assert (source(tmp_path / "grid1"), source(tmp_path / "grid2")) == ("trained", "cache")
    assert len(trained) == 1
    a = (tmp_path / "grid1" / "warmstart" / "model.safetensors").read_bytes()
    assert a == (tmp_path / "grid2" / "warmstart" / "model.safetensors").read_bytes()
    # without the cache (--no-cache) every grid trains its own
    prepare_warm_start(tmp_path / "grid3", base, None)
    assert source(tmp_path / "grid3") == "trained" and len(trained) == 2
