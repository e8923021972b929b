"""Engine pause/resume and abort hooks (used by the asynchronous pipelines)."""

from __future__ import annotations

import numpy as np
import pytest
import simpy
from rolloutlab.sim.engine.core import Engine, EngineConfig
from rolloutlab.sim.models.cost import ConstantCost


def _engine(paged: bool):
    """One worker of 2 slots, 1 s iterations; ``paged``: the KV-cache worker (ample blocks)."""
    env = simpy.Environment()
    cfg = EngineConfig(n_workers=1, max_num_seqs=2, kv_blocks=64 if paged else None)
    return env, Engine(env, ConstantCost(iter_s=1.0), cfg)


both_workers = pytest.mark.parametrize("paged", [False, True], ids=["plain", "paged"])


@both_workers
def test_pause_shifts_running_requests_by_the_pause(paged):
    env, eng = _engine(paged)
    batch = eng.submit(np.array([0, 1]), np.zeros(2), np.array([10, 4]), on_finish=lambda *a: None)

    def pauser():
        yield env.timeout(2.5)
        yield eng.pause()  # stops at the boundary t = 3
        assert env.now == 3.0
        yield env.timeout(5.0)
        eng.resume()

    env.process(pauser())
    env.run(until=batch.done)
    assert batch.t_finish.tolist() == [15.0, 9.0]


@both_workers
def test_abort_records_tokens_so_far_and_frees_the_slot(paged):
    env, eng = _engine(paged)
    batch = eng.submit(
        np.array([0, 1, 2]), np.zeros(3), np.array([10, 10, 3]), on_finish=lambda *a: None
    )

    def aborter():
        yield env.timeout(3.5)
        eng.abort(batch, [0, 2])  # 0 running (4 tokens at the boundary t=4), 2 still queued

    env.process(aborter())
    env.run(until=batch.done)
    assert batch.aborted.tolist() == [True, False, True]
    assert batch.abort_tokens.tolist() == [4, 0, 0]
    assert batch.t_finish.tolist() == [4.0, 10.0, 4.0]
