"""Trainer time across GPU counts and batch settings: verl's published ``update_actor``
beside the naive rules.

verl's Qwen2.5-Math-7B experiments publish the mean ``timing_s/update_actor`` per step
(512 prompts x 16 rollouts) at three GPU counts in two placements
(``calibration/data/verl_phase_tables.csv``, table ``7b-gpus``): fully-async on 16, 32,
64 trainer GPUs and colocated on 32, 64, 128; and across ``require_batches`` 1, 2, 4 on
64:64 (table ``7b-require-batches``, 300 steps). Each point calibrates in turn and predicts
the others of its curve; a prediction's error is ``predicted / published - 1``. Rules:

- ``model``: the learner roofline with verl's token-budget micro-batches
  (:func:`sim.models.learner_cost.learner_phases` with
  :class:`sim.models.micro_batching.DynamicBatch`) times verl's data-parallel wait
  (:class:`sim.models.dp_imbalance.Imbalance`, assignment ``verl``), over the
  ``longcot`` length model, scaled by one factor onto the calibration point;
- ``constant``: ``t_i = t_c``;
- ``tokens_per_gpu``: ``t_i = t_c N_c / N_i`` (the tokens per step are fixed along a
  curve).

Plan and results: docs/pipelines.md, "Trainer time across GPU counts". Run:
``python -m rolloutlab.calibration.validation.trainer_scaling``.
"""

from __future__ import annotations

import argparse
import csv
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np
from rolloutlab.sim.models.dp_imbalance import Imbalance
from rolloutlab.sim.models.hardware import get_gpu, get_model
from rolloutlab.sim.models.learner_cost import Layout, learner_phases
from rolloutlab.sim.models.micro_batching import DynamicBatch
from rolloutlab.sim.scenario import load_scenario

RULES = ("model", "constant", "tokens_per_gpu")
"""Rules, in the order of :func:`curve_errors`' tables."""

PASS = 0.20
"""A curve passes when every held-out point is within 20 % whichever point calibrates."""

STEP_PROMPTS, G, MINI_PROMPTS, SP = 512, 16, 32, 4
"""A published step's prompts, rollouts per prompt, ``ppo_mini_batch_size`` and
``ulysses_sequence_parallel_size`` (README "Asynchronous Training on 7B Model"; run
scripts ``dapo_7b_math_fsdp2_*.sh``)."""

BUDGET = 2 * (2048 + 28 * 1024)
"""``ppo_max_token_len_per_gpu = 2 (max prompt + max response)`` in every run script."""


