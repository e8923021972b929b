"""Second source: the simulator against AReaL's published step times
over GPU count.

AReaL's tutorial (docs/PAPERS.md §4, "Validation against AReaL"; inclusionAI/AReaL
``examples/README.md`` at commit 42afcdb5) states the single-step time of its PPO math
runs of DeepSeek-R1-Distill-Qwen-1.5B on 1, 4 and 16 nodes of 8 H800 (8, 32, 128 GPUs;
the 7B on 4 and 16 nodes),
B = 512 prompts x G = 16, and its configs (``examples/configs/1.5B-distill/
ppo-1.5B-distill-gpus-{8,32,128}.yaml``) the rest: synchronous PPO on disjoint GPU sets,
``allocation_mode = sglang.d{N/2}p1m1+d{N/4}p2m1`` (half the GPUs generate, one SGLang
replica per GPU; half train), ``max_new_tokens = 27648``, 4 PPO mini-batches, actor and
reference log-prob passes before the update. (AReaL v0.2, before its asynchronous mode.)

Each point is one SimPy run of the placement that ``rolloutlab sim --model
r1-distill-qwen-1.5b --gpu h800 --gpus N --split N/2:N/2 --pipeline sync --prompts 512
--controller static:16`` sets up (KV cache on), with what the CLI does not set: 4
optimizer updates per step in the learner's collectives and :func:`areal_lengths`. The
simulated step time is the mean over the steps after the first. Calibration: one factor on every time term, fitted on one
point; since every duration of the run scales by it, the prediction of point i is
``sim_i * pub_cal / sim_cal`` and its error measures the curve's shape only.

Prints a markdown table and writes it to OUT/table.md (docs/pipelines.md, "Validation
against AReaL").

Usage: python bench/areal_scaling_validation.py [--steps 6] [--seeds 0,1,2]
    [--lengths areal|longcot] [--icc 0.5] [--no-kv-cache] [--out runs/areal_validation]
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import numpy as np
from rolloutlab.sim.control.controllers import StaticG
from rolloutlab.sim.models.hardware import get_gpu, get_model
from rolloutlab.sim.models.lengths import LognormalLengths
from rolloutlab.sim.pipelines.registry import simulate as run_pipeline
from rolloutlab.sim.pipelines.spec import parse_pipeline
from rolloutlab.sim.pipelines.sync import RunConfig
from rolloutlab.sim.scenario.overrides import apply_overrides
from rolloutlab.sim.scenario.placement import apply_split, parse_split
from rolloutlab.sim.scenario.scenario import load_scenario
from scipy.optimize import brentq
from scipy.stats import norm

GPU, B, G, UPDATES = "h800", 512, 16, 4
"""AReaL's distill configs: accelerator, prompts per step, group size,
``ppo_n_minibatches``."""

CURVES: dict[str, tuple[str, int, list[tuple[int, float]]]] = {
    "1.5B": ("r1-distill-qwen-1.5b", 1, [(8, 3461.0), (32, 997.0), (128, 391.0)]),
    "7B": ("qwen2.5-7b", 0, [(32, 2275.0), (128, 815.0)]),
}
"""curve: (model, index of the default calibration point, [(GPUs, published
single-step time s)]): AReaL ``examples/README.md`` at commit 42afcdb5, table "Hardware
Requirements". DeepSeek-R1-Distill-Qwen-7B has the Qwen2.5-(Math-)7B architecture
(``qwen2.5-7b`` in :data:`sim.models.hardware.MODELS`)."""

CAP, MEAN, TRUNCATED, PROMPT = 27648, 7834.0, 0.1238, 108
"""Response cap (``max_new_tokens``), and from the tutorial's example log of a 16-node
run (same README; six logged steps' ``avg_seq_len - avg_prompt_len`` and
``no_eos_ratio``, averaged): mean response tokens, share cut at the cap, prompt tokens."""

ICC = 0.5
"""Share of the log-length variance between prompts (assumed: the log gives no group
statistics)."""


def areal_lengths(
    mean: float = MEAN, truncated: float = TRUNCATED, cap: int = CAP, icc: float = ICC
) -> LognormalLengths:
    """The capped lognormal with ``truncated`` of its draws at ``cap`` and mean ``mean``
    (tokens) after capping: ``P(X > cap) = 1 - Phi((ln cap - mu) / s)`` fixes ``mu`` given
    ``s``; ``E[min(X, cap)] = exp(mu + s^2/2) Phi((ln cap - mu - s^2) / s) + cap P(X > cap)``
    (the lognormal's partial expectation) fixes ``s``. ``s^2`` is split ``icc : 1 - icc``
    between prompts and within groups.

    Raises ValueError unless ``0 < truncated < 1``, ``0 < mean < cap``, ``0 <= icc <= 1``,
    or when no ``s`` in (0.01, 5) gives ``mean``."""
    if not (0 < truncated < 1 and 0 < mean < cap and 0 <= icc <= 1):
        raise ValueError("need 0 < truncated < 1, 0 < mean < cap, 0 <= icc <= 1")
    z = norm.ppf(1 - truncated)

    def gap(s: float) -> float:
        mu = np.log(cap) - z * s
        body = np.exp(mu + s * s / 2) * norm.cdf((np.log(cap) - mu - s * s) / s)
        return body + cap * truncated - mean

    try:
        s = brentq(gap, 0.01, 5.0)
    except ValueError:
        raise ValueError(f"no lognormal spread gives mean {mean} with {truncated} cut") from None
    return LognormalLengths(
        float(np.log(cap) - z * s), float(s * np.sqrt(icc)), float(s * np.sqrt(1 - icc)), cap
    )


KV_CACHE = True
"""KV blocks from GPU memory (``--no-kv-cache`` turns the model off)."""

LENGTHS = "areal"
"""Length model (``--lengths``): ``areal``, :func:`areal_lengths`; or ``longcot``, the
bundled scenario's (DeepSeek-R1 ServeGen, mean 1,527 tokens)."""


def simulate(
    model: str,
    gpus: int,
    steps: int,
    seed: int,
    *,
    prompts: int = B,
    group: int = G,
    updates: int = UPDATES,
    tp: int = 1,
    cap: int = CAP,
) -> float:
    """Simulated steady-state seconds per step of ``model`` on ``gpus`` H800, half
    generating (replicas of ``tp`` GPUs), half training: the mean of steps 2..``steps``.
    The defaults are AReaL v0.2's distill configs; ``prompts`` x ``group`` rollouts a
    step, ``updates`` PPO mini-batches, ``cap`` the response cap of :func:`areal_lengths`.

    Raises ValueError as :func:`sim.scenario.placement.apply_split` (e.g. ``gpus`` odd, or
    ``tp`` not dividing ``gpus / 2``) and :func:`areal_lengths`."""
    sc = apply_overrides(load_scenario("longcot"), model=model, gpu=GPU, tp=tp, kv_cache=KV_CACHE)
    if LENGTHS == "areal":
        sc = dataclasses.replace(sc, lengths=areal_lengths(cap=cap, icc=ICC), prompt_tokens=PROMPT)
    rng = np.random.default_rng(seed)
    tokens = float(
        sc.lengths.sample(rng, prompts, group, 0).sum() + prompts * group * sc.prompt_tokens
    )
    half = gpus // 2
    sc = apply_split(
        sc,
        parse_split(gpus, f"{half}:{half}", tp),
        get_model(model),
        get_gpu(GPU),
        updates=updates,
        tokens_at=tokens,
    )
    cfg = RunConfig(steps=steps, prompts=prompts, seed=seed)
    done = run_pipeline(sc, StaticG(group), cfg, parse_pipeline("sync")).steps.sort("step")
    ends = done["t_end"].to_list()
    return (ends[-1] - ends[0]) / (steps - 1)


def errors(sims: list[float], pubs: list[float], cal: int) -> list[float]:
    """Relative error of each point after one time scale fitted on point ``cal``:
    ``sims[i] * pubs[cal] / sims[cal] / pubs[i] - 1`` (0 at ``cal``).

    Shapes: two equal-length lists of positive seconds. Raises ValueError otherwise."""
    if len(sims) != len(pubs) or not 0 <= cal < len(sims):
        raise ValueError(f"need equal lengths and 0 <= cal < {len(sims)}, got {cal}")
    if min(sims + pubs) <= 0:
        raise ValueError("step times must be > 0")
    return [s * pubs[cal] / sims[cal] / p - 1 for s, p in zip(sims, pubs)]


def curve_rows(name: str, steps: int, seeds: list[int]) -> list[str]:
    """Markdown rows of one curve of :data:`CURVES`: published and simulated step time
    (mean over ``seeds``, their range in brackets when several), the error after
    calibrating on the curve's default point, and after calibrating on each point."""
    model, cal, points = CURVES[name]
    runs = [[simulate(model, n, steps, sd) for sd in seeds] for n, _ in points]
    sims = [sum(r) / len(r) for r in runs]
    pubs = [p for _, p in points]
    errs = [errors(sims, pubs, c) for c in range(len(points))]
    rows = []
    for i, (n, pub) in enumerate(points):
        spread = f" ({min(runs[i]):.0f}-{max(runs[i]):.0f})" if len(seeds) > 1 else ""
        each = " / ".join(f"{100 * e[i]:+.1f}" for e in errs)
        mark = " (calibration)" if i == cal else ""
        rows.append(
            f"| {name} | {n} ({n // 2}:{n // 2}) | {pub:.0f} | {sims[i]:.0f}{spread} "
            f"| {100 * errs[cal][i]:+.1f} %{mark} | {each} |"
        )
    return rows


def main() -> None:
    global LENGTHS, ICC, KV_CACHE
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=6, help="learner steps per run (>= 2)")
    ap.add_argument("--seeds", default="0", help="comma-separated seeds (mean over them)")
    ap.add_argument("--out", default="runs/areal_validation", help="folder of table.md")
    ap.add_argument("--lengths", choices=("areal", "longcot"), default=LENGTHS)
    ap.add_argument("--icc", type=float, default=ICC, help="between-prompt share of log variance")
    ap.add_argument("--no-kv-cache", action="store_true", help="no KV cache model")
    args = ap.parse_args()
    if not 0 <= args.icc <= 1:
        ap.error(f"--icc: need 0 <= icc <= 1, got {args.icc}")
    LENGTHS, ICC, KV_CACHE = args.lengths, args.icc, not args.no_kv_cache
    if args.steps < 2:
        ap.error("--steps: need >= 2 (the first step is warm-up)")
    try:
        seeds = [int(x) for x in args.seeds.split(",")]
    except ValueError:
        ap.error(f"--seeds: need comma-separated integers, got {args.seeds!r}")
    lines = [
        "| curve | GPUs (rollout:trainer) | published s/step | simulated s/step "
        "| error, calibrated on the default point | error %, calibrated on each point |",
        "|---|---|---|---|---|---|",
    ]
    for name in CURVES:
        lines += curve_rows(name, args.steps, seeds)
    out = Path(args.out) / "table.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print(out.read_text(), end="")


if __name__ == "__main__":
    main()
