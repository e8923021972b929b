"""ServeGen pooling and the bundled long-reasoning scenario."""

from __future__ import annotations

import json

import numpy as np
import pytest
from rolloutlab.calibration.scenarios.servegen import (
    ServeGenError,
    pmf_quantiles,
    pooled_output_pmf,
)
from rolloutlab.sim.scenario.scenario import load_scenario


def _client(folder, i, pmf_text, rate):
    (folder / f"chunk-{i}-dataset.json").write_text(
        json.dumps(
            {
                "0": {
                    "input_tokens": "{10: 1.0}",
                    "output_tokens": pmf_text,
                    "reason_ratio": "{0.5: 1.0}",
                }
            }
        )
    )
    (folder / f"chunk-{i}-trace.csv").write_text(f"0,{rate},1,Gamma,1,1\n600,{rate},1,Gamma,1,1\n")


def test_pooled_pmf_weights_clients_by_requests(tmp_path):
    _client(tmp_path, 0, "{100: 1.0}", 3.0)
    _client(tmp_path, 1, "{1000: 0.5, 2000: 0.5}", 1.0)
    tokens, prob, files = pooled_output_pmf(tmp_path)
    assert tokens.tolist() == [100, 1000, 2000] and len(files) == 4
    np.testing.assert_allclose(prob, [0.75, 0.125, 0.125])
    np.testing.assert_array_equal(pmf_quantiles(tokens, prob, 8), [100] * 6 + [1000, 2000])


def test_bad_pmf_names_file_and_field(tmp_path):
    _client(tmp_path, 0, "{100: __import__('os')}", 1.0)
    with pytest.raises(ServeGenError, match=r"chunk-0-dataset.json: field 0.output_tokens"):
        pooled_output_pmf(tmp_path)


def test_bundled_longcot_is_long_tailed():
    sc = load_scenario("longcot")
    L = sc.lengths.sample(np.random.default_rng(0), 64, 16)
    assert np.median(L) > 400 and L.max() > 10 * np.median(L)
    assert sc.source["provenance"]["kind"] == "servegen"


def test_longcot_default_shows_sagc_beating_static_16():
    """The issue's "scenario the default must show", on the bundled default's own defaults."""
    from rolloutlab.sim.control.controllers import SAGC, StaticG
    from rolloutlab.sim.pipelines.sync import RunConfig, run_sync
    from rolloutlab.sim.trace.metrics import run_summary

    sc = load_scenario("longcot")
    d = sc.defaults
    cfg = RunConfig(steps=d["steps"], prompts=d["prompts"], seed=0)
    res = {}
    for name, c in [
        ("static:16", StaticG(16)),
        ("sagc", SAGC(tau=d["tau"], delta=d.get("delta", 0.3), seed=0)),
    ]:
        res[name] = run_summary(*run_sync(sc, c, cfg), tau=d["tau"])
    assert res["sagc"]["straggler_rate"] < res["static:16"]["straggler_rate"]
    assert res["sagc"]["wall_clock_s"] < res["static:16"]["wall_clock_s"]
    assert res["sagc"]["mean_G"] > 4
