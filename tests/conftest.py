"""Shared fixtures: small scenarios with hand-computable costs."""

from __future__ import annotations

import copy
import json
import os

import pytest
from hypothesis import settings
from rolloutlab.sim.engine.core import EngineConfig
from rolloutlab.sim.models.cost import ConstantCost, LinearCost
from rolloutlab.sim.models.lengths import LognormalLengths
from rolloutlab.sim.scenario.scenario import FORMAT, VERSION, Scenario

# CI (and `make test`) draws the same hypothesis examples on every run, so a result does not
# depend on the day; `HYPOTHESIS_PROFILE=explore` draws fresh ones to hunt for new failures.
settings.register_profile("ci", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


SERIAL = (
    "tests/test_grid_executor.py",  # Ray
    "tests/test_report_pages.py",  # Chromium
    "tests/test_smollm2_model.py",  # the SmolLM2 conversion, then vLLM
    "tests/test_vllm_engine_run.py",
    "tests/test_vllm_prompt_split.py",
    "tests/test_vllm_real_run.py",
    "tests/test_sched_compare.py::test_live_vllm_schedules_as_the_simulator",
)
"""The test modules (or single tests) that start vLLM, Ray, Chromium or the SmolLM2
conversion. `make test` runs two xdist workers with ``--dist loadfile``: every module runs
whole on one worker (its module fixtures built once, its tests in file order), and these
all on one worker, so that two never run at once (memory, and the engine starts' CPU)."""


def _scope(nodeid: str) -> str:
    """The work unit of a test under ``--dist loadfile``: its module, or "serial"."""
    module = nodeid.split("::")[0]
    return "serial" if module in SERIAL or nodeid.split("[")[0] in SERIAL else module


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """xdist's loadfile scheduling with :data:`SERIAL` as one unit. (Why not
    ``xdist_group`` marks: pytest-xdist 3.8 groups by renaming ``item._nodeid``, which
    pytest 9.2 no longer reads, so the marks are silently ignored.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SerialLoadFile(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _scope(nodeid)

    return SerialLoadFile(config, log)


@pytest.fixture
def tiny_scenario() -> Scenario:
    """Short lognormal lengths, 2 workers, constant 10 ms iterations."""
    return Scenario(
        name="tiny",
        lengths=LognormalLengths(
            mu=3.0, sigma_prompt=0.4, sigma_within=0.6, max_response_length=200
        ),
        prompt_tokens=16,
        cost=ConstantCost(iter_s=0.01, learner_s=0.5, sync_s=0.1),
        engine=EngineConfig(n_workers=2, max_num_seqs=16),
        defaults={"prompts": 4, "steps": 5, "tau": 3.0},
    )


def calibration_dict(**overrides) -> dict:
    """A valid calibration-file dict for a tiny scenario (CLI tests)."""
    d = {
        "format": FORMAT,
        "version": VERSION,
        "name": "tiny-file",
        "lengths": {
            "kind": "lognormal",
            "mu": 3.0,
            "sigma_prompt": 0.4,
            "sigma_within": 0.6,
            "max_response_length": 200,
        },
        "prompt_tokens": 16,
        "cost": LinearCost(a_s=0.01, b_s=1e-4, c_s=1e-7, learner_const_s=0.5, sync_s=0.1).to_dict(),
        "engine": {"n_workers": 2, "max_num_seqs": 16},
        "defaults": {"prompts": 4, "steps": 6, "tau": 3.0},
    }
    d.update(overrides)
    return d


@pytest.fixture
def calibration_file(tmp_path):
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(calibration_dict()))
    return path


@pytest.fixture(autouse=True)
def _private_warm_start_cache(tmp_path_factory, monkeypatch):
    """Real runs started by a test use a fresh shared warm-start cache, never ~/.cache."""
    monkeypatch.setenv("ROLLOUTLAB_CACHE_DIR", str(tmp_path_factory.mktemp("warmstart-cache")))


@pytest.fixture(scope="session")
def _model_cache_root(tmp_path_factory):
    """This session's model cache (SmolLM2 is converted into it at most once)."""
    return tmp_path_factory.mktemp("model-cache")


@pytest.fixture(autouse=True)
def _private_model_cache(_model_cache_root, monkeypatch):
    """Real runs and tasks started by a test convert SmolLM2 into the session's cache,
    never into ~/.cache."""
    monkeypatch.setenv("ROLLOUTLAB_MODEL_DIR", str(_model_cache_root))


@pytest.fixture(scope="session")
def smollm2_dir(_model_cache_root):
    """SmolLM2-135M-Instruct converted once per session (tests/test_smollm2_model.py says
    how long it takes); the wheel is installed by ``make venv``, so this never skips."""
    from rolloutlab.real.policy import smollm2

    return smollm2.ensure_model("float32", _model_cache_root)


_LEARNING_FITS: dict[tuple, dict] = {}


def _curve_key(curve) -> tuple:
    """A RunCurve's content (its arrays' bytes), so that equal runs share one entry."""
    return (
        curve.G.tobytes(),
        curve.lr.tobytes(),
        tuple(c.tobytes() for c in curve.counts),
        curve.dynamic_sampling,
    )


def _memoized(fit):
    def cached(curves, *args, **kwargs):
        listed = [curves] if hasattr(curves, "counts") else list(curves)
        key = (
            fit.__name__,
            tuple(_curve_key(c) for c in listed),
            args,
            tuple(sorted(kwargs.items())),
        )
        if key not in _LEARNING_FITS:
            _LEARNING_FITS[key] = fit(curves, *args, **kwargs)
        return copy.deepcopy(_LEARNING_FITS[key])

    return cached


@pytest.fixture
def memoized_learning_fits(monkeypatch):
    """`compare learning` fits its law once per distinct set of fit runs in this session.

    The fit (maximum likelihood over every group's count, then a numerical Hessian) is
    deterministic in its runs' counts, lr and G, and takes several CPU seconds; tests
    that write the same synthetic runs and call `compare_learning` or the CLI several
    times (to check the cost model, refusals, the written files) get the first call's
    result again. Every distinct input is still fitted for real, once."""
    from rolloutlab.analysis.learning import compare

    monkeypatch.setattr(compare, "fit_learning", _memoized(compare.fit_learning))
    monkeypatch.setattr(compare, "fit_noise_law", _memoized(compare.fit_noise_law))
