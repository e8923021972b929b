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
