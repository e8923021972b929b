"""The simulator against verl fully-async's published step times.

Two published curves (docs/PAPERS.md, "verl fully-async recipe"; Qwen2.5-Math-7B on H20,
DAPO, n = 16, 28K max response, rollout TP 4, ``require_batches = 4`` x
``ppo_mini_batch_size = 32`` prompts per local update, ``trigger_parameter_sync_step =
4``, so one published "step" is 4 local updates of 128 prompts = 512 prompts):

* ``gpus``: trainer:rollout GPUs 16:16, 32:32, 64:64 at ``staleness_threshold = 0.5``,
  ``partial_rollout = True``;
* ``staleness``: 64:64 at ``staleness_threshold`` 0, 0.1, 0.3, 0.5 (0 is the stream
  off-policy pipeline, no partial rollout).

Each point is one SimPy run in this process of what ``rolloutlab sim --model qwen2.5-7b
--gpu h20 --tp 4 --no-kv-cache --gpus 2R --split R:R`` sets up, with the learner priced as
that recipe runs it (``timing_s/update_actor`` only: rollout log-probs, no KL; 4 optimizer
updates per local update; collectives per token-budget micro-batch over hybrid-sharded
FSDP, :data:`RECIPE_BATCHING`), B = 128, G = 16, at most verl's 16 prompts per rollout
server generating (:func:`verl_concurrency`), ``async:S:threshold=F:sync_every=4`` with
``sync=abort`` (partial rollout) or ``drain`` (F = 0), ``S = ceil(2 (1 + F) 4)`` as
docs/verl_config.md maps verl. The simulated step time is the steady-state time per weight
version (4 learner steps): (end of the last step - end of the first version) / (versions -
1). Calibration on one point of a curve (:func:`calibrate`): the learner terms scaled to
its published ``update_actor`` time, then the generation terms to its published step
time; every point is then simulated with those two scales and compared with the published
time (relative error). The scales absorb what the roofline and the length model get wrong
in absolute terms; the curve's shape is the simulator's. A second error compares the
shape with each run's first 100 steps (:data:`FIRST_100`).

Beside the simulator, the naive rules calibrated on the same point
(:func:`naive_errors`, :mod:`calibration.validation.gpu_scaling`): ``constant`` (the
calibration point's step time everywhere) and ``tokens per GPU`` (step time proportional
to tokens per trainer GPU, ``t_c N_c / N``; on the staleness curve, one GPU count, it is
the constant), against the published means and against the first 100 steps.
``--baselines-only`` prints those alone, without simulating.

Prints a markdown table and writes it to OUT/table.md (docs/pipelines.md, "Validation
against verl fully-async").

Usage: python bench/verl_async_validation.py [--versions 5] [--seeds 0,1,2]
    [--calibrations default|all] [--calibrate-on POINT]
    [--dp-imbalance off|contiguous|balanced|verl] [--sp 4] [--batching verl|off]
    [--concurrency verl|b] [--iter-overhead-ms MS]
    [--curves gpus,staleness] [--baselines-only] [--out runs/verl_validation]
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from pathlib import Path

import numpy as np
from rolloutlab.calibration.validation.gpu_scaling import RULES, Point, predict
from rolloutlab.sim.control.controllers import StaticG
from rolloutlab.sim.models.dp_imbalance import Imbalance
from rolloutlab.sim.models.hardware import get_gpu, get_model
from rolloutlab.sim.models.micro_batching import DynamicBatch
from rolloutlab.sim.models.roofline import roofline, roofline_cost
from rolloutlab.sim.pipelines.registry import simulate as run_pipeline
from rolloutlab.sim.pipelines.spec import parse_pipeline
from rolloutlab.sim.pipelines.sync import RunConfig
from rolloutlab.sim.scenario.overrides import apply_overrides
from rolloutlab.sim.scenario.placement import apply_split, parse_split
from rolloutlab.sim.scenario.scenario import Scenario, load_scenario

K, B, G, TP, MINI = 4, 128, 16, 4, 32
"""verl's trigger_parameter_sync_step, prompts per local update, n, rollout TP,
ppo_mini_batch_size."""
BISECTIONS = 10
"""Halvings of the log2 generation-scale bracket [-6, 6] (final width 0.012)."""

CURVES: dict[str, tuple[int, list[tuple[str, int, float, float, float]]]] = {
    # calibration index, [(label, rollout GPUs = trainer GPUs, staleness_threshold,
    #                      published s/step, published update_actor s)]; 16:16's
    # update_actor as published before verl's table swapped it with colocated 32's
    # (calibration/data/SOURCE.md, verl_phase_tables.csv)
    "gpus": (1, [
        ("16:16", 16, 0.5, 294.77, 269.80),
        ("32:32", 32, 0.5, 189.26, 156.98),
        ("64:64", 64, 0.5, 150.63, 113.16),
    ]),
    "staleness": (0, [
        ("0", 64, 0.0, 231.34, 98.77),
        ("0.1", 64, 0.1, 171.30, 109.12),
        ("0.3", 64, 0.3, 146.11, 103.22),
        ("0.5", 64, 0.5, 150.63, 113.16),
    ]),
}  # fmt: skip
"""verl recipe/fully_async_policy/README.md (commit 19997f9e), tables "Asynchronous
Training on 7B Model" (fully_async_policy rows) and "128-card Stale Ablation"."""


