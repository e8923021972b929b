"""Measure a timing grid (:mod:`real.engines.timing_grid`) on a GPU with vLLM (thin runner); the
fit of the cost model to what it measured is :mod:`calibration.fits.vllm_grid`.

The model is built from a ``config.json`` alone with ``load_format="dummy"`` (random
weights, nothing downloaded) and no tokenizer (``skip_tokenizer_init=True``; prompts are
random token ids). Engine arguments and the per-request stamps used are those of
:mod:`real.engines.vllm_engine` (vLLM 0.32.0); the decode and prefill times are
differences of the engine's own monotonic stamps (one clock), the call overhead a
difference of run-clock times (each stamp converted with its own anchor,
:mod:`real.engines.vllm_convert`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
from rolloutlab.real.engines.timing_grid import EngineLimits, GridSpec, plan_grid
from rolloutlab.real.engines.vllm_convert import read_anchor
from rolloutlab.sim.models.cost_grid import CellTiming, GridCell


def engine_limits(resolved: dict) -> EngineLimits:
    """:class:`EngineLimits` from :func:`real.engines.vllm_engine.resolved_engine_config`."""
    kv = resolved.get("kv_cache_size_tokens") or (
        resolved["num_gpu_blocks"] * resolved["block_size"]
    )
    return EngineLimits(
        max_num_seqs=int(resolved["max_num_seqs"]),
        max_model_len=int(resolved["max_model_len"]),
        kv_cache_tokens=int(kv),
        max_num_batched_tokens=int(resolved["max_num_batched_tokens"]),
    )


def _run_cell(llm, cell: GridCell, vocab: int, seed: int, clock: Callable[[], float]) -> CellTiming:
    """Run one cell on ``llm`` (a started ``vllm.LLM``): random distinct prompts of
    ``vocab`` ids, exactly ``response_tokens`` each. Raises RuntimeError when vLLM did not
    generate exactly that many tokens."""
    from vllm import SamplingParams

    rng = np.random.default_rng([seed, cell.running_seqs, cell.prompt_tokens])
    prompts = [
        {"prompt_token_ids": rng.integers(3, vocab, cell.prompt_tokens).tolist()}
        for _ in range(cell.running_seqs)
    ]  # distinct prompts: no prefix-cache hits
    sp = SamplingParams(
        n=1,
        max_tokens=cell.response_tokens,
        min_tokens=cell.response_tokens,
        ignore_eos=True,
        temperature=0.0,
        detokenize=False,
    )
    anchor = read_anchor(clock)
    outs = llm.generate(prompts, sp, use_tqdm=False)
    returned = clock()
    ms = [o.metrics for o in outs]
    lens = [len(o.outputs[0].token_ids) for o in outs]
    if any(n != cell.response_tokens for n in lens):
        raise RuntimeError(
            f"cell {cell}: got response lengths {sorted(set(lens))}, expected "
            f"{cell.response_tokens} (ignore_eos/min_tokens not honoured)"
        )
    per_req = [(m.last_token_ts - m.first_token_ts) / (cell.response_tokens - 1) for m in ms]
    prefill = max(m.first_token_ts for m in ms) - min(m.scheduled_ts for m in ms)
    span = anchor.from_mono(max(m.last_token_ts for m in ms)) - anchor.from_wall(
        min(m.arrival_time for m in ms)
    )
    return CellTiming(
        cell,
        decode_iter_s=float(np.median(per_req)),
        prefill_s=float(prefill),
        call_s=returned - anchor.run_s,
        span_s=float(span),
    )


def measure_grid(
    model_dir: str | Path,
    spec: GridSpec,
    dtype: str = "bfloat16",
    gpu_memory_utilization: float = 0.85,
    enforce_eager: bool = False,
    seed: int = 0,
    progress: Callable[[str], None] = print,
) -> tuple[list[CellTiming], dict, list]:
    """Start vLLM on ``model_dir/config.json`` (dummy weights), plan and run the grid.

    Returns ``(timings, resolved engine config, dropped cells with reasons)``; each
    timing is the median-decode run of ``spec.repeats`` runs. Raises: ValueError from
    :func:`plan_grid` when the engine fits too few cells.
    """
    from rolloutlab.real.engines.vllm_engine import VllmConfig, build_llm, resolved_engine_config

    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    max_len = min(
        int(cfg.get("max_position_embeddings", 4096)),
        max(spec.prompt_tokens) + spec.response_tokens,
    )
    batched = min(max(n * p for n in spec.running_seqs for p in spec.prompt_tokens), 1 << 17)
    vcfg = VllmConfig(
        dtype=dtype,
        gpu_memory_utilization=gpu_memory_utilization,
        enforce_eager=enforce_eager,
        enable_prefix_caching=False,
        seed=seed,
    )
    llm = build_llm(
        model_dir,
        vcfg,
        max_num_seqs=max(spec.running_seqs),
        max_model_len=max_len,
        load_format="dummy",
        extra={"max_num_batched_tokens": max(batched, max_len)},
    )
    resolved = resolved_engine_config(llm, vcfg)
    cells, dropped = plan_grid(spec, engine_limits(resolved))
    t0 = time.perf_counter()
    clock = lambda: time.perf_counter() - t0
    vocab = int(cfg["vocab_size"])
    _run_cell(
        llm, replace(cells[0], response_tokens=spec.response_tokens), vocab, seed + 1, clock
    )  # warm-up
    timings = []
    for cell in cells:
        runs = [_run_cell(llm, cell, vocab, seed + r, clock) for r in range(spec.repeats)]
        runs.sort(key=lambda t: t.decode_iter_s)
        timings.append(runs[len(runs) // 2])
        progress(
            f"n={cell.running_seqs:4d} P={cell.prompt_tokens:5d}: decode "
            f"{timings[-1].decode_iter_s * 1e3:.3f} ms/iter, prefill {timings[-1].prefill_s * 1e3:.2f} ms"
        )
    return timings, resolved, dropped