@dataclass(frozen=True)
class Setup:
    """How one placement's trainer runs a 512-prompt step."""

    call_prompts: int
    """Prompts per balanced update call: fully-async ``require_batches x
    ppo_mini_batch_size`` = 128, colocated the whole batch, 512."""
    fsdp_size: int
    """``fsdp_size`` of the run scripts: 8 (fully-async, ``recipe/fully_async_policy/
    shell`` at b25bb7d4), 2 (colocated, ``exp/qwen2-7B-math_*/fsdp2_colocate`` at
    9280c114)."""
    prompts_per_gpu: int = 0
    """When > 0, a call holds this many prompts per trainer GPU instead of
    ``call_prompts`` (:data:`SCRIPTS_FULLY_ASYNC`)."""

    def imbalance(self, gpus: int) -> Imbalance:
        """verl's wait per mini-batch for one call on ``gpus`` trainer GPUs."""
        call = self.prompts_per_gpu * gpus if self.prompts_per_gpu else self.call_prompts
        return Imbalance(call * G, G, "verl", sp=SP, mini_batches=call // MINI_PROMPTS)


SETUPS = {"fully-async": Setup(128, 8), "colocate-sync": Setup(512, 2)}
"""Placement (the table's ``mode``) -> its trainer set-up, as the README states it."""

SCRIPTS_FULLY_ASYNC = Setup(0, 2, prompts_per_gpu=2)
"""The fully-async trainer as the development branch's ``exp/`` scripts ran it
(``recipe/fully_async_policy/exp/qwen2-7B-math_*/fsdp2_fully-async_*/run.sh`` and the
trainer at 9280c114, before ``require_batches`` existed): each local update takes
``required_samples = minimal_bsz x ppo_mini_batch_size / n`` = 2 prompts per trainer GPU
(``minimal_bsz`` = trainer GPUs for FSDP), so 32, 64, 128 prompts on 16, 32, 64 GPUs,
synced every 16, 8, 4 updates (512 prompts a version everywhere); ``fsdp_size`` 2
(``--verl-setup scripts``)."""


class PhaseTableError(ValueError):
    """A row of a published phase table that cannot be read: names file, row and field."""


@dataclass(frozen=True)
class Point:
    """One published run: ``trainer_gpus``, its mean ``update_actor`` seconds per step and
    its ``require_batches`` (0 where the table states none)."""

    mode: str
    trainer_gpus: int
    update_actor_s: float
    require_batches: int = 0


def default_path() -> Path:
    """The bundled table, ``calibration/data/verl_phase_tables.csv``."""
    return Path(str(resources.files("rolloutlab.calibration") / "data" / "verl_phase_tables.csv"))


def load_curves(path: Path | None = None, table: str = "7b-gpus") -> dict[str, list[Point]]:
    """The curves of ``table`` in the phase table at ``path``, keyed by placement
    (``mode``), each sorted by trainer GPUs, then ``require_batches``. Raises
    PhaseTableError naming file, row (1 = first data row) and field on a missing column,
    a non-positive or non-integer GPU count, a non-integer ``require_batches`` or a
    non-finite or non-positive ``update_actor_s``."""
    path = default_path() if path is None else Path(path)
    curves: dict[str, list[Point]] = {}
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        need = ("table", "mode", "trainer_gpus", "update_actor_s")
        missing = [c for c in need if c not in (reader.fieldnames or [])]
        if missing:
            raise PhaseTableError(f"{path}: header: missing column(s) {', '.join(missing)}")
        for row_no, row in enumerate(reader, start=1):
            if row["table"].strip() != table:
                continue
            raw_n, raw_t = row["trainer_gpus"].strip(), row["update_actor_s"].strip()
            try:
                n = int(raw_n)
            except ValueError:
                n = 0
            if n <= 0:
                raise PhaseTableError(
                    f"{path}: row {row_no}: trainer_gpus: need a positive integer, got {raw_n!r}"
                )
            try:
                t = float(raw_t)
            except ValueError:
                t = math.nan
            if not (math.isfinite(t) and t > 0):
                raise PhaseTableError(
                    f"{path}: row {row_no}: update_actor_s: need a positive number, got {raw_t!r}"
                )
            raw_rb = (row.get("require_batches") or "").strip()
            if raw_rb and not raw_rb.isdigit():
                raise PhaseTableError(
                    f"{path}: row {row_no}: require_batches: need an integer, got {raw_rb!r}"
                )
            mode = row["mode"].strip()
            curves.setdefault(mode, []).append(Point(mode, n, t, int(raw_rb or 0)))
    return {
        k: sorted(v, key=lambda p: (p.trainer_gpus, p.require_batches)) for k, v in curves.items()
    }


def modelled_update_actor(setup: Setup, gpus: int) -> float:
    """Uncalibrated seconds of ``update_actor`` for a 512-prompt step on ``gpus`` H20
    trainer GPUs (Qwen2.5-7B shapes, the ``longcot`` length model; module docstring).
    Raises ValueError where the layout does not divide (``sp``, ``fsdp_size``)."""
    sc = load_scenario("longcot")
    rng = np.random.default_rng(0)
    tokens = float(
        np.mean([sc.lengths.sample(rng, STEP_PROMPTS, G, 0).sum() for _ in range(8)])
        + STEP_PROMPTS * G * sc.prompt_tokens
    )
    batching = DynamicBatch(BUDGET, sp=SP, shard_gpus=setup.fsdp_size)
    phases = learner_phases(
        get_model("qwen2.5-7b"),
        get_gpu("h20"),
        Layout(gpus),
        tokens,
        updates=STEP_PROMPTS // MINI_PROMPTS,
        ref=False,
        batching=batching,
    )
    wait = setup.imbalance(gpus).factor(sc.lengths, sc.prompt_tokens, gpus)
    return phases["timing_s/update_actor"] * wait


def calibrated(published: list[float], modelled: list[float], cal: int) -> list[float]:
    """Predictions scaled by one factor so that point ``cal`` matches: ``published[cal]
    modelled[i] / modelled[cal]``."""
    return [published[cal] * m / modelled[cal] for m in modelled]


def curve_errors(points: list[Point], modelled: list[float]) -> dict[str, list[list[float]]]:
    """Per rule (:data:`RULES`), ``errors[c][i]``: the relative error at point ``i``
    calibrated on point ``c`` (0 on the diagonal). ``modelled``: the model's uncalibrated
    seconds at each point."""
    pub = [p.update_actor_s for p in points]
    n = [p.trainer_gpus for p in points]
    preds = {
        "model": [calibrated(pub, modelled, c) for c in range(len(pub))],
        "constant": [[pub[c]] * len(pub) for c in range(len(pub))],
        "tokens_per_gpu": [[pub[c] * n[c] / m for m in n] for c in range(len(pub))],
    }
    return {
        r: [[p / t - 1 for p, t in zip(row, pub, strict=True)] for row in preds[r]] for r in RULES
    }


def worst(errors: list[list[float]]) -> float:
    """Largest absolute error off the diagonal."""
    return max(
        (abs(e) for c, row in enumerate(errors) for i, e in enumerate(row) if i != c), default=0.0
    )


def _rows(label: str, pts: list[Point], modelled: list[float], x: list[str]) -> list[str]:
    errs = curve_errors(pts, modelled)
    pub = ", ".join(f"{p.update_actor_s:.2f}" for p in pts)
    mod = ", ".join(f"{m:.1f}" for m in modelled)
    lines = []
    for rule in RULES:
        w = worst(errs[rule])
        for c in range(len(pts)):
            each = " / ".join(
                f"{x[i]}: {'cal.' if i == c else f'{100 * errs[rule][c][i]:+.1f}'}"
                for i in range(len(pts))
            )
            verdict = f"{100 * w:.1f} % {'pass' if w <= PASS else 'fail'}" if c == 0 else ""
            lines.append(
                f"| {label} | {', '.join(x)} | {pub} | {mod} | {rule} | {x[c]} | {each} "
                f"| {verdict} |"
            )
    return lines


def table(path: Path | None = None, setups: dict[str, Setup] | None = None) -> list[str]:
    """Markdown rows: per curve, rule and calibration point, the errors (%) at every point
    and the rule's worst held-out error, pass or fail. Curves: the placements of table
    ``7b-gpus`` across trainer GPUs, and table ``7b-require-batches`` across
    ``require_batches`` (64 fully-async trainer GPUs; a call of ``require_batches x 32``
    prompts). ``setups``: placement -> trainer set-up (default :data:`SETUPS`)."""
    setups = SETUPS if setups is None else setups
    lines = [
        "| curve | points | published s | model, uncalibrated s | rule "
        "| calibrated on | error % at ... | worst held-out |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for mode, pts in load_curves(path).items():
        modelled = [modelled_update_actor(setups[mode], p.trainer_gpus) for p in pts]
        lines += _rows(f"{mode} GPUs", pts, modelled, [str(p.trainer_gpus) for p in pts])
    for mode, pts in load_curves(path, "7b-require-batches").items():
        fsdp = SETUPS[mode].fsdp_size  # require_batches exists in the README's code alone
        modelled = [
            modelled_update_actor(Setup(p.require_batches * MINI_PROMPTS, fsdp), p.trainer_gpus)
            for p in pts
        ]
        x = [f"rb {p.require_batches}" for p in pts]
        lines += _rows(f"{mode} require_batches", pts, modelled, x)
    return lines


def main(argv: list[str] | None = None) -> None:
    """Print :func:`table`; ``--verl-setup scripts`` models the fully-async trainer as
    :data:`SCRIPTS_FULLY_ASYNC`, ``--data`` reads another phase table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=None, help="phase table (default: bundled)")
    ap.add_argument("--verl-setup", choices=("readme", "scripts"), default="readme")
    args = ap.parse_args(argv)
    setups = dict(SETUPS)
    if args.verl_setup == "scripts":
        setups["fully-async"] = SCRIPTS_FULLY_ASYNC
    try:
        lines = table(args.data, setups)
    except PhaseTableError as e:
        raise SystemExit(str(e)) from None
    print("\n".join(lines))


if __name__ == "__main__":
    main()