FIRST_100: dict[str, list[float]] = {
    "gpus": [7 * 3600 + 58 * 60, 4 * 3600 + 57 * 60, 3 * 3600 + 13 * 60],
    "staleness": [4 * 3600 + 25 * 60, 3 * 3600 + 53 * 60, 3 * 3600 + 18 * 60, 3 * 3600 + 13 * 60],
}
"""Published wall clock of the first 100 steps, seconds, in the order of :data:`CURVES`
(the same README tables, column "total time 100 step"). The runs' step time drifts as
their responses grow (the 64:64 run: 115.8 s a step over steps 1-100, 233.4 s over
301-400), differently in each run; the first 100 steps, from the same checkpoint, are
where the runs' lengths differ least. Shape error of a point against them:
``(sim / sim_cal) / (pub / pub_cal) - 1``, a calibration by one factor on the point."""


def scaled(sc: Scenario, gen: float, learner: float) -> Scenario:
    """``sc`` with its generation cost terms (decode, prefill, overhead) times ``gen`` and
    its learner terms times ``learner``: the two calibration knobs."""
    c = sc.cost
    cost = dataclasses.replace(
        c,
        a_s=c.a_s * gen,
        b_s=c.b_s * gen,
        c_s=c.c_s * gen,
        prefill_s_per_token=c.prefill_s_per_token * gen,
        gen_overhead_s=c.gen_overhead_s * gen,
        learner_const_s=c.learner_const_s * learner,
        learner_s_per_token=c.learner_s_per_token * learner,
    )
    return dataclasses.replace(sc, cost=cost)


IMBALANCE, SP = "balanced", 4
"""Data-parallel imbalance of the learner (``--dp-imbalance``, ``--sp``): ``off``, or the
assignment of :class:`sim.models.dp_imbalance.Imbalance` of each optimizer update's
``MINI G`` sequences over trainer GPUs / ``SP`` ranks. The recipe's run script keeps
verl's default ``trainer.balance_batch=True`` (``balanced``) and sets
``ulysses_sequence_parallel_size=4``."""


