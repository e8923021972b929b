"""The simulator's paged engine against vLLM's own scheduler, side by side.

Input: a measurement written by :func:`real.engines.vllm_sched_probe.measure` (per
setting: the pinned scheduler, the timing-grid batches and the compared run; the
bundled one is ``tests/data/vllm_sched/measured.json``). For each setting the same
requests go through :class:`sim.engine.paged_worker.PagedWorker` with the same limits
(:func:`engine_config`) twice:

- at one second per iteration (:func:`sim.models.cost.ConstantCost`), so that a request's
  first-token and finish times *are* the iteration numbers at which vLLM emitted them:
  per request, preemptions and those step numbers compare exactly; per run, iterations
  and preemptions;
- with the step cost fitted on the setting's timing grid
  (:func:`calibration.fits.vllm_steps.fit_step_cost`, a separate run from the compared one):
  makespan and per-request finish time (s: the sum of step times up to the step that
  finished it) against the measured ones (median absolute percentage error, MdAPE).

Beside it, the naive rules a user would apply to the same timing grid
(:func:`naive_rules`), which know no scheduler:

- ``constant``: every step costs the grid's median step time, and every request decodes
  from the first step without queueing or preemption, so request ``i`` finishes after
  ``L_i`` steps and the makespan is the longest response's;
- ``linear``: a straight line, by least squares, through the grid batches' (generated
  tokens, makespan) points, read at the run's generated tokens (makespan only).

Rules of vLLM 0.32 the mapping relies on: ``num_gpu_blocks_override`` blocks less vLLM's
null block hold KV (``vllm/v1/core/block_pool.py``, ``BlockPool.__init__``); a group mate
recomputes its prompt's partial block (``kv_cache_manager.py``,
``KVCacheManager.get_computed_blocks``: full blocks only), hence
``recompute_partial_block=True``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import simpy
from rolloutlab.calibration.fits.vllm_steps import fit_step_cost
from rolloutlab.sim.engine.core import Engine, EngineConfig
from rolloutlab.sim.engine.paged_worker import PagedWorker
from rolloutlab.sim.models.cost import ConstantCost, LinearCost

CLOCKS = {"cpu": "step_cpu_s", "wall": "step_s"}
"""Step-time columns of a measurement: the process's CPU time (the default: on a shared
machine the wall time also holds the time other processes had the cores, which neither
the timing grid nor the simulator can know) or the wall time."""
TARGETS = {"count_rel": 0.02, "time_mdape": 0.05}
"""The targets: iterations and preemptions within 2 %, makespan and finish MdAPE
within 5 %."""
COLUMNS = (
    "setting",
    "iterations_sim",
    "iterations_vllm",
    "preemptions_sim",
    "preemptions_vllm",
    "same_steps",
    "same_preemptions",
    "makespan_sim_s",
    "makespan_vllm_s",
    "makespan_err",
    "finish_mdape",
    "grid_step_mape",
    "makespan_constant_err",
    "finish_mdape_constant",
    "makespan_linear_err",
)
"""Columns of :func:`compare_measurement`'s rows (``same_*``: fraction of requests whose
first-token and finish steps / preemption counts equal vLLM's; ``*_constant*`` and
``*_linear*``: the naive rules of :func:`naive_rules`)."""


def load_measurement(path: str | Path) -> dict:
    """Read a probe measurement. Raises ValueError naming the file when it is not JSON or
    lacks ``vllm_version`` or ``settings``."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not a readable JSON measurement ({e})") from None
    if not isinstance(data, dict) or not {"vllm_version", "settings"} <= data.keys():
        raise ValueError(f"{path}: not a scheduler measurement (needs vllm_version, settings)")
    return data


