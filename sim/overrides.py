"""Command-line overrides of a loaded scenario: cluster size, roofline cost, length drift."""

from __future__ import annotations

import dataclasses

from sim.dynamics import servegen_lengths
from sim.roofline import roofline, roofline_cost
from sim.scenario import Scenario


def apply_overrides(sc: Scenario, *, workers: int | None = None, model: str | None = None,
                    gpu: str | None = None, tp: int = 1, kv_cache: bool = True,
                    engine: str = "simpy", drift: str | None = None) -> Scenario:
    """Return ``sc`` with the overrides applied.

    - ``workers``: generation workers (engine replicas);
    - ``model`` + ``gpu`` (+ ``tp``): roofline decode/prefill cost of that model on that
      accelerator (:mod:`sim.roofline`), keeping the scenario's learner and sync terms;
      with ``kv_cache`` and the SimPy engine, KV blocks from the GPU memory (preemption);
    - ``drift``: the ServeGen long-reasoning length model with that drift over steps
      (:mod:`sim.dynamics`), same cap.
    Raises ValueError when only one of ``model``/``gpu`` is given or a name is unknown.
    """
    if workers:
        sc = dataclasses.replace(sc, engine=dataclasses.replace(sc.engine, n_workers=workers))
    if bool(model) != bool(gpu):
        raise ValueError("--model and --gpu go together")
    if model:
        roof = roofline(model, gpu, tp=tp)
        kv = roof.kv_blocks() if kv_cache and engine == "simpy" else None
        sc = dataclasses.replace(sc, cost=roofline_cost(roof, base=sc.cost), engine=dataclasses.replace(
            sc.engine, kv_blocks=kv, block_size=roof.block_size))
    if drift:
        sc = dataclasses.replace(sc, lengths=servegen_lengths(
            drift, max_response_length=sc.lengths.max_response_length))
    return sc