def learner_imbalance() -> Imbalance | None:
    """:data:`IMBALANCE` as the learner's :class:`Imbalance`: ``verl`` balances each local
    update's ``B G`` sequences and waits per mini-batch (``B / MINI`` of them), the other
    assignments deal each optimizer update's ``MINI G`` sequences alone."""
    if IMBALANCE == "off":
        return None
    if IMBALANCE == "verl":
        return Imbalance(B * G, G, "verl", SP, mini_batches=B // MINI)
    return Imbalance(MINI * G, G, IMBALANCE, SP)


BATCHING = "verl"
"""The trainer's collectives (``--batching``): ``verl``, per token-budget micro-batch over
hybrid-sharded FSDP as the recipe's run script sets it (:data:`RECIPE_BATCHING`), or
``off``, once per update over every trainer GPU (what this bench ran before)."""

RECIPE_BATCHING = DynamicBatch(max_tokens_per_gpu=2 * (2048 + 28 * 1024), sp=4, shard_gpus=8)
"""``use_dynamic_bsz=True``, ``ppo_max_token_len_per_gpu = 2 (max prompt + max response)
= 61,440``, ``ulysses_sequence_parallel_size = 4``, ``fsdp_size = 8``
(``recipe/fully_async_policy/shell/dapo_7b_math_fsdp2_*.sh`` at commit 9280c114)."""


def step_tokens(sc: Scenario, seed: int = 0, draws: int = 8) -> float:
    """Mean tokens (prompt + response) of a step of B prompts x G from the scenario's
    length model, over ``draws`` draws: where :func:`apply_split` makes the learner exact."""
    rng = np.random.default_rng(seed)
    x = [sc.lengths.sample(rng, B, G, 0).sum() + B * G * sc.prompt_tokens for _ in range(draws)]
    return float(np.mean(x))


ITER_OVERHEAD_S: float | None = None
"""The decode roofline's per-iteration constant (``--iter-overhead-ms``; None: the
roofline's default, :class:`sim.models.roofline.RooflineConfig`). It sets what a nearly
empty engine (the tail of a batch) costs against a full one."""

CONCURRENCY = "verl"
"""Prompts (groups) generating at once (``--concurrency``): ``verl``, the rollouter's
``max_concurrent_samples`` (:func:`verl_concurrency`), or ``b``, the pipeline's default B
(what this bench ran before)."""

SERVER_SLOTS = 16
"""Prompts per rollout server in verl fully-async's rollouter: ``max_concurrent_samples =
16 x len(server_handles)``, capped at ``max_required_samples``
(``recipe/fully_async_policy/fully_async_rollouter.py``, ``set_max_required_samples``, at
commit 19997f9e)."""


def verl_concurrency(half: int, threshold: float) -> int:
    """verl's ``max_concurrent_samples`` on ``half`` rollout GPUs (``half / TP`` servers) at
    ``staleness_threshold``: ``min(16 servers, (1 + threshold) K MINI require_batches)``
    prompts, ``B = MINI require_batches``."""
    return min(SERVER_SLOTS * (half // TP), int(B * (1 + threshold) * K))


def simulate(
    half: int, threshold: float, versions: int, seed: int, gen: float = 1.0, learner: float = 1.0
) -> tuple[float, float]:
    """Steady-state simulated (seconds per weight version, learner seconds per version) on
    ``half``:``half`` GPUs at verl's ``staleness_threshold``: K learner steps of B prompts
    per version, averaged over the versions after the first; ``gen``, ``learner``: the
    knobs of :func:`scaled`."""
    s = math.ceil(2 * (1 + threshold) * K)
    mode = "abort" if threshold > 0 else "drain"
    sc = apply_overrides(
        load_scenario("longcot"), model="qwen2.5-7b", gpu="h20", tp=TP, kv_cache=False
    )
    if ITER_OVERHEAD_S is not None:
        roof = roofline("qwen2.5-7b", "h20", tp=TP, iter_overhead_s=ITER_OVERHEAD_S)
        sc = dataclasses.replace(sc, cost=roofline_cost(roof, base=sc.cost))
    sc = apply_split(
        sc,
        parse_split(2 * half, f"{half}:{half}", TP),
        get_model("qwen2.5-7b"),
        get_gpu("h20"),
        phases=("timing_s/update_actor",),  # rollout log-probs, no KL: no old_log_prob, no ref
        updates=B // MINI,
        imbalance=learner_imbalance(),
        batching=None if BATCHING == "off" else RECIPE_BATCHING,
        tokens_at=step_tokens(sc),
    )
    conc = "" if CONCURRENCY == "b" else f":concurrency={verl_concurrency(half, threshold)}"
    pipe = parse_pipeline(f"async:{s}:threshold={threshold:g}:sync_every={K}:sync={mode}{conc}")
    cfg = RunConfig(steps=K * versions, prompts=B, seed=seed)
    steps = run_pipeline(scaled(sc, gen, learner), StaticG(G), cfg, pipe).steps.sort("step")
    ends = steps["t_end"].to_list()
    train = steps["train_time"].to_list()[K:]
    return (ends[-1] - ends[K - 1]) / (versions - 1), sum(train) / (versions - 1)


def calibrate(
    half: int, threshold: float, step_s: float, actor_s: float, versions: int, seeds: list[int]
) -> tuple[float, float]:
    """(gen, learner) scales that make the simulated point match the published one: the
    learner scale from ``timing_s/update_actor`` (``actor_s``, exact: learner time does
    not depend on generation), then the generation scale by bisection on its log so that
    the step time matches ``step_s`` (the step time grows with it). A published step
    shorter than its learner time cannot be matched: the bisection then ends at its
    lower bracket (generation 1/64 as costly)."""

    def mean(gen: float, learner: float) -> tuple[float, float]:
        runs = [simulate(half, threshold, versions, sd, gen, learner) for sd in seeds]
        return sum(r[0] for r in runs) / len(runs), sum(r[1] for r in runs) / len(runs)

    learner = actor_s / mean(1.0, 1.0)[1]
    lo, hi = -6.0, 6.0  # log2 of the generation scale
    for _ in range(BISECTIONS):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if mean(2**mid, learner)[0] < step_s else (lo, mid)
    return 2 ** ((lo + hi) / 2), learner


def naive_errors(name: str, points: list, cal: int) -> list[tuple[float, float, float, float]]:
    """Per point of curve ``name`` (of :data:`CURVES`), the naive rules calibrated on
    ``points[cal]``: ``(constant, tokens per GPU)`` relative errors against the published
    mean step time, then the same against the first 100 steps (:data:`FIRST_100`).
    Raises KeyError on an unknown curve, IndexError on ``cal`` off the curve."""
    first = FIRST_100[name]
    cal_n = points[cal][1]
    out = []
    for i, (_, n, _, _, _) in enumerate(points):
        errs = []
        for series in ([p[3] for p in points], first):
            c = Point(name, name, cal_n, 2 * cal_n, series[cal])
            errs += [predict(rule, c, n) / series[i] - 1 for rule in RULES]
        out.append((errs[0], errs[1], errs[2], errs[3]))
    return out


def baseline_rows(name: str, points: list, cal: int) -> list[str]:
    """Markdown rows of :func:`naive_errors` (no simulation)."""
    return [
        f"| {name} | {points[cal][0]} | {label} | {step_s:.2f} | "
        + " | ".join(f"{100 * e:+.1f} %" for e in errs)
        + " |"
        for (label, _, _, step_s, _), errs in zip(points, naive_errors(name, points, cal))
    ]


def curve_rows(name: str, points: list, cal: int, versions: int, seeds: list[int]) -> list[str]:
    """Markdown rows of one curve calibrated on ``points[cal]``: every point simulated with
    that calibration, its error against the published step time (mean over ``seeds``,
    their range in brackets when several)."""
    _, half, thr, step_s, actor_s = points[cal]
    gen, learner = calibrate(half, thr, step_s, actor_s, versions, seeds)
    print(f"{name}: calibrated on {points[cal][0]}: generation x{gen:.3f}, learner x{learner:.3f}")
    rows, sims_all = [], []
    for i, (label, half, thr, step_s, actor_s) in enumerate(points):
        runs = [simulate(half, thr, versions, sd, gen, learner) for sd in seeds]
        sims = [r[0] for r in runs]
        sim = sum(sims) / len(sims)
        sims_all.append(sim)
        spread = f" ({min(sims):.1f}-{max(sims):.1f})" if len(sims) > 1 else ""
        err = f"{100 * (sim - step_s) / step_s:+.1f} %" + (" (calibration)" if i == cal else "")
        lrn = sum(r[1] for r in runs) / len(runs)
        rows.append(
            f"| {name} | {points[cal][0]} | {label} | {step_s:.2f} | {sim:.1f}{spread} | {err} "
            f"| {actor_s:.2f} | {lrn:.1f} |"
        )
    first = FIRST_100[name]
    naive = naive_errors(name, points, cal)
    for i, row in enumerate(rows):
        shape = (sims_all[i] / sims_all[cal]) / (first[i] / first[cal]) - 1
        c_mean, t_mean, c_first, t_first = (f"{100 * e:+.1f}" for e in naive[i])
        rows[i] = (
            row + f" {first[i] / 100:.1f} | {100 * shape:+.1f} % | {c_mean} / {t_mean} % "
            f"| {c_first} / {t_first} % |"
        )
    return rows


def main() -> None:
    global IMBALANCE, SP, BATCHING, CONCURRENCY, ITER_OVERHEAD_S
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--versions", type=int, default=5, help="weight versions per run (>= 2)")
    ap.add_argument("--seeds", default="0", help="comma-separated seeds (mean over them)")
    ap.add_argument(
        "--calibrations",
        choices=("default", "all"),
        default="default",
        help="calibrate on each curve's default point, or on each point in turn",
    )
    ap.add_argument(
        "--calibrate-on",
        metavar="POINT",
        help="calibrate only on this point of each curve in --curves (e.g. 16:16 or 0.1); "
        "overrides --calibrations",
    )
    ap.add_argument(
        "--dp-imbalance",
        choices=("off", "contiguous", "balanced", "verl"),
        default=IMBALANCE,
        help="learner data-parallel imbalance (sim/models/dp_imbalance.py)",
    )
    ap.add_argument("--sp", type=int, default=SP, help="GPUs per data-parallel rank")
    ap.add_argument(
        "--batching",
        choices=("verl", "off"),
        default=BATCHING,
        help="trainer collectives per token-budget micro-batch, HSDP (sim/models/micro_batching.py)",
    )
    ap.add_argument(
        "--concurrency",
        choices=("verl", "b"),
        default=CONCURRENCY,
        help="prompts generating at once: verl's 16 per rollout server, or B",
    )
    ap.add_argument(
        "--curves", default="gpus,staleness", help="comma-separated curves to run (of CURVES)"
    )
    ap.add_argument(
        "--iter-overhead-ms",
        type=float,
        help="decode roofline's per-iteration constant, ms (default: the roofline's 2 ms)",
    )
    ap.add_argument(
        "--baselines-only",
        action="store_true",
        help="print the naive rules' errors at every point, no simulation",
    )
    ap.add_argument("--out", default="runs/verl_validation", help="folder of table.md")
    args = ap.parse_args()
    if args.versions < 2:
        ap.error("--versions: need >= 2 (the first version is warm-up)")
    try:
        seeds = [int(x) for x in args.seeds.split(",")]
    except ValueError:
        ap.error(f"--seeds: need comma-separated integers, got {args.seeds!r}")
    IMBALANCE, SP = args.dp_imbalance, args.sp
    BATCHING, CONCURRENCY = args.batching, args.concurrency
    if args.iter_overhead_ms is not None:
        if not (math.isfinite(args.iter_overhead_ms) and args.iter_overhead_ms >= 0):
            ap.error(f"--iter-overhead-ms: need a finite number >= 0, got {args.iter_overhead_ms}")
        ITER_OVERHEAD_S = args.iter_overhead_ms / 1e3
    lines = [
        "| curve | calibrated on | point | published s/step | predicted s/step | error | "
        "published update_actor s | simulated learner s | published s/step, steps 1-100 | "
        "shape error vs steps 1-100 | constant / tokens per GPU, error | "
        "constant / tokens per GPU vs steps 1-100 |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    if args.baselines_only:
        lines = [
            "| curve | calibrated on | point | published s/step | constant | tokens per GPU "
            "| constant vs steps 1-100 | tokens per GPU vs steps 1-100 |",
            "|---|---|---|---|---|---|---|---|",
        ]
    curves = [c.strip() for c in args.curves.split(",")]
    if not curves or any(c not in CURVES for c in curves):
        ap.error(f"--curves: choose from {', '.join(CURVES)}, got {args.curves!r}")
    for name in curves:
        default, points = CURVES[name]
        cals = range(len(points)) if args.calibrations == "all" else [default]
        if args.calibrate_on is not None:
            labels = [p[0] for p in points]
            if args.calibrate_on not in labels:
                ap.error(
                    f"--calibrate-on: curve {name!r} has points {', '.join(labels)}, "
                    f"got {args.calibrate_on!r}"
                )
            cals = [labels.index(args.calibrate_on)]
        for cal in cals:
            if args.baselines_only:
                lines += baseline_rows(name, points, cal)
            else:
                lines += curve_rows(name, points, cal, args.versions, seeds)
    table = "\n".join(lines)
    print(table)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.md").write_text(table + "\n")


if __name__ == "__main__":
    main()
