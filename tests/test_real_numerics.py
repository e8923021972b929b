"""Portable CPU numerics: set before torch loads, refused after, recorded per run."""

import pytest
from rolloutlab.real.policy import numerics


def test_portable_numerics_are_refused_once_torch_is_loaded_with_other_settings(monkeypatch):
    import torch  # noqa: F401  (loaded, as in any test process that ran a model)

    monkeypatch.delenv("MKL_CBWR", raising=False)
    with pytest.raises(numerics.NumericsError, match="MKL_CBWR=COMPATIBLE"):
        numerics.use_portable_numerics()


def test_already_pinned_environment_is_accepted_and_described(monkeypatch):
    for k, v in numerics.PORTABLE_ENV.items():
        monkeypatch.setenv(k, v)
    numerics.use_portable_numerics()  # nothing to change: no error
    d = numerics.describe()
    assert d["portable"] is True and d["MKL_CBWR"] == "COMPATIBLE"
    assert {"torch", "cpu_capability", "torch_threads", "cpu"} <= d.keys()


def test_a_warm_start_is_shared_only_between_machines_of_one_cpu_model(monkeypatch):
    """Two AVX-512 machines of two vendors train different warm starts, with default
    numerics (held-out start 0.555 on an Intel Xeon, 0.508 on an AMD EPYC) and with
    portable ones (0.547 against 0.484; docs/real_task.md): their cache keys differ."""
    from rolloutlab.real.policy import warmstart
    from rolloutlab.real.policy.model import LlamaConfig
    from rolloutlab.real.rundir.config import SyncConfig

    cfg = SyncConfig()
    ops = cfg.task_ops

    def key(cpu: str, portable: bool) -> dict:
        desc = {"cpu_capability": "AVX512", "portable": portable, "cpu": cpu}
        monkeypatch.setattr(warmstart, "describe_numerics", lambda: desc)
        return warmstart.warm_start_key(LlamaConfig(), ops, cfg.warm_start, frozenset())

    intel, amd = "Intel(R) Xeon(R) Processor", "AMD EPYC 7B13"
    assert key(intel, False) != key(amd, False)
    assert key(intel, True) != key(amd, True)
    assert key(intel, True) != key(intel, False)