def engine_config(setting: dict) -> EngineConfig:
    """The simulator's engine for one probe setting (a
    :class:`real.engines.vllm_sched_probe.SchedSetting` as a dict): one worker, the same
    slots, token budget, chunking, caching and block size, ``num_blocks - 1`` KV blocks
    (vLLM's null block), group mates recomputing their prompt's partial block."""
    return EngineConfig(
        n_workers=1,
        max_num_seqs=setting["max_num_seqs"],
        prefix_caching=setting["prefix_caching"],
        kv_blocks=setting["num_blocks"] - 1,
        block_size=setting["block_size"],
        max_num_batched_tokens=setting["max_num_batched_tokens"],
        chunked_prefill=setting["chunked_prefill"],
        recompute_partial_block=True,
    )


def simulate(requests: dict, config: EngineConfig, cost: LinearCost) -> dict:
    """Run ``requests`` (flat lists ``prompt_key, prompt_tokens, response_tokens``, all
    submitted at 0, in that order) on one paged worker. Returns ``(n,)`` arrays
    ``t_first, t_finish`` (s), ``preemptions`` and the ``iterations`` run."""
    env = simpy.Environment()
    engine = Engine(env, cost, config)
    batch = engine.submit(
        np.asarray(requests["prompt_key"]),
        np.asarray(requests["prompt_tokens"]),
        np.asarray(requests["response_tokens"]),
        exclusive=True,
    )
    env.run(until=batch.done)
    worker = engine.workers[0]
    if not isinstance(worker, PagedWorker):  # (kv_blocks is set: the engine builds paged ones)
        raise TypeError(f"scheduler comparison: a paged worker expected, got {type(worker)}")
    return {
        "t_first": batch.t_first_token.copy(),
        "t_finish": batch.t_finish.copy(),
        "preemptions": batch.preemptions.copy(),
        "iterations": int(worker.producing.K),  # (iterations run: sim.engine.kv_decode.DecodeSet)
    }


def compare_schedule(rec: dict) -> dict:
    """The scheduling columns of :data:`COLUMNS` (iterations, preemptions, same steps,
    same preemptions) for one setting's record ``rec`` (``setting`` and ``run``; its
    times are not read, so a schedule-only record will do)."""
    run, pr = rec["run"], rec["run"]["per_request"]
    steps = simulate(run["requests"], engine_config(rec["setting"]), ConstantCost(1.0))
    first, finish = np.asarray(pr["first_step"]), np.asarray(pr["finish_step"])
    same = (steps["t_first"] == first) & (steps["t_finish"] == finish)
    return {
        "iterations_sim": steps["iterations"],
        "iterations_vllm": len(run["steps"]["producing"]),
        "preemptions_sim": int(steps["preemptions"].sum()),
        "preemptions_vllm": int(np.sum(pr["preemptions"])),
        "same_steps": float(same.mean()),
        "same_preemptions": float((steps["preemptions"] == np.asarray(pr["preemptions"])).mean()),
    }


def compare_setting(name: str, rec: dict, clock: str = "step_cpu_s") -> dict:
    """One row of :data:`COLUMNS` for setting ``name``'s record ``rec`` (``setting``,
    ``grid``, ``run``): :func:`compare_schedule`, then the times with the cost fitted on
    the grid, plus ``cost`` (the fitted :class:`LinearCost` as a dict); times (fit and
    measured) from the steps' column ``clock`` (:data:`CLOCKS`)."""
    run = rec["run"]
    row = {"setting": name, **compare_schedule(rec)}
    cost, grid_mape = fit_step_cost(rec["grid"], clock)
    timed = simulate(run["requests"], engine_config(rec["setting"]), cost)
    t_end = np.cumsum(np.asarray(run["steps"][clock], dtype=float))
    t_fin = t_end[np.asarray(run["per_request"]["finish_step"]) - 1]  # (s: end of its step)
    mk_v, mk_s = float(t_end[-1]), float(np.max(timed["t_finish"]))
    naive = naive_rules(rec["grid"], np.asarray(run["requests"]["response_tokens"]), clock)
    return {
        **row,
        "makespan_sim_s": mk_s,
        "makespan_vllm_s": mk_v,
        "makespan_err": mk_s / mk_v - 1.0,
        "finish_mdape": float(np.median(np.abs(timed["t_finish"] / t_fin - 1.0))),
        "grid_step_mape": grid_mape,
        "makespan_constant_err": float(naive["makespan_constant_s"]) / mk_v - 1.0,
        "finish_mdape_constant": float(
            np.median(np.abs(np.asarray(naive["finish_constant_s"]) / t_fin - 1.0))
        ),
        "makespan_linear_err": float(naive["makespan_linear_s"]) / mk_v - 1.0,
        "cost": cost.to_dict(),
    }


