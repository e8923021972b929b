"""The vLLM engine's CPU-side parts: selection, the missing-vllm error, request parameters,
the worker extension, and the CLI wiring."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from rolloutlab.real.engines.factory import EngineUnavailable, check_engine, engine_factory
from rolloutlab.real.engines.sampling import SamplingParams
from rolloutlab.real.engines.vllm_engine import VllmConfig, sampling_params_kwargs, vllm_available
from rolloutlab.real.engines.vllm_worker import WeightSyncExtension

from rolloutlab.cli import main

no_vllm = pytest.mark.skipif(vllm_available(), reason="vllm is installed here")


@no_vllm
def test_vllm_engine_without_vllm_says_what_to_install():
    with pytest.raises(EngineUnavailable, match=r"pip install 'rolloutlab\[gpu\]'.*vllm==0.24.0"):
        check_engine("vllm")
    with pytest.raises(EngineUnavailable):
        engine_factory("vllm")


@no_vllm
def test_cli_engine_vllm_fails_cleanly_and_writes_nothing(tmp_path):
    out = tmp_path / "run"
    res = CliRunner().invoke(
        main, ["real", "sync", "--engine", "vllm", "--steps", "1", "--out", str(out), "--quiet"]
    )
    assert res.exit_code == 1
    assert "the 'vllm' package is not installed" in res.output and "Traceback" not in res.output
    assert not out.exists()


@no_vllm
def test_cli_vllm_grid_without_vllm_fails_cleanly(tmp_path):
    res = CliRunner().invoke(
        main,
        [
            "calibrate",
            "vllm-grid",
            "--model",
            "calibration/data/qwen2.5-3b",
            "--out",
            str(tmp_path / "c.json"),
        ],
    )
    assert (
        res.exit_code == 1 and "not installed" in res.output and not (tmp_path / "c.json").exists()
    )


def test_engine_choice_is_validated():
    with pytest.raises(ValueError, match="engine must be one of"):
        check_engine("tgi")
    with pytest.raises(ValueError, match="batches continuously"):
        check_engine("vllm", "static")
    assert callable(engine_factory("torch", "static"))


def test_sampling_params_are_one_sample_per_request_with_its_seed():
    kw = sampling_params_kwargs(
        SamplingParams(temperature=0.7, top_p=0.9, max_response_tokens=40), seed=123
    )
    assert kw == {
        "n": 1,
        "seed": 123,
        "logprobs": 0,
        "max_tokens": 40,
        "temperature": 0.7,
        "top_p": 0.9,
        "stop_token_ids": [2],
        "detokenize": False,
    }
    greedy = sampling_params_kwargs(SamplingParams(temperature=0.0, top_p=0.5), seed=1)
    assert greedy["temperature"] == 0.0 and greedy["top_p"] == 1.0


def test_vllm_config_is_frozen_with_documented_defaults():
    cfg = VllmConfig()
    with pytest.raises(Exception):
        cfg.dtype = "bfloat16"  # type: ignore[misc]
    assert cfg.enable_prefix_caching and cfg.in_process and cfg.dtype == "float32"


def test_worker_extension_loads_hf_named_weights_into_the_model():
    torch = pytest.importorskip("torch")
    from rolloutlab.real.policy.model import build_model, load_config

    src, dst = build_model(load_config(), seed=1), build_model(load_config(), seed=2)

    class FakeModel:  # vLLM's model: load_weights(weights) of (hf_name, tensor) pairs
        def load_weights(self, weights):
            dst.load_state_dict(dict(weights), strict=True)

        def parameters(self):
            return dst.parameters()

    class FakeWorker(WeightSyncExtension):
        model_runner = type("R", (), {"model": FakeModel()})()

    w = FakeWorker()
    assert w.rolloutlab_load_weights(list(src.state_dict().items())) == len(src.state_dict())
    assert all(
        torch.equal(a, b) for a, b in zip(src.state_dict().values(), dst.state_dict().values())
    )
    assert w.rolloutlab_weight_checksum() == pytest.approx(
        sum(float(p.detach().double().sum()) for p in src.parameters())
    )


def test_sync_config_records_the_engine(tmp_path):
    from rolloutlab.real.rundir.config import ConfigError, SyncConfig

    assert SyncConfig(engine="vllm").to_dict()["engine"] == "vllm"
    assert (
        SyncConfig.from_dict(
            {k: v for k, v in SyncConfig().to_dict().items() if k != "engine"}
        ).engine
        == "torch"
    )
    with pytest.raises(ConfigError, match="engine must be"):
        SyncConfig(engine="tgi")
    json.dumps(SyncConfig().to_dict())
