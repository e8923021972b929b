"""Command-line overrides of a loaded scenario: cluster size, roofline cost, length drift."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from rolloutlab.sim.engine.dispatch import is_held
from rolloutlab.sim.engine.speculative import SpeculativeDecoding
from rolloutlab.sim.models.dynamics import servegen_lengths
from rolloutlab.sim.models.roofline import roofline, roofline_cost
from rolloutlab.sim.scenario.scenario import Scenario


def apply_overrides(
    sc: Scenario,
    *,
    workers: int | None = None,
    model: str | None = None,
    gpu: str | None = None,
    tp: int = 1,
    kv_cache: bool | None = None,
    engine: str = "simpy",
    drift: str | None = None,
    dispatch: str | None = None,
    sandboxes: int | None = None,
    decode_batch: int = 0,
) -> Scenario:
    """Return ``sc`` with the overrides applied.

    - ``workers``: generation workers (engine replicas);
    - ``model`` + ``gpu`` (+ ``tp``): roofline decode/prefill cost of that model on that
      accelerator (:mod:`sim.models.roofline`), keeping the scenario's learner and sync terms;
      ``kv_cache`` (default on with the SimPy engine): KV blocks from the share
      ``engine.gpu_memory_utilization`` of the GPU memory (preemption); ``decode_batch``:
      the running sequences at which a mixture of experts' expert reads are linearised
      (:class:`sim.models.roofline.RooflineConfig`; 0: every expert every iteration);
    - ``drift``: the ServeGen long-reasoning length model with that drift over steps
      (:mod:`sim.models.dynamics`), same cap;
    - ``dispatch``: the engine's dispatch rule (:mod:`sim.engine.dispatch`; default: the
      scenario's);
    - ``sandboxes``: tool calls running at once of a ``multi_turn`` scenario
      (:mod:`sim.models.turns`).
    Raises ValueError for ``sandboxes`` without a ``multi_turn`` block, when only one of ``model``/``gpu`` is given, a name is unknown,
    ``tp`` or ``kv_cache=True`` comes without a model, or the fast path (no KV cache
    model) would silently drop KV pressure: with ``engine="fast"`` and a model,
    ``kv_cache`` must be ``False`` (why: the numbers differ from the SimPy engine's);
    also for an unknown ``dispatch`` and for ``shared`` / ``deferred:T`` with
    ``engine="fast"`` (the fast path assigns workers at submit).
    """
    if sandboxes is not None:
        if sc.multi_turn is None:
            raise ValueError(f"--sandboxes: scenario {sc.name} has no multi_turn block")
        sc = dataclasses.replace(
            sc, multi_turn=dataclasses.replace(sc.multi_turn, sandboxes=sandboxes)
        )
    if dispatch is not None:
        if engine == "fast" and is_held(dispatch):
            raise ValueError(
                f"--dispatch {dispatch}: the fast path assigns workers at submit; "
                "shared and deferred:T need --engine simpy"
            )
        sc = dataclasses.replace(sc, engine=dataclasses.replace(sc.engine, dispatch=dispatch))
    if workers:
        sc = dataclasses.replace(sc, engine=dataclasses.replace(sc.engine, n_workers=workers))
    if bool(model) != bool(gpu):
        raise ValueError("--model and --gpu go together")
    if not model and tp != 1:
        raise ValueError("--tp needs --model and --gpu (it sets one worker's roofline cost)")
    if not model and kv_cache:
        raise ValueError("--kv-cache needs --model and --gpu (KV blocks follow from them)")
    if model and gpu:
        if engine == "fast" and kv_cache is not False:
            raise ValueError(
                "--engine fast has no KV cache model: add --no-kv-cache to simulate "
                "without KV pressure, or use --engine simpy"
            )
        roof = roofline(
            model,
            gpu,
            tp=tp,
            gpu_memory_utilization=sc.engine.gpu_memory_utilization,
            decode_batch=decode_batch,
        )
        kv = roof.kv_blocks() if engine == "simpy" and kv_cache is not False else None
        sc = dataclasses.replace(
            sc,
            cost=roofline_cost(roof, base=sc.cost),
            engine=dataclasses.replace(sc.engine, kv_blocks=kv, block_size=roof.block_size),
        )
    if drift:
        sc = dataclasses.replace(
            sc, lengths=servegen_lengths(drift, max_response_length=sc.lengths.max_response_length)
        )
    return sc


def with_speculative(
    sc: Scenario, speculative: SpeculativeDecoding, pipelines: Sequence
) -> Scenario:
    """``sc`` with speculative decoding on every worker (:mod:`sim.engine.speculative`).

    Raises ValueError when a pipeline is not synchronous (the speculating worker times one
    step's share at a time) or the engine cannot speculate (KV blocks, token budget,
    shared/deferred dispatch, a tail threshold above ``max_num_seqs``:
    :class:`sim.engine.config.EngineConfig`)."""
    bad = [p.spec for p in pipelines if p.kind != "sync"]
    if bad:
        raise ValueError(
            f"--speculative: speculative decoding is modelled for sync pipelines only, not {bad}"
        )
    try:
        return dataclasses.replace(
            sc, engine=dataclasses.replace(sc.engine, speculative=speculative)
        )
    except ValueError as exc:
        raise ValueError(f"--speculative: {exc}") from None