def naive_rules(
    grid: list[dict], response_tokens: np.ndarray, clock: str = "step_cpu_s"
) -> dict[str, np.ndarray | float]:
    """The naive rules' predictions for a run of ``response_tokens`` (one per request)
    from the timing ``grid`` (probe batches, times from column ``clock``), see the module
    docstring: ``finish_constant_s`` (one per request), ``makespan_constant_s`` and
    ``makespan_linear_s`` (s). Raises ValueError with fewer than two grid batches or
    when the grid's batches all generate the same number of tokens (no line)."""
    tokens = np.array([float(np.sum(b["requests"]["response_tokens"])) for b in grid])
    spans = np.array([float(np.sum(b["steps"][clock])) for b in grid])
    if len(grid) < 2 or np.ptp(tokens) == 0:
        raise ValueError("naive_rules: need two grid batches of different generated tokens")
    step_s = float(np.median(np.concatenate([b["steps"][clock] for b in grid])))
    L = np.asarray(response_tokens, dtype=float)
    slope, intercept = np.polyfit(tokens, spans, 1)
    return {
        "finish_constant_s": L * step_s,
        "makespan_constant_s": float(L.max() * step_s),
        "makespan_linear_s": float(intercept + slope * L.sum()),
    }


def compare_measurement(data: dict, clock: str = "step_cpu_s") -> list[dict]:
    """:func:`compare_setting` for every setting of a measurement, in its order."""
    return [compare_setting(name, rec, clock) for name, rec in data["settings"].items()]


def within_targets(row: dict) -> dict[str, bool]:
    """Which of :data:`TARGETS` a row meets (counts relative to vLLM's)."""
    rel = TARGETS["count_rel"]
    return {
        "iterations": abs(row["iterations_sim"] - row["iterations_vllm"])
        <= rel * row["iterations_vllm"],
        "preemptions": abs(row["preemptions_sim"] - row["preemptions_vllm"])
        <= rel * max(row["preemptions_vllm"], 1),
        "makespan": abs(row["makespan_err"]) <= TARGETS["time_mdape"],
        "finish_mdape": row["finish_mdape"] <= TARGETS["time_mdape"],
    }


def markdown_table(rows: list[dict]) -> str:
    """The side-by-side table (Markdown): per setting iterations, preemptions, requests
    with vLLM's first-token/finish steps and preemptions, makespan, finish MdAPE, and the
    naive rules' makespan error and finish MdAPE."""
    head = (
        "| setting | iterations sim / vLLM | preemptions sim / vLLM | same steps | "
        "same preemptions | makespan sim / vLLM (s) | finish MdAPE | makespan error, "
        "constant / linear rule | finish MdAPE, constant rule |\n"
        "|---|---|---|---|---|---|---|---|---|\n"
    )
    body = "".join(
        f"| {r['setting']} | {r['iterations_sim']} / {r['iterations_vllm']} | "
        f"{r['preemptions_sim']} / {r['preemptions_vllm']} | {r['same_steps']:.0%} | "
        f"{r['same_preemptions']:.0%} | {r['makespan_sim_s']:.3f} / "
        f"{r['makespan_vllm_s']:.3f} ({r['makespan_err']:+.1%}) | {r['finish_mdape']:.1%} | "
        f"{r['makespan_constant_err']:+.1%} / {r['makespan_linear_err']:+.1%} | "
        f"{r['finish_mdape_constant']:.1%} |\n"
        for r in rows
    )
    return head + body
