"""The shared warm-start cache: a hit when everything it depends on matches, a miss otherwise."""

import json

import pytest
import torch
from rolloutlab.real.policy.model import load_config
from rolloutlab.real.policy.warmstart import cached_warm_start, key_hash, warm_start_key
from rolloutlab.real.rundir.config import SyncConfig, WarmStartConfig
from rolloutlab.real.tasks.digit_chain import TaskConfig

WS = WarmStartConfig(steps=2, batch_size=4)


def _run(run_dir, cache, task="digit-chain", ws=WS, eval_size=4, model=None):
    cfg = SyncConfig(task_name=task, warm_start=ws, eval_size=eval_size, task=TaskConfig(n_max=5))
    ops = cfg.task_ops
    exclude = frozenset(p.prompt_text for p in ops.heldout(eval_size))
    m = cached_warm_start(run_dir, model or load_config(), ops, ws, exclude, cache)
    return m, json.loads((run_dir / "warmstart" / "warmstart.json").read_text())["source"]


def _same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def test_a_second_run_with_the_same_settings_loads_the_cached_model(tmp_path):
    cache = tmp_path / "cache"
    m1, s1 = _run(tmp_path / "a", cache)
    m2, s2 = _run(tmp_path / "b", cache)
    assert (s1, s2) == ("trained", "cache")
    assert _same(m1, m2)
    assert len(list(cache.iterdir())) == 1


@pytest.mark.parametrize(
    "change",
    [
        {"task": "graph-walk"},
        {"ws": WarmStartConfig(steps=2, batch_size=4, seed=1)},
        {"ws": WarmStartConfig(steps=3, batch_size=4)},
        {"eval_size": 5},  # another held-out set is left out of the data
    ],
)
def test_any_changed_dependency_misses(tmp_path, change):
    cache = tmp_path / "cache"
    _run(tmp_path / "a", cache)
    _, source = _run(tmp_path / "b", cache, **change)
    assert source == "trained"
    assert len(list(cache.iterdir())) == 2


def test_no_cache_trains_and_the_key_names_model_and_torch(tmp_path):
    cache = tmp_path / "cache"
    m1, _ = _run(tmp_path / "a", cache)
    m2, source = _run(tmp_path / "b", None)  # --no-cache
    assert source == "trained" and _same(m1, m2)  # same seed: the same weights, retrained
    cfg = SyncConfig(warm_start=WS)
    key = warm_start_key(load_config(), cfg.task_ops, WS, frozenset())
    assert key["torch"] == torch.__version__ and key["model"]["hidden_size"] == 128
    assert key["numerics"]["portable"] in (True, False)  # pinned CPU paths give other weights
    assert key_hash(key) != key_hash({**key, "task": "graph-walk"})


def test_the_cli_uses_the_shared_cache_unless_no_cache(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from rolloutlab.cli import main

    monkeypatch.setenv("ROLLOUTLAB_CACHE_DIR", str(tmp_path / "cache"))
    args = [
        "real",
        "sync",
        "--steps",
        "1",
        "--prompts",
        "1",
        "--controller",
        "static:2",
        "--warm-start-steps",
        "2",
        "--eval-size",
        "4",
        "--max-response-length",
        "16",
        "--quiet",
    ]
    sources = []
    for name, extra in (("a", []), ("b", []), ("c", ["--no-cache"])):
        res = CliRunner().invoke(main, [*args, "--out", str(tmp_path / name), *extra])
        assert res.exit_code == 0, res.output
        meta = json.loads((tmp_path / name / "warmstart" / "warmstart.json").read_text())
        sources.append(meta["source"])
    assert sources == ["trained", "cache", "trained"]
